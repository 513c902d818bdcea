"""Interactive charts (plotly): curves with a band over seeds, the sweep view, quality against cost with the
Pareto front, and MoE expert load over steps. Each returns (title, figure); the HTML renderer inlines them."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.colors import qualitative

from lab.report.stats import EXPERT, Stat, is_moe, metric_direction, pareto_front
from lab.report.variants import X_AXES, x_at

if TYPE_CHECKING:
    from lab.report.variants import Variant

PALETTE = qualitative.D3 + qualitative.Dark24  # hex colours (bands add transparency)
LOG_TOGGLE = [dict(type="buttons", direction="left", x=1.0, xanchor="right", y=1.16, showactive=True, buttons=[
    dict(label="linear", method="relayout", args=[{"yaxis.type": "linear"}]),
    dict(label="log", method="relayout", args=[{"yaxis.type": "log"}]),
])]


# Smoothing (the page's slider, off by default) applies to training curves with at least this many points per
# run: a value compared between variants (validation, test) or a schedule (lr) is never moved by it.
SMOOTH_MIN_POINTS = 20


def smoothable(runs, column: str) -> bool:
    """A dense training curve: `train/...` logged at SMOOTH_MIN_POINTS or more steps by some run."""
    return column.startswith("train/") and any(len(r.series(column)[1]) >= SMOOTH_MIN_POINTS for r in runs)


# Legend entries and point labels longer than this are cut with "…" (the full label is in the summary, the hover
# and the config difference): a 16-key preset label left the plot a sliver beside its legend.
LABEL_MAX = 32


def bounded(text: str) -> str:
    """text cut in the middle to LABEL_MAX characters: variant labels share their keys' names and differ in values,
    often the last ones (norm_placement=pre / =post were one legend entry twice when cut at the end)."""
    if len(text) <= LABEL_MAX:
        return text
    head = (LABEL_MAX - 1) // 2
    return text[:head] + "…" + text[len(text) - (LABEL_MAX - 1 - head):]


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _layout(fig: go.Figure, title: str, x: str, y: str, log_toggle: bool = True) -> go.Figure:
    fig.update_layout(title=dict(text=title, font=dict(size=13)), xaxis_title=x, yaxis_title=y, height=340,
                      margin=dict(l=55, r=10, t=55, b=40), hovermode="x unified", template="plotly_white",
                      # below the plot, not beside it (a legend of long variant labels left the plot a sliver),
                      # at the chart's bottom edge, where plotly makes room for it under the x-axis title: placed
                      # relative to the plot it covered that title
                      legend=dict(font=dict(size=10), orientation="h", yref="container", yanchor="bottom", y=0, x=0),
                      updatemenus=LOG_TOGGLE if log_toggle else [])
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def seed_curve(v: Variant, column: str) -> tuple[list[float], list[float], list[float | None], list[int]]:
    """(steps, mean over the seeds that logged each step, std or None, how many seeds that is) for one variant;
    a diverged run's NaN/inf values are left out (its curve ends where it diverged; curves() marks the step)."""
    by_step: dict[float, list[float]] = defaultdict(list)
    for r in v.runs:
        for s, y in zip(*r.series(column)):
            if math.isfinite(y):
                by_step[s].append(y)
    steps = sorted(by_step)
    stats = [Stat(by_step[s]) for s in steps]
    return steps, [st.mean for st in stats], [st.std for st in stats], [st.n for st in stats]


def finite_series(run, column: str) -> tuple[list[float], list[float]]:
    """The run's (steps, values) of a column without NaN/inf (a diverged run's curve ends where it diverged)."""
    pts = [(s, y) for s, y in zip(*run.series(column)) if math.isfinite(y)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _mean_x(v: Variant, steps: list[float]) -> dict[str, list[float]]:
    """Per x-axis, the mean over the variant's runs of their value at each step (seeds train the same tokens;
    their times differ a little)."""
    out = {}
    for axis in X_AXES:
        per_run = [x for r in v.runs if (x := x_at(r, axis, steps)) is not None]
        if per_run:
            out[axis] = [sum(xs) / len(xs) for xs in zip(*per_run)]
    return out


def curves(variants: list[Variant], columns: list[str]) -> list[tuple[str, go.Figure]]:
    """Every metric against step: a line per variant (mean over the seeds that logged each step; hover and
    legend say how many), a ± 1 std band when it has seeds, each seed's own curve (hidden until the page's
    "seeds" switch shows it; named on hover, not in the legend, which lists the variants: an entry per seed
    squeezed the plot), and a dotted line at the common step the runs are compared
    at when some stopped earlier. Each trace carries its x values by tokens seen and training time (meta.x)
    for the page's x-axis switch."""
    out = []
    for column in columns:
        fig = go.Figure()
        smooth = smoothable([r for v in variants for r in v.runs], column)
        for i, v in enumerate(variants):
            steps, mean, std, n = seed_curve(v, column)
            if not steps:
                continue
            if len(v.runs) > 1 and any(s is not None for s in std):
                upper = [m + (s or 0.0) for m, s in zip(mean, std)]
                lower = [m - (s or 0.0) for m, s in zip(mean, std)]
                xs = {axis: x + x[::-1] for axis, x in _mean_x(v, steps).items()}
                fig.add_trace(go.Scatter(x=steps + steps[::-1], y=upper + lower[::-1], mode="lines", fill="toself", line=dict(width=0),
                                         fillcolor=_rgba(color(i), 0.18), hoverinfo="skip", showlegend=False,
                                         legendgroup=v.label, name=f"{bounded(v.label)} ± std", meta=dict(kind="band", x=xs, smooth=smooth)))
            n_text = f"n={min(n)}-{max(n)}" if min(n) != max(n) else f"n={n[0]}"
            fig.add_trace(go.Scatter(x=steps, y=mean, mode="lines+markers" if len(steps) < 30 else "lines",
                                     line=dict(color=color(i), width=1.6), legendgroup=v.label, customdata=n,
                                     name=f"{bounded(v.label)} ({n_text})", hovertemplate="%{y:.4g} (n=%{customdata})",
                                     meta=dict(kind="mean", x=_mean_x(v, steps), smooth=smooth)))
            for r in v.runs:
                xs, ys = finite_series(r, column)
                if r.diverged_at is not None and xs:  # where it diverged: always shown, never a silent gap
                    fig.add_trace(go.Scatter(x=[xs[-1]], y=[ys[-1]], mode="markers", legendgroup=v.label,
                                             marker=dict(symbol="x", size=11, color=color(i)),
                                             name=f"{bounded(v.label)} {v.seed_label(r)} diverged at step {r.diverged_at:,}",
                                             hovertemplate=f"diverged at step {r.diverged_at:,}<extra></extra>"))
                if len(v.runs) > 1 and xs:
                    flag = "" if r.status == "finished" and not r.resumed else f" [{r.status}{', resumed' if r.resumed else ''}]"
                    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", visible="legendonly", legendgroup=v.label, showlegend=False,
                                             line=dict(color=color(i), width=0.8, dash="dot"), name=f"{bounded(v.label)} {v.seed_label(r)}{flag}",
                                             hovertemplate="%{y:.4g}",
                                             meta=dict(kind="seed", smooth=smooth,
                                                       x={a: x for a in X_AXES if (x := x_at(r, a, xs)) is not None})))
        budget = variants[0].budget.step if variants else None
        # only where this metric's own curves go past the compared step: a metric logged up to step 100 of runs
        # compared at step 300 had the line, and its axis, stretched to 300 (each run's last step of any column
        # was the test)
        logged = [xs for v in variants for r in v.runs if (xs := finite_series(r, column)[0])]
        if budget is not None and logged and min(x[0] for x in logged) <= budget < max(x[-1] for x in logged):
            # the line's own label (it moves with the line when the page changes the x-axis)
            fig.add_vline(x=budget, line=dict(dash="dot", color="#888"),
                          label=dict(text=f"compared at step {budget:,.0f}", textposition="end", font=dict(size=10)))
            # where that step lies on the other x-axes (the page moves the line when the axis changes)
            at = {axis: sum(x) / len(x) for axis in X_AXES
                  if (x := [p[0] for r in (r for v in variants for r in v.runs) if (p := x_at(r, axis, [budget]))])}
            fig.update_layout(meta=dict(budget_x={"step": budget, **at}))
        fig = _layout(fig, column, "step", column)
        clip_to_healthy(fig, [r for v in variants for r in v.runs], column)
        out.append((column, fig))
    return out


# A diverged run's finite values before its NaN are clipped off the y-axis when they leave the other runs' range
# by more than this share of it: huge losses flattened the healthy curves at the bottom of a linear axis.
CLIP_MARGIN = 0.5


def clip_to_healthy(fig: go.Figure, runs, column: str) -> None:
    """The y-range of the runs that did not diverge (5% padding), and the title says what is off the chart,
    when some diverged run's values go beyond it by more than CLIP_MARGIN of its span."""
    healthy = [y for r in runs if r.diverged_at is None for y in finite_series(r, column)[1]]
    wild = {r.name: ys for r in runs if r.diverged_at is not None and (ys := finite_series(r, column)[1])}
    if not healthy or not wild:
        return
    lo, hi = min(healthy), max(healthy)
    span = (hi - lo) or abs(hi) or 1.0
    out = [n for n, ys in wild.items() if max(ys) > hi + CLIP_MARGIN * span or min(ys) < lo - CLIP_MARGIN * span]
    if not out:
        return
    reach = max((y for n in out for y in wild[n]), key=lambda y: abs(y - (lo + hi) / 2))
    fig.update_yaxes(range=[lo - 0.05 * span, hi + 0.05 * span])
    fig.update_layout(title_text=f"{fig.layout.title.text}<br><sup>y-axis clipped to the runs that did not diverge: "
                                 f"{len(out)} diverged run(s) reach {reach:.3g}</sup>")  # a second, smaller line


def _axis_values(values: list) -> tuple[list, bool]:
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values)
    return (values if numeric else [bounded(str(x)) for x in values]), numeric


def sweep_view(variants: list[Variant], keys: list[str], metric: str) -> list[tuple[str, go.Figure]]:
    """The metric against each swept choice (every run a dot; the variant means joined, one line per setting of
    the other choices, so a line never mixes variants that differ elsewhere; no line between categorical
    values), and with 2 or more choices a parallel-coordinates view: a line per run through every choice to
    its value of the metric."""
    out = []
    for key in keys:
        fig = go.Figure()
        xs, ys, labels = [], [], []
        means: dict[str, list] = {}  # the other choices' setting -> [(this choice, variant mean)]
        for v in variants:
            values = v.values(metric)
            xs += [v.choices[key]] * len(values)
            ys += list(values.values())
            labels += [f"{bounded(v.label)} {seed}" for seed in values]
            if values:
                rest = bounded(" ".join(f"{k.rsplit('.', 1)[-1]}={v.choices[k]}" for k in keys if k != key))
                means.setdefault(rest, []).append((v.choices[key], sum(values.values()) / len(values)))
        x_all, numeric = _axis_values(xs)
        fig.add_trace(go.Scatter(x=x_all, y=ys, mode="markers", name="runs", text=labels, marker=dict(size=8, opacity=0.6),
                                 hovertemplate="%{text}: %{y:.4g}"))
        for rest, points in means.items():
            points.sort(key=lambda m: m[0] if numeric else str(m[0]))
            mx, _ = _axis_values([m[0] for m in points])
            # a line between categorical values would suggest an order and values in between that do not exist
            fig.add_trace(go.Scatter(x=mx, y=[m[1] for m in points], mode="lines+markers" if numeric else "markers",
                                     name=f"mean, {rest}" if rest else "variant mean", marker=dict(symbol="diamond", size=10)))
        fig = _layout(fig, f"{metric} by {key}", key, metric)
        fig.update_layout(hovermode="closest")
        levels = sorted(set(x_all)) if numeric else []
        if numeric and len(levels) > 2 and min(levels) > 0 and max(levels) / min(levels) >= 8:
            fig.update_xaxes(type="log")
        if numeric and len(levels) <= 12:
            fig.update_xaxes(tickvals=levels)
        out.append((f"{metric} by {key}", fig))
    if len(keys) >= 2:  # one line per run over every swept key, as W&B's sweep view draws it
        runs = [(v, value) for v in variants for value in v.values(metric).values()]
        dims = []
        for key in keys:
            shown, numeric = _axis_values([v.choices[key] for v, _ in runs])
            if numeric:
                dims.append(dict(label=key.rsplit(".", 1)[-1], values=shown))
            else:
                levels = sorted(set(shown))
                dims.append(dict(label=key.rsplit(".", 1)[-1], values=[levels.index(x) for x in shown],
                                 tickvals=list(range(len(levels))), ticktext=levels))
        scores = [value for _, value in runs]
        dims.append(dict(label=metric, values=scores))
        fig = go.Figure(go.Parcoords(line=dict(color=scores, colorscale="Viridis", showscale=True,
                                               reversescale=metric_direction(metric) == "min"), dimensions=dims))
        fig.update_layout(title=f"{metric} across all choices", height=380, margin=dict(l=60, r=40, t=70, b=30))
        out.append(("parallel coordinates", fig))
    return out


def label_sides(xs: list[float]) -> list[str]:
    """Each point's label runs toward the middle of the x-range ("top right" left of it, "top left" right of it):
    labels centred on the outermost points were cut at the chart's edge."""
    mid = (min(xs) + max(xs)) / 2
    return ["top right" if x < mid else "top left" if x > mid else "top center" for x in xs]


def cost_scatter(variants: list[Variant], metric: str, costs: tuple, concurrent: bool) -> list[tuple[str, go.Figure]]:
    """Quality against cost: the metric (mean ± std) against the machine-independent cost (training FLOPs, else
    tokens seen: `costs`), against active parameters, and against tokens/s, with the Pareto front (no other
    variant both better and cheaper) joined by a dashed line. Runs that trained concurrently on one machine
    measured its load as much as the variant: their tokens/s chart says so and draws no front. No chart with
    fewer than two variants to place on it."""
    direction = metric_direction(metric)
    out = []
    axes = [("cost", costs[0][2] if costs else "", True), ("active", "active parameters", True), ("tokens/s", "tokens/s", False)]
    for cost, title, minimize_x in axes:
        points, names, errors, colors = [], [], [], []
        for i, v in enumerate(variants):
            stat = v.stat(metric)
            x = (v.cost(metric, costs)[0] if costs else None) if cost == "cost" else v.param("active") if cost == "active" else v.throughput()
            if stat is not None and x is not None:
                points.append((float(x), stat.mean))
                names.append(bounded(v.label))
                errors.append(stat.std or 0.0)
                colors.append(color(i))
        if len(points) < 2:
            continue
        load = cost == "tokens/s" and concurrent
        fig = go.Figure(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers+text", text=names,
                                   textposition=label_sides([p[0] for p in points]), cliponaxis=False, error_y=dict(type="data", array=errors, visible=True),
                                   marker=dict(size=10, color=colors), name="variants",
                                   hovertemplate="%{text}: %{y:.4g} at %{x:,.0f}"))
        if direction is not None and not load:
            front = pareto_front(points, minimize_y=direction == "min", minimize_x=minimize_x)
            fig.add_trace(go.Scatter(x=[points[i][0] for i in front], y=[points[i][1] for i in front], mode="lines",
                                     line=dict(dash="dash", color="#555"), name="Pareto front"))
        shown = f"{metric} vs {title}" + (" (concurrent runs: machine load, no front)" if load else "")
        fig = _layout(fig, shown, title, metric, log_toggle=False)
        fig.update_layout(hovermode="closest")
        fig.update_xaxes(tickformat=".3s")
        out.append((f"{metric} vs {title}", fig))
    return out


def moe_charts(variants: list[Variant], columns: list[str]) -> list[tuple[str, go.Figure]]:
    """Per variant and MoE layer: the share of tokens each expert receives at each logged step (training when
    logged, else validation; mean over seeds) as a heatmap, and the dropped share per variant over steps."""
    experts = [c for c in columns if is_moe(c) and EXPERT.search(c)]
    stage = "train/" if any(c.startswith("train/") for c in experts) else "val/"
    experts = [c for c in experts if c.startswith(stage)]
    layers = sorted({EXPERT.sub("", c) for c in experts})  # "<stage>/moe/<layer>/"
    out = []
    for v in variants:
        for layer in layers:
            cols = sorted((c for c in experts if c.startswith(layer)), key=lambda c: int(EXPERT.search(c).group(1)))
            curves_ = [seed_curve(v, c) for c in cols]
            steps = sorted({s for st, _, _, _ in curves_ for s in st})
            if not steps:
                continue
            z = [[dict(zip(st, mean)).get(s) for s in steps] for st, mean, _, _ in curves_]
            name = layer.split("/moe/")[-1].strip("/")
            fig = go.Figure(go.Heatmap(z=z, x=steps, y=[f"expert {EXPERT.search(c).group(1)}" for c in cols],
                                       colorscale="Viridis", colorbar=dict(title="share"),
                                       hovertemplate="step %{x}, %{y}: %{z:.3f}<extra></extra>"))
            fig = _layout(fig, f"{v.label}: {name} expert load ({stage.rstrip('/')})", "step", "expert", log_toggle=False)
            out.append((f"{v.label} {name} expert load", fig))
    dropped = [c for c in columns if is_moe(c) and c.startswith(stage) and re.search(r"/dropped$", c)]
    if dropped:
        fig = go.Figure()
        for i, v in enumerate(variants):
            per_layer = [seed_curve(v, c) for c in dropped]
            steps = sorted({s for st, _, _, _ in per_layer for s in st})
            means = []
            for s in steps:
                vals = [dict(zip(st, m)).get(s) for st, m, _, _ in per_layer]
                vals = [x for x in vals if x is not None]
                means.append(sum(vals) / len(vals))
            if steps:
                fig.add_trace(go.Scatter(x=steps, y=means, name=bounded(v.label), line=dict(color=color(i))))
        out.append(("dropped share", _layout(fig, f"dropped token share ({stage.rstrip('/')}, mean over layers)", "step", "share")))
    return out

