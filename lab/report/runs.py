"""Finding run directories and loading what each run wrote (config.yaml, csv/metrics.csv, csv/hparams.yaml,
.hydra/overrides.yaml, status.json), so the report works whether W&B was online, offline or disabled, and on
runs still in progress."""
from __future__ import annotations

import csv
import glob
import itertools
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from lab.errors import LabError
from lab.runtime.rundir.process import start_time

# A run on another host (its pid cannot be checked from here) with no end recorded is running while it writes:
# its newest file is younger than HEARTBEAT_GAPS times the longest gap between its own log lines, and never
# less than HEARTBEAT_MIN_S (a run that has logged too little to know its rhythm).
HEARTBEAT_GAPS = 3
HEARTBEAT_MIN_S = 60.0
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)", re.M)
DEAD = ("stopped", "failed", "diverged")  # states a run does not continue from by itself


@dataclass
class Run:
    name: str
    path: Path
    config: dict  # flattened: "task.optimizer.lr" -> value
    overrides: list[str]
    rows: list[dict[str, float]]  # one per CSV line, empty cells dropped
    params: dict[str, int] = field(default_factory=dict)
    status: str = "finished"  # finished | running | stopped (no end recorded) | interrupted | failed | diverged
    status_note: str = ""  # the error line of a failed run, or why a run is taken to be stopped
    diverged_at: int | None = None  # the first step a loss was NaN or infinite
    wall_s: float | None = None  # time spent training over all attempts (status.json), else train.log's closing line
    attempts: int = 1  # launches of this run (status.json): > 1 means it was resumed
    examples: list[tuple[str, int, str]] = field(default_factory=list)  # (kind, step, text): samples, translations
    final_metrics: dict[str, float] = field(default_factory=dict)  # status.json's: cost/train_flops, cost/tokens, ...
    host: str | None = None  # where the last attempt ran, and when (unix seconds; ended None while running)
    started: float | None = None
    ended: float | None = None
    history: list[dict] = field(default_factory=list)  # status.json's state changes (lab.runtime.rundir.history)

    def series(self, column: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one metric, in logging order."""
        pts = [(r.get("step", i), r[column]) for i, r in enumerate(self.rows) if column in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    def final(self, column: str) -> float | None:
        values = self.series(column)[1]
        return values[-1] if values else None

    @property
    def state(self) -> str:
        """How the run stands, in words: "diverged at step 40", "failed: <error>", "running"."""
        if self.diverged_at is not None:
            return f"diverged at step {self.diverged_at:,}" + (f" ({self.status_note})" if self.status_note else "")
        return self.status + (f": {self.status_note}" if self.status_note else "")

    @property
    def resumed(self) -> bool:
        return self.attempts > 1

    @property
    def last_step(self) -> int | None:
        steps = [r["step"] for r in self.rows if "step" in r]
        return int(max(steps)) if steps else None


@dataclass
class Skipped:
    path: Path
    reason: str


def flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def read_csv(path: Path) -> list[dict[str, float]]:
    """Numeric cells of metrics.csv. A run still writing may leave a last line without its newline: it may
    be cut mid-number, so it is not read (the next render picks it up)."""
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = []
    for row in csv.DictReader(text.splitlines()):
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


def expand(paths: list[Path]) -> list[Path]:
    """Absolute paths (so run names and the common root never depend on the cwd), with shell-style globs the
    shell did not expand (quoted, or from another tool) replaced by the directories they match: a glob like
    `sweep/*` also matches files (multirun.yaml, report.html), which are not runs."""
    return [p for p, _ in _expand(paths)]


def _expand(paths: list[Path]) -> list[tuple[Path, bool]]:
    """expand, with whether each path came from a glob."""
    out = []
    for p in paths:
        if not p.exists() and glob.has_magic(str(p)):
            matches = sorted(Path(m).resolve() for m in glob.glob(str(p)) if Path(m).is_dir())
            if not matches:
                raise LabError(f"{p} matches no directory; pass a multirun directory, run directories or a glob that matches them")
            out += [(m, True) for m in matches]
        elif not p.exists():
            raise LabError(f"{p} does not exist; pass a multirun directory, run directories or a glob")
        else:
            out.append((p.resolve(), False))
    return out


def find_runs(paths: list[Path]) -> tuple[list[Path], list[Skipped]]:
    """Run directories (a config.yaml written by lab.train) at or below each path, in path order, and the
    ones that cannot be shown (no metrics yet), with the reason: a run is never dropped without saying so."""
    found: list[Path] = []
    skipped: list[Skipped] = []
    for p, globbed in _expand(paths):
        candidates = [p] if (p / "config.yaml").is_file() else sorted(
            (c.parent for c in p.rglob("config.yaml") if ".hydra" not in c.parts and "wandb" not in c.parts),
            key=lambda d: [(0, int(s), "") if s.isdigit() else (1, 0, s) for s in d.relative_to(p).parts],  # job 10 after 9
        )
        if not candidates and globbed:  # one directory a glob matched that holds no run: said, not fatal
            skipped.append(Skipped(p, "matched by the glob, but holds no run (no config.yaml written by lab.train)"))
        elif not candidates:
            raise LabError(f"no runs under {p}: a run directory has config.yaml and csv/metrics.csv (written by lab.train)")
        for c in candidates:
            if c in found or any(s.path == c for s in skipped):
                continue
            if (c / "csv" / "metrics.csv").is_file():
                found.append(c)
            else:
                skipped.append(Skipped(c, "no csv/metrics.csv yet (the run stopped before its first logged step)"))
    if not found:
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in skipped)
        raise LabError(f"no run under {', '.join(map(str, paths))} has metrics to show ({reasons})")
    return found, skipped


# An example the task logged (lab.tasks.base.log_examples): "<kind> @ step <n> | <column>: <value> | ...", the
# values may span lines, up to the next log line.
EXAMPLE = re.compile(r"^\[[^\]\n]+\]\[lab\]\[INFO\] - ([\w/ -]+) @ step (\d+) \| (.*?)(?=^\[\d{4}-\d\d-\d\d[ T]|\Z)", re.M | re.S)


def read_examples(log_text: str) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2)), m.group(3).rstrip("\n")) for m in EXAMPLE.finditer(log_text)]


def read_status(path: Path) -> dict:
    """status.json (lab.runtime.sweeps.jobs) as a dict; {} when the run wrote none or it is unreadable."""
    try:
        data = json.loads((path / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def heartbeat_limit(log_text: str) -> float:
    """How long a run may write nothing and still be taken to be running: HEARTBEAT_GAPS times the longest
    gap between its own timestamped log lines (a slow model logs rarely), at least HEARTBEAT_MIN_S."""
    stamps = [datetime.fromisoformat(t.replace(" ", "T")).timestamp() for t in LOG_TIME.findall(log_text)]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return max(HEARTBEAT_MIN_S, HEARTBEAT_GAPS * max(gaps, default=0.0))


def run_status(path: Path, now: float | None = None, log_text: str | None = None) -> tuple[str, str]:
    """How a run ended: status.json when the run wrote one (finished / interrupted / failed, with the error),
    else train.log's closing line. A run with no end recorded is running when status.json's pid is alive on
    this host and is still the process that started then (`pid_started`: a reused pid is another process);
    dead: stopped, whatever its files' age. On another host: while it still writes (heartbeat_limit)."""
    data = read_status(path)
    state = str(data.get("status") or data.get("state") or "")
    if state and state != "running":  # "running" is checked below: a killed job says so too
        state = {"completed": "finished"}.get(state, state)
        return state, str(data.get("error") or data.get("reason") or "")
    log = path / "train.log"
    if log_text is None:
        log_text = log.read_text(errors="replace") if log.is_file() else ""
    if "finished in" in log_text[-4000:]:
        return "finished", ""
    pid, host = data.get("pid"), data.get("host")
    if isinstance(pid, int) and host == os.uname().nodename:
        if not pid_alive(pid):
            return "stopped", f"no end recorded and its process (pid {pid} on {host}) is gone: killed or crashed"
        recorded, started = data.get("pid_started"), start_time(pid)
        if recorded is None or started is None or started == recorded:  # no start time to compare: the pid decides
            return "running", ""
        return "stopped", (f"no end recorded and its process (pid {pid} on {host}, started {recorded}) is gone: "
                           f"pid {pid} is now another process (started {started}): killed or crashed")
    files = [f for f in (log, path / "csv" / "metrics.csv", path / "status.json") if f.is_file()]
    age = (now or time.time()) - max((f.stat().st_mtime for f in files), default=0.0)
    limit = heartbeat_limit(log_text)
    if age < limit:
        return "running", ""
    return "stopped", f"no end recorded and nothing written for {age:,.0f}s (allowed {limit:,.0f}s): killed or crashed"


def diverged_at(rows: list[dict[str, float]]) -> int | None:
    """The first step at which a loss column is NaN or infinite (the run diverged), else None."""
    for i, row in enumerate(rows):
        if any("loss" in k and not math.isfinite(v) for k, v in row.items()):
            return int(row.get("step", i))
    return None


def _time(value) -> float | None:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


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
    recorded = read_status(path)
    log = path / "train.log"
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    status, note = run_status(path, log_text=log_text)
    wall = re.findall(r"finished in ([0-9.]+)s", log_text[-4000:])
    wall_s = recorded.get("wall_s") or (float(wall[-1]) if wall else None)
    rows = read_csv(path / "csv" / "metrics.csv")
    diverged = diverged_at(rows)
    if diverged is not None:  # whatever the run did next (stopped, failed, trained on NaN), it diverged
        status, note = "diverged", (note if status in ("failed", "stopped") else "")
    return Run(name=name, path=path, config=config, overrides=list(overrides or []), rows=rows, params=params,
               status=status, status_note=note, diverged_at=diverged, wall_s=wall_s,
               attempts=int(recorded.get("attempts") or 1), examples=read_examples(log_text),
               final_metrics={k: float(v) for k, v in (recorded.get("metrics") or {}).items() if isinstance(v, (int, float))},
               host=recorded.get("host"), started=_time(recorded.get("started")),
               ended=_time(recorded.get("ended") or recorded.get("updated")) if status != "running" else time.time(),
               history=[e for e in recorded.get("history") or [] if isinstance(e, dict)])


def common_parent(paths: list[Path]) -> Path:
    parts = [p.resolve().parts for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return Path(*common)
