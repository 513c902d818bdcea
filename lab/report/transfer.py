"""Learning-rate transfer across width (Tensor Programs V's Figure 1; docs/mup.md): each run's final metric against
log2 of its swept lr, one curve per width (mean over seeds, the seeds as points), one panel per
model.parametrization, and the table of the best lr per width. `python -m lab.report <runs> --transfer`.
The swept lr is the Adam lr (task.optimizer.lr), or MuonAdamW's Muon lr (task.optimizer.muon_lr) in runs where
that one takes several values; the figure and the table name which."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.errors import LabError
from lab.report.charts import color
from lab.report.runs import find_runs, load_run

LR, WIDTH, PARAMETRIZATION, SEED = "task.optimizer.lr", "model.d_model", "model.parametrization", "seed"
MUON_LR = "task.optimizer.muon_lr"
LR_NAMES = {LR: "Adam lr", MUON_LR: "Muon lr"}


@dataclass(frozen=True)
class Point:
    parametrization: str
    width: int
    lr: float
    seed: int
    value: float
    """The run's last logged value of the metric; nan for a run that diverged or logged none."""


def swept_lr(configs: list[dict]) -> str:
    """The lr key the runs sweep: MUON_LR where it takes several values (a Muon sweep at a fixed Adam lr), else LR."""
    muon, adam = ({c.get(k) for c in configs} for k in (MUON_LR, LR))
    if len(muon - {None}) > 1:
        if len(adam) > 1:
            raise LabError(f"these runs vary both {LR} and {MUON_LR}: --transfer draws one lr against width; "
                           "give it the runs of one of the two sweeps")
        return MUON_LR
    return LR


def collect_points(paths: list[Path], metric: str = "val/loss") -> tuple[list[Point], str]:
    """One Point per run under `paths` (a run without the metric counts as nan: said in the table, not dropped),
    and the lr key they sweep (swept_lr)."""
    found, _ = find_runs(paths)
    runs = [load_run(path, path) for path in found]
    key = swept_lr([run.config for run in runs])
    points = []
    for run in runs:
        values = [row[metric] for row in run.rows if metric in row]
        if run.config.get(WIDTH) is None or run.config.get(key) is None:
            raise LabError(f"{run.path} has no {WIDTH} or {key} in its config.yaml: --transfer compares runs of one "
                           "model at several widths and lrs (experiments/mup_transfer/run.sh); drop --transfer for "
                           "this one")
        points.append(Point(str(run.config.get(PARAMETRIZATION, "sp")), int(run.config[WIDTH]), float(run.config[key]),
                            int(run.config.get(SEED, 0)), values[-1] if values else math.nan))
    return points, key


def means(points: list[Point]) -> dict[tuple[str, int], dict[float, float]]:
    """(parametrization, width) -> {lr: mean over seeds} (nan if any seed diverged)."""
    by: dict[tuple[str, int], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        by[p.parametrization, p.width][p.lr].append(p.value)
    return {k: {lr: sum(v) / len(v) for lr, v in sorted(lrs.items())} for k, lrs in sorted(by.items())}


def best_lrs(points: list[Point]) -> list[tuple[str, int, float, float]]:
    """(parametrization, width, best lr, its mean metric) per curve, lower is better; lr nan if all diverged."""
    rows = []
    for (param, width), curve in means(points).items():
        finite = {lr: v for lr, v in curve.items() if math.isfinite(v)}
        lr = min(finite, key=finite.get) if finite else math.nan
        rows.append((param, width, lr, finite.get(lr, math.nan)))
    return rows


def figure(points: list[Point], metric: str = "val/loss", lr_key: str = LR) -> go.Figure:
    """Side by side panels, one per parametrization (sp first): metric against log2(lr), a curve per width."""
    params = sorted({p.parametrization for p in points}, key=lambda s: (s != "sp", s))
    widths = sorted({p.width for p in points})
    fig = make_subplots(rows=1, cols=len(params), shared_yaxes=True, subplot_titles=params)
    curves = means(points)
    for col, param in enumerate(params, start=1):
        for i, width in enumerate(widths):
            curve = curves.get((param, width))
            if not curve:
                continue
            fig.add_trace(go.Scatter(x=[math.log2(lr) for lr in curve], y=list(curve.values()), mode="lines+markers",
                                     name=f"width {width}", legendgroup=str(width), showlegend=col == 1,
                                     line=dict(color=color(i))), row=1, col=col)
            seeds = [p for p in points if p.parametrization == param and p.width == width]
            fig.add_trace(go.Scatter(x=[math.log2(p.lr) for p in seeds], y=[p.value for p in seeds], mode="markers",
                                     marker=dict(color=color(i), size=4, opacity=0.4), legendgroup=str(width),
                                     showlegend=False, hovertext=[f"seed {p.seed}" for p in seeds]), row=1, col=col)
        fig.update_xaxes(title_text=f"log2({LR_NAMES[lr_key]})", row=1, col=col)
    fig.update_yaxes(title_text=metric, row=1, col=1)
    fig.update_layout(title="Learning rate transfer across width", height=420, width=420 * len(params) + 120)
    return fig


def table_markdown(points: list[Point], metric: str = "val/loss", lr_key: str = LR) -> str:
    lines = [f"| parametrization | width | best {LR_NAMES[lr_key]} | log2 | {metric} at it |", "|---|---|---|---|---|"]
    for param, width, lr, value in best_lrs(points):
        lines.append(f"| {param} | {width} | {lr:.3g} | {math.log2(lr) if math.isfinite(lr) else math.nan:.0f} | "
                     f"{value:.4f} |")
    curves = means(points)
    lrs = sorted({p.lr for p in points})
    lines += ["", f"Mean {metric} over seeds (nan: diverged or no value):", "",
              "| parametrization | width | " + " | ".join(f"2^{math.log2(lr):.0f}" for lr in lrs) + " |",
              "|---|---|" + "---|" * len(lrs)]
    for (param, width), curve in curves.items():
        lines.append(f"| {param} | {width} | " + " | ".join(f"{curve[lr]:.4f}" if lr in curve else "" for lr in lrs) + " |")
    return "\n".join(lines) + "\n"


def render(paths: list[Path], out: Path, metric: str = "val/loss") -> tuple[Path, Path]:
    """transfer.html (the figure, plotly.js inlined) and transfer.md (the tables) in `out`."""
    points, key = collect_points(paths, metric)
    if not points:
        raise LabError(f"no runs with {LR} and {WIDTH} under {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    html, md = out / "transfer.html", out / "transfer.md"
    figure(points, metric, key).write_html(html, include_plotlyjs=True)
    md.write_text("<!-- written by lab.report --transfer -->\n"
                  f"# Learning rate transfer ({len(points)} runs, {key} swept)\n\n" + table_markdown(points, metric, key))
    return html, md
