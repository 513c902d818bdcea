"""Compare runs side by side: `python -m lab.report <multirun dir | run dirs...> [--out DIR]`.

Writes report.html (self-contained: tables + inline PNG charts, opens offline) and report.md (the tables)
from what every run writes locally: config.yaml, csv/metrics.csv, csv/hparams.yaml (parameter counts) and
.hydra/overrides.yaml. So it works whether W&B was online, offline or disabled.
"""
from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab.cli import user_errors_exit
from lab.errors import LabError

# Metric direction by name: lower is better for losses, higher for scores; others are shown, not ranked.
LOWER_BETTER = ("loss", "ppl", "perplexity", "bpb", "error", "wer", "cer")
HIGHER_BETTER = ("acc", "bleu", "chrf", "f1", "precision", "recall", "mfu", "tokens_per_s", "auc")
# Config keys that differ between any two runs without being a choice (where the run was written).
NOT_CHOICES = ("paths.", "dir", "save_dir", "default_root_dir", "dirpath")
X_COLUMNS = ("step", "epoch")
EXPERT = re.compile(r"expert_(\d+)$")


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


def metric_direction(column: str) -> str | None:
    name = column.lower().rsplit("/", 1)[-1]
    if any(k in name for k in LOWER_BETTER):
        return "min"
    if any(k in name for k in HIGHER_BETTER):
        return "max"
    return None


def _flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def _read_csv(path: Path) -> list[dict[str, float]]:
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
    config = _flatten(yaml.load((path / "config.yaml").read_text(), Loader=yaml.CSafeLoader) or {})
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
    return Run(name=name, path=path, config=config, overrides=list(overrides or []), rows=_read_csv(path / "csv" / "metrics.csv"), params=params)


def distinguishing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs (the sweep's axes), locations excluded."""
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if not any(n in k for n in NOT_CHOICES)
            and len({repr(r.config.get(k)) for r in runs}) > 1]


def metric_columns(runs: list[Run]) -> list[str]:
    cols: dict[str, None] = {}
    for r in runs:
        for row in r.rows:
            cols.update(dict.fromkeys(k for k in row if k not in X_COLUMNS))
    return sorted(cols, key=lambda c: (c.split("/")[0] not in ("val", "test", "train"), c))


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:
            return "nan"
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def summary(runs: list[Run], keys: list[str], optimized: str | None) -> tuple[list[str], list[list[str]]]:
    """One row per run: the distinguishing settings, parameters, the optimized metric (best / final), throughput."""
    header = ["run", *keys, "params", "active params"]
    if optimized:
        header += [f"best {optimized}", f"final {optimized}"]
    header += ["tokens/s (device)", "tokens/s (global)", "MFU", "steps"]
    rows = []
    for r in runs:
        row = [r.name, *(_fmt(r.config.get(k)) for k in keys), _fmt(r.params.get("total")), _fmt(r.params.get("active"))]
        if optimized:
            row += [_fmt(r.best(optimized)), _fmt(r.final(optimized))]
        steps = [row_["step"] for row_ in r.rows if "step" in row_]
        row += [_fmt(_median(r.series("perf/tokens_per_s")[1])), _fmt(_median(r.series("perf/tokens_per_s_global")[1])),
                _fmt(_median(r.series("perf/mfu")[1])), _fmt(int(max(steps)) if steps else None)]
        rows.append(row)
    return header, rows


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if math.isfinite(v))
    return values[len(values) // 2] if values else None


def all_metrics(runs: list[Run], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """Every metric column: final value, and the best one where the metric has a direction."""
    header = ["run", *columns]
    rows = []
    for r in runs:
        cells = []
        for c in columns:
            final, best = r.final(c), r.best(c)
            cells.append(_fmt(final) + (f" (best {_fmt(best)})" if best is not None and best != final else ""))
        rows.append([r.name, *cells])
    return header, rows


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)  # fixed margins: bbox_inches="tight" would draw every figure twice
    return base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def run_labels(runs: list[Run], keys: list[str]) -> list[str]:
    """Legend labels: the run's name and its distinguishing settings (last key component)."""
    return [" ".join([r.name, *(f"{k.rsplit('.', 1)[-1]}={_fmt(r.config.get(k))}" for k in keys)]) for r in runs]


def curve_charts(runs: list[Run], columns: list[str], labels: list[str]) -> list[tuple[str, str]]:
    """(title, base64 PNG): every metric logged at more than one step, all runs overlaid (run i in colour i).
    Per-expert MoE shares (one column per expert) are drawn in their own section instead."""
    plt = _pyplot()
    charts = []
    colors = plt.get_cmap("tab20" if len(runs) > 10 else "tab10")
    for c in columns:
        if (is_moe(c) and EXPERT.search(c)) or not any(len(r.series(c)[1]) > 1 for r in runs):
            continue
        fig = plt.figure(figsize=(7.2, 3.4))
        ax = fig.add_axes((0.09, 0.14, 0.56, 0.76))  # legend outside, right of the axes
        for i, r in enumerate(runs):
            x, y = r.series(c)
            if y:
                ax.plot(x, y, label=labels[i], color=colors(i % colors.N), linewidth=1.2, marker="." if len(y) < 30 else None)
        ax.set_title(c, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        charts.append((c, _png(fig)))
        plt.close(fig)
    return charts


def is_moe(column: str) -> bool:
    """MoE routing columns: `<stage>/moe/<layer>/...` (lab tasks) or `moe/...`."""
    return "moe" in column.split("/")[:2]


def moe_charts(runs: list[Run], columns: list[str]) -> list[tuple[str, str]]:
    """Expert load: the final share of tokens routed to each expert (`.../moe/<layer>/expert_<i>`, validation
    when logged, else training) as one heatmap, a row per run and layer and a column per expert, so
    unbalanced routing shows as uneven colour along a row."""
    experts = [c for c in columns if is_moe(c) and EXPERT.search(c)]
    stage = "val/" if any(c.startswith("val/") for c in experts) else ""
    experts = [c for c in experts if c.startswith(stage)]
    rows, labels = [], []
    layers = sorted({EXPERT.sub("", c) for c in experts})  # ".../moe/<layer>/"
    n_experts = 1 + max((int(EXPERT.search(c).group(1)) for c in experts), default=-1)
    for r in runs:
        for layer in layers:
            shares = [r.final(f"{layer}expert_{i}") for i in range(n_experts)]
            if any(v is not None for v in shares):
                rows.append([float("nan") if v is None else v for v in shares])
                labels.append(f"{r.name} {layer.split('/moe/')[-1].strip('/')}")
    if not rows:
        return []
    plt = _pyplot()
    fig = plt.figure(figsize=(min(12.0, 3.0 + 0.4 * n_experts), 1.2 + 0.22 * len(rows)))
    ax = fig.add_axes((0.3, 0.12, 0.55, 0.78))
    image = ax.imshow(rows, aspect="auto", cmap="viridis")
    ax.set_xticks(range(n_experts), [str(i) for i in range(n_experts)], fontsize=7)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_xlabel("expert", fontsize=8)
    ax.set_title(f"share of tokens per expert (final, {stage.rstrip('/') or 'train'})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    chart = ("moe expert load", _png(fig))
    plt.close(fig)
    return [chart]


def _html_table(header: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(lines)


CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;border:1px solid #ddd;padding:4px}figcaption{font-size:12px;color:#555}code{font-size:12px}"""


def build_report(paths: list[Path]) -> tuple[str, str, list[Run]]:
    """-> (html, markdown, runs)."""
    run_paths = find_runs(paths)
    root = _common_parent(run_paths) if len(run_paths) > 1 else run_paths[0].parent
    runs = [load_run(p, root) for p in run_paths]
    keys = distinguishing_keys(runs)
    columns = metric_columns(runs)
    optimized = runs[0].config.get("optimized_metric")
    s_head, s_rows = summary(runs, keys, optimized if optimized in columns else None)
    m_head, m_rows = all_metrics(runs, columns)
    overrides = [[r.name, " ".join(r.overrides)] for r in runs]
    charts = curve_charts(runs, columns, run_labels(runs, keys))
    moe = moe_charts(runs, columns)
    title = f"lab report: {len(runs)} runs in {root}"

    figures = lambda cs: "".join(  # noqa: E731
        f'<figure><img alt="{html.escape(t)}" src="data:image/png;base64,{b}"><figcaption>{html.escape(t)}</figcaption></figure>'
        for t, b in cs)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<h2>Summary</h2>", _html_table(s_head, s_rows, "summary"),
        "<h2>Curves</h2>", f'<div class="charts">{figures(charts)}</div>',
    ]
    if moe:
        parts += ["<h2>MoE expert load</h2>", f'<div class="charts">{figures(moe)}</div>']
    parts += [
        "<h2>All metrics (final, best)</h2>", _html_table(m_head, m_rows, "metrics"),
        "<h2>Overrides</h2>", _html_table(["run", "overrides"], overrides, "overrides"),
        "</body></html>",
    ]
    md = "\n\n".join([f"# {title}", "## Summary", _md_table(s_head, s_rows), "## All metrics (final, best)",
                      _md_table(m_head, m_rows), "## Overrides", _md_table(["run", "overrides"], overrides)]) + "\n"
    return "".join(parts), md, runs


def _common_parent(paths: list[Path]) -> Path:
    parts = [p.resolve().parts for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return Path(*common)


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a multirun directory, or run directories")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for report.html and report.md (default: the single directory given, else cwd)")
    args = parser.parse_args(argv)
    html_text, md, runs = build_report(args.paths)
    out = args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path.cwd())
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(html_text)
    (out / "report.md").write_text(md)
    print(f"{len(runs)} runs -> {out / 'report.html'} and {out / 'report.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
