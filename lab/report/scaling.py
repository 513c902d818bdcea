"""The scaling view (docs/ladders.md): when the runs differ in size, each variant's final loss against training
compute, a fitted law L(C) = E + A * C^-alpha per variant, bootstrap intervals over seeds, the compute multiplier
of each variant against the baseline (measured rungs and extrapolated), and a held-out check of the fit.

The fit is Hoffmann et al. 2022's approach 3 on compute: scipy's least_squares on log L with a Huber loss
(delta 1e-3), from a small grid of starting points, the best kept. The bootstrap resamples, at each rung, the
seeds' points with replacement and refits; intervals are the 2.5 and 97.5 percentiles of the refits."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from scipy.optimize import least_squares

from lab.errors import LabError
from lab.report.charts import _layout, color
from lab.report.format import fmt
from lab.report.runs import Run, read_status
from lab.report.tables import Cell, Table
from lab.report.variants import group_variants
from lab.runtime.cli.ladder import RUNG_KEYS

HUBER_DELTA = 1e-3
DRAWS = 200
MIN_RUNGS = 3  # three parameters: fewer rungs leave the law undetermined
MIN_SEEDS = 2  # per rung, for an interval
EXTRAPOLATE = (10, 100)  # x the largest rung's compute
SCALING = ("auto", "on", "off")


@dataclass(frozen=True)
class Law:
    """L(C) = E + A * C^-alpha, with A as its logarithm (A itself overflows for small alpha at large C)."""
    e: float
    log_a: float
    alpha: float

    def loss(self, c):
        return self.e + np.exp(self.log_a - self.alpha * np.log(c))

    def compute_for(self, loss: float) -> float:
        """The compute at which this law reaches `loss`: inf when loss is at or below E."""
        if loss <= self.e:
            return math.inf
        return math.exp((self.log_a - math.log(loss - self.e)) / self.alpha)


def fit_law(c, loss, start: Law | None = None) -> Law:
    """The law through the points (compute, loss): Huber least squares on log loss, compute centred on its
    geometric mean so that every parameter is of order one. start: one starting point instead of the grid."""
    c, loss = np.asarray(c, float), np.asarray(loss, float)
    c0 = float(np.exp(np.mean(np.log(c))))
    x, y = np.log(c / c0), np.log(loss)

    def residuals(p):  # p = (log E, log A at c0, alpha)
        return np.logaddexp(p[0], p[1] - p[2] * x) - y

    if start is not None:
        starts = [(math.log(max(start.e, 1e-9)), start.log_a - start.alpha * math.log(c0), start.alpha)]
    else:
        low = float(loss.min())
        starts = [(math.log(low * f), math.log(low * (1 - f) + 1e-9), a) for f in (0.3, 0.6, 0.9) for a in (0.05, 0.2, 0.5)]
    best = None
    for p0 in starts:
        r = least_squares(residuals, p0, loss="huber", f_scale=HUBER_DELTA, bounds=([-20, -20, 0.0], [20, 20, 3.0]))
        if best is None or r.cost < best.cost:
            best = r
    log_e, log_a0, alpha = best.x
    return Law(math.exp(log_e), log_a0 + alpha * math.log(c0), alpha)


def multiplier(base: Law, variant: Law, c: float) -> float:
    """How many times the compute c the baseline needs to reach the variant's loss at c (> 1: the variant is
    ahead); inf when the baseline never does (the variant's loss is below the baseline's E)."""
    return base.compute_for(float(variant.loss(c))) / c


def interval(values) -> tuple[float, float]:
    v = np.sort(np.asarray(values, float))
    return float(v[int(0.025 * (len(v) - 1))]), float(v[math.ceil(0.975 * (len(v) - 1))])


def bootstrap(rungs: list[list[tuple[float, float]]], law: Law, draws: int = DRAWS, seed: int = 0) -> list[Law]:
    """Refits with each rung's (compute, loss) points resampled with replacement (seed noise, rung by rung)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        pts = [p for rung in rungs for p in (rung[i] for i in rng.integers(0, len(rung), len(rung)))]
        out.append(fit_law([p[0] for p in pts], [p[1] for p in pts], start=law))
    return out


def verdict(at_largest, extrapolated) -> str:
    """From bootstrap draws of the multiplier at the largest rung and at 100x: 'gain shrinks' when the distance
    from 1 (in log) falls with scale in 95% of the draws; else 'gain persists' (or 'loss persists') when the
    100x interval excludes 1; else 'no evidence'."""
    g_r, g_x = np.log(np.asarray(at_largest, float)), np.log(np.asarray(extrapolated, float))
    with np.errstate(invalid="ignore"):
        change = np.where(np.isfinite(g_r) & np.isfinite(g_x), np.abs(g_x) - np.abs(g_r), np.inf)
    if interval(change)[1] < 0:
        return "gain shrinks" if np.median(g_r) > 0 else "loss shrinks"
    lo, hi = interval(g_x)
    if lo > 0:
        return "gain persists"
    if hi < 0:
        return "loss persists"
    return "no evidence"


@dataclass
class Point:
    rung: str
    seed: str
    params: float
    tokens: float
    flops: float
    loss: float


def run_point(run: Run, metric: str) -> Point | None:
    """A finished run's size, cost and final metric; None when it is not finished or recorded no compute."""
    if run.status != "finished":
        return None
    final = read_status(run.path).get("metrics") or {}
    flops = final.get("cost/train_flops") or run.final("perf/flops_seen")
    loss = run.final(metric)
    if not flops or loss is None or not math.isfinite(loss):
        return None
    params = final.get("params/non_embedding") or run.params.get("active") or 0
    rung = run.config.get("ladder.rung") or f"N={fmt(params)}"
    seed = ",".join(f"{k}={v}" for k, v in sorted(run.config.items()) if k.rsplit(".", 1)[-1] == "seed") or run.name
    return Point(str(rung), seed, float(params), float(final.get("cost/tokens") or run.final("perf/tokens_seen") or 0),
                 float(flops), float(loss))


@dataclass
class Fit:
    label: str
    rungs: list[list[Point]]  # by compute, smallest first
    law: Law | None = None
    draws: list[Law] | None = None
    held_out: float | None = None  # (predicted - measured) / measured at the largest rung, fitted without it
    why: str = ""  # why there is no law or no interval

    @property
    def compute(self) -> list[float]:
        return [float(np.mean([p.flops for p in r])) for r in self.rungs]


def fit_variant(label: str, points: list[Point]) -> Fit:
    by_rung: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_rung[p.rung].append(p)
    rungs = sorted(by_rung.values(), key=lambda r: np.mean([p.flops for p in r]))
    fit = Fit(label, rungs)
    if len(rungs) < MIN_RUNGS:
        fit.why = f"needs >= {MIN_RUNGS} rungs for a fit, has {len(rungs)}"
        return fit
    pairs = [[(p.flops, p.loss) for p in r] for r in rungs]
    flat = [p for r in pairs for p in r]
    fit.law = fit_law([p[0] for p in flat], [p[1] for p in flat])
    if min(len(r) for r in rungs) < MIN_SEEDS:
        fit.why = f"needs >= {MIN_SEEDS} seeds at every rung for an interval"
    else:
        fit.draws = bootstrap(pairs, fit.law)
    if len(rungs) > MIN_RUNGS:
        smaller = [p for r in pairs[:-1] for p in r]
        law = fit_law([p[0] for p in smaller], [p[1] for p in smaller])
        measured = float(np.mean([p[1] for p in pairs[-1]]))
        fit.held_out = (float(law.loss(fit.compute[-1])) - measured) / measured
    return fit


def _with_interval(value: float, draws: list[float] | None) -> Cell:
    if draws is None:
        return Cell(fmt(value), value)
    lo, hi = interval(draws)
    return Cell(f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]", value)


def fit_table(fits: list[Fit]) -> Table:
    t = Table("Scaling fit: L(C) = E + A·C^-α per variant (95% bootstrap intervals over seeds)",
              ["variant", "rungs", "seeds", "E", "α", "A", f"held-out error at the largest rung (fit on the {MIN_RUNGS}+ smaller)"])
    for f in fits:
        seeds = f"{min(len(r) for r in f.rungs)}-{max(len(r) for r in f.rungs)}" if f.rungs else "0"
        held = (Cell(f"{f.held_out:+.2%}", f.held_out) if f.held_out is not None
                else Cell(f"needs >= {MIN_RUNGS + 1} rungs, has {len(f.rungs)}"))
        if f.law is None:
            t.rows.append([Cell(f.label), Cell(str(len(f.rungs))), Cell(seeds), Cell(f.why), Cell(""), Cell(""), held])
            continue
        draws = f.draws
        t.rows.append([Cell(f.label), Cell(str(len(f.rungs))), Cell(seeds),
                       _with_interval(f.law.e, draws and [d.e for d in draws]),
                       _with_interval(f.law.alpha, draws and [d.alpha for d in draws]),
                       Cell(f"{math.exp(f.law.log_a):.3g}", math.exp(f.law.log_a)) if f.law.log_a < 700 else Cell("inf"), held])
    return t


def _fmt_multiplier(m: float) -> str:
    return "∞" if math.isinf(m) else f"{m:.3g}x"


def multiplier_table(fits: list[Fit], base: Fit) -> Table:
    """Each variant's multiplier at the baseline's rungs' compute and at 10x and 100x its largest rung."""
    cs = base.compute
    header = ["variant", *(f"{r[0].rung} ({c:.2g} FLOPs)" for r, c in zip(base.rungs, cs)),
              *(f"{k}x largest" for k in EXTRAPOLATE), "verdict"]
    t = Table(f"Compute multiplier against {base.label}: the compute the baseline needs to reach the variant's loss, "
              "÷ the variant's", header)
    targets = [*cs, *(k * cs[-1] for k in EXTRAPOLATE)] if cs else []
    for f in fits:
        if f is base:
            continue
        if f.law is None or base.law is None:
            t.rows.append([Cell(f.label), *(Cell("") for _ in targets), Cell(f.why or base.why)])
            continue
        paired = list(zip(f.draws, base.draws)) if f.draws and base.draws else None
        row = [Cell(f.label)]
        samples = []
        for c in targets:
            m = multiplier(base.law, f.law, c)
            draws = [multiplier(b, v, c) for v, b in paired] if paired else None
            samples.append(draws)
            text = _fmt_multiplier(m)
            if draws:
                lo, hi = interval(draws)
                text += f" [{_fmt_multiplier(lo)}, {_fmt_multiplier(hi)}]"
            row.append(Cell(text, m if math.isfinite(m) else None))
        row.append(Cell(verdict(samples[len(cs) - 1], samples[-1]) if paired else
                        "no evidence: " + (f.why or base.why)))
        t.rows.append(row)
    return t


def points_table(fits: list[Fit]) -> Table:
    t = Table("Scaling points: each variant's rungs (mean over seeds)",
              ["variant", "rung", "non-embedding params", "tokens", "training FLOPs", "loss", "seeds"])
    for f in fits:
        for r in f.rungs:
            losses = [p.loss for p in r]
            std = float(np.std(losses, ddof=1)) if len(losses) > 1 else None
            t.rows.append([Cell(f.label), Cell(r[0].rung), Cell(fmt(r[0].params), r[0].params),
                           Cell(fmt(float(np.mean([p.tokens for p in r])))), Cell(f"{np.mean([p.flops for p in r]):.3g}"),
                           Cell(fmt(float(np.mean(losses))) + (f" ± {std:.2g}" if std is not None else ""), float(np.mean(losses))),
                           Cell(str(len(r)))])
    return t


def charts(fits: list[Fit], metric: str) -> list[tuple[str, go.Figure]]:
    """The metric against training FLOPs (fitted curves, bootstrap band, to 100x the largest rung), against
    non-embedding parameters and against tokens, log-log, a point per run."""
    out = []
    for key, title in (("flops", "training FLOPs"), ("params", "non-embedding parameters"), ("tokens", "training tokens")):
        fig = go.Figure()
        for i, f in enumerate(fits):
            pts = [p for r in f.rungs for p in r]
            fig.add_trace(go.Scatter(x=[getattr(p, key) for p in pts], y=[p.loss for p in pts], mode="markers", name=f.label,
                                     marker=dict(color=color(i), size=7), text=[f"{p.rung} {p.seed}" for p in pts],
                                     hovertemplate="%{text}: %{y:.4g} at %{x:.3g}"))
            if key == "flops" and f.law is not None:
                grid = np.geomspace(min(f.compute) / 2, max(f.compute) * max(EXTRAPOLATE), 60)
                if f.draws:
                    curves = np.array([d.loss(grid) for d in f.draws])
                    band = np.percentile(curves, [2.5, 97.5], axis=0)
                    fig.add_trace(go.Scatter(x=[*grid, *grid[::-1]], y=[*band[1], *band[0][::-1]], fill="toself", line=dict(width=0),
                                             fillcolor=color(i), opacity=0.15, showlegend=False, hoverinfo="skip"))
                fig.add_trace(go.Scatter(x=grid, y=f.law.loss(grid), mode="lines", line=dict(color=color(i)),
                                         name=f"{f.label}: E={f.law.e:.3g}, α={f.law.alpha:.3g}"))
        fig = _layout(fig, f"{metric} vs {title}", title, metric, log_toggle=False)
        fig.update_layout(hovermode="closest", xaxis_type="log", yaxis_type="log")
        out.append((f"{metric} vs {title}", fig))
    return out


def view(runs: list[Run], metric: str, baseline: str | None, mode: str) -> tuple[list[Table], list[tuple[str, go.Figure]]]:
    """The scaling tables and charts: mode "auto" when the runs differ in size, "on" always (an error when they do
    not), "off" never. Variants are grouped across the settings a ladder sets per rung (RUNG_KEYS, ladder.*)."""
    if mode == "off":
        return [], []
    variants, _ = group_variants(runs, ignore=(*RUNG_KEYS, "ladder."))
    fits = []
    for v in variants:
        points = [p for p in (run_point(r, metric) for r in v.runs) if p is not None]
        if points:
            fits.append(fit_variant(v.label, points))
    if not any(len(f.rungs) > 1 for f in fits):
        if mode == "on":
            raise LabError("--scaling on needs runs of several sizes that recorded their training FLOPs (cost/train_flops); "
                           "these are of one size: train a ladder (+ladder=<name>, docs/ladders.md) or leave out --scaling")
        return [], []
    left_out = sum(run_point(r, metric) is None for r in runs)
    # --baseline names a variant, or one rung of it as the report's per-rung tables label it ("rung=r5 experiment=x")
    base = next((f for f in fits if f.label == baseline), None) or next(
        (f for f in fits if baseline and (baseline in f.label or f.label in baseline)), fits[0])
    note = Table("Scaling: how to read it", ["note"], [[Cell(
        f"Each run's final {metric} against its training FLOPs (cost/train_flops: 6 x matmul params + the attention "
        f"term, per token). Law L(C) = E + A·C^-α per variant: Huber least squares on log loss (Hoffmann et al. 2022, "
        f"approach 3); intervals: {DRAWS} refits with each rung's seeds resampled. The compute multiplier is the "
        "factor of compute the baseline needs to reach the variant's loss (> 1: the variant is ahead); verdict: the "
        "gain shrinks when its distance from 1 falls from the largest rung to 100x in 95% of refits, persists when "
        "the 100x interval excludes 1, else no evidence. Held-out: the law fitted without the largest rung, its "
        "error there."
        + (f" {left_out} run(s) left out: not finished, or no training FLOPs recorded." if left_out else ""))]])
    tables = [note, fit_table(fits), points_table(fits)]
    if len(fits) > 1:
        tables.insert(2, multiplier_table(fits, base))
    return tables, charts(fits, metric)
