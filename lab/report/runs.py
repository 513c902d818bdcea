"""Finding run directories and loading what each run wrote (config.yaml, csv/metrics.csv, csv/hparams.yaml,
.hydra/overrides.yaml), so the report works whether W&B was online, offline or disabled."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab.errors import LabError
from lab.report.stats import metric_direction


@dataclass
class Run:
    name: str
    path: Path
    config: dict  # flattened: "task.optimizer.lr" -> value
    overrides: list[str]
    rows: list[dict[str, float]]  # one per CSV line, empty cells dropped
    params: dict[str, int] = field(default_factory=dict)

    def series(self, column: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one metric, in logging order."""
        pts = [(r.get("step", i), r[column]) for i, r in enumerate(self.rows) if column in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    def final(self, column: str) -> float | None:
        values = self.series(column)[1]
        return values[-1] if values else None

    def best(self, column: str) -> float | None:
        values = [v for v in self.series(column)[1] if math.isfinite(v)]
        direction = metric_direction(column)
        if not values or direction is None:
            return None
        return min(values) if direction == "min" else max(values)


def flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def read_csv(path: Path) -> list[dict[str, float]]:
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            parsed = {}
            for k, v in row.items():
                if k is None or v in ("", None):
                    continue
                try:
                    parsed[k] = float(v)
                except ValueError:
                    continue
            rows.append(parsed)
    return rows


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories (a config.yaml next to csv/metrics.csv) at or below each path, in path order."""
    found: list[Path] = []
    for p in paths:
        if not p.exists():
            raise LabError(f"{p} does not exist; pass a multirun directory or run directories")
        candidates = [p] if (p / "config.yaml").is_file() else sorted(
            (c.parent for c in p.rglob("config.yaml") if ".hydra" not in c.parts and "wandb" not in c.parts),
            key=lambda d: [int(s) if s.isdigit() else s for s in d.relative_to(p).parts],
        )
        runs = [c for c in candidates if (c / "csv" / "metrics.csv").is_file()]
        if not runs:
            raise LabError(f"no runs under {p}: a run directory has config.yaml and csv/metrics.csv (written by lab.train)")
        found += [r for r in runs if r not in found]
    return found


def load_run(path: Path, root: Path) -> Run:
    config = flatten(yaml.load((path / "config.yaml").read_text(), Loader=yaml.CSafeLoader) or {})
    overrides_file = path / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
    params = {}
    hparams = path / "csv" / "hparams.yaml"
    if hparams.is_file():  # parameter counts are logged as hyperparameters next to the config
        for line in hparams.read_text().splitlines():
            if line.startswith(("params/total:", "params/active:")):
                key, value = line.split(":", 1)
                params[key.split("/")[1]] = int(value)
    name = str(path.relative_to(root)) if path != root else path.name
    return Run(name=name, path=path, config=config, overrides=list(overrides or []), rows=read_csv(path / "csv" / "metrics.csv"), params=params)


def common_parent(paths: list[Path]) -> Path:
    parts = [p.resolve().parts for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return Path(*common)
