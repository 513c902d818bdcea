"""The report's tables as data (text for people + the exact value behind it), shared by both renderers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lab.report.format import fmt, fmt_diff, fmt_duration, fmt_p, fmt_pm
from lab.report.stats import Comparison, compare, holm, median, metric_direction
from lab.report.variants import X_AXES, X_COLUMNS, read_steps, steps_text

if TYPE_CHECKING:
    from lab.report.runs import Run, Skipped
    from lab.report.variants import Variant


@dataclass
class Cell:
    text: str
    value: float | None = None  # the unrounded number shown, for machines (HTML data-value)


@dataclass
class Table:
    name: str
    header: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    highlight: set[int] = field(default_factory=set)  # row indices shown as best


def _c(v) -> Cell:
    return Cell(fmt(v), float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)


def status_counts(runs: list[Run]) -> str:
    """'2 finished, 1 interrupted (1 resumed)': how the runs ended, and how many were resumed."""
    counts: dict[str, int] = {}
    for r in runs:
        state = f"diverged at step {r.diverged_at:,}" if r.diverged_at is not None else r.status
        counts[state] = counts.get(state, 0) + 1
    resumed = sum(r.resumed for r in runs)
    return ", ".join(f"{n} {s}" for s, n in counts.items()) + (f" ({resumed} resumed)" if resumed else "")


def comparisons(variants: list[Variant], metric: str, baseline: Variant) -> dict[str, Comparison]:
    """variant label -> its comparison with the baseline. Values read at different steps are not tested
    (a run stopped early would be compared with one trained longer); with more than one variant against the
    baseline the p-values are Holm-adjusted (family-wise error rate over those comparisons)."""
    base = baseline.points(metric)
    out: dict[str, Comparison] = {}
    for v in variants:
        mine = v.points(metric)
        if v is baseline or not base or not mine:
            continue
        diverged = len(v.diverged(metric)) + len(baseline.diverged(metric))
        if diverged:  # a diverged run has no finite value: a test over the others alone would hide it
            cmp = compare({s: p[1] for s, p in base.items()}, {s: p[1] for s, p in mine.items()})
            out[v.label] = Comparison(cmp.diff, None, f"no test: {diverged} run(s) diverged")
            continue
        cmp = compare({s: p[1] for s, p in base.items()}, {s: p[1] for s, p in mine.items()})
        steps = {p[0] for p in (*base.values(), *mine.values())}
        if v.budget.step is not None and len(steps) > 1 and v.budget.which == "final":
            cmp = Comparison(cmp.diff, None, f"no test: values at steps {min(steps):,.0f}-{max(steps):,.0f}")
        out[v.label] = cmp
    if len(out) > 1:
        for cmp, adjusted in zip(out.values(), holm([c.p for c in out.values()])):
            cmp.p_adjusted = adjusted
    return out


def summary(variants: list[Variant], keys: list[str], metric: str, baseline: Variant, costs: tuple = (),
            concurrent: bool = False) -> Table:
    """One row per variant: choices, n, the metric's mean ± std and 95% interval at the budget, the
    difference from the baseline with its interval, effect size and test (Holm-adjusted with several
    variants), how the runs ended, parameters, throughput, wall time. Best variant highlighted."""
    keys = [k for k in keys if any(str(v.choices[k]) != v.label for v in variants)]  # "experiment" repeats the label
    short = [k.rsplit(".", 1)[-1] if sum(x.rsplit(".", 1)[-1] == k.rsplit(".", 1)[-1] for x in keys) == 1 else k for k in keys]
    cmps = comparisons(variants, metric, baseline)
    holm_note = " (Holm)" if any(c.p_adjusted is not None for c in cmps.values()) else ""
    which = "best" if baseline.budget.which == "best" else "final"
    read = read_steps([r for v in variants for r in v.runs], metric, baseline.budget)
    at = f" at {steps_text(read)}" if baseline.budget.step is not None and read else ""
    table = Table("summary", ["variant", *short, "n", f"{metric} ({which}{at}, mean ± std)", "95% interval",
                              f"Δ vs {baseline.label} [95% CI]", "effect size", f"p{holm_note}", "beyond seed noise?",
                              "runs", "params", "active params",
                              *([f"{costs[0][2]} (median)"] if costs else []),
                              "tokens/s (median" + (", concurrent runs)" if concurrent else ")"),
                              "wall time (median, all attempts" + (", concurrent runs)" if concurrent else ")")])
    for v in variants:
        stat = v.stat(metric)
        diverged = v.diverged(metric)
        n = (stat.n if stat else 0) + len(diverged)  # a diverged run counts: it is never dropped from n
        row = [Cell(v.label), *(_c(v.choices[k]) for k in keys), Cell(str(n), n)]
        said = f"{len(diverged)} of {n} diverged (step {', '.join(f'{s:,.0f}' for s in diverged.values())})" if diverged else ""
        if stat is None:
            row += [Cell(said or "—"), Cell(""), Cell(""), Cell(""), Cell(""), Cell("")]
        else:
            ci = stat.interval
            row += [Cell(fmt_pm(stat.mean, stat.std) + (f"; {said}, mean of the other {stat.n}" if said else ""),
                         None if said else stat.mean),
                    Cell(f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci and not said else "n = 1" if not said else "")]
            cmp = cmps.get(v.label)
            if v is baseline:
                row += [Cell("baseline"), Cell(""), Cell(""), Cell("")]
            elif cmp is None:
                row += [Cell(""), Cell(""), Cell(""), Cell("")]
            else:
                diff = fmt_diff(cmp.diff) + (f" [{fmt_diff(cmp.interval[0])}, {fmt_diff(cmp.interval[1])}]" if cmp.interval else "")
                effect = f"{cmp.effect_name}={cmp.effect:+.2f}" if cmp.effect is not None else ""
                p = cmp.p_adjusted if cmp.p_adjusted is not None else cmp.p
                verdict = f"{'yes' if cmp.significant else 'no'} ({cmp.test})" if cmp.p is not None else cmp.test
                row += [Cell(diff, cmp.diff), Cell(effect, cmp.effect), Cell(fmt_p(p), p), Cell(verdict, p)]
        tps = v.throughput()
        wall = median([r.wall_s for r in v.runs])
        row += [Cell(status_counts(v.runs)), _c(v.param("total")), _c(v.param("active")),
                *([_c(v.cost(metric, costs)[0])] if costs else []),
                Cell(f"{fmt(tps)} tok/s" if tps is not None else "", tps), Cell(fmt_duration(wall), wall)]
        table.rows.append(row)
    if metric_direction(metric) and variants and variants[0].stat(metric) is not None and not variants[0].diverged(metric):
        table.highlight.add(0)  # variants arrive sorted best first
    return table


def is_rate(column: str) -> bool:
    """A speed measured over the run (tokens/s, MFU): shown as Variant.rate, one figure everywhere."""
    return column.startswith("perf/") and column not in X_AXES.values()


def final_metrics(variants: list[Variant], columns: list[str]) -> Table:
    """Every metric's value per variant at the budget: mean ± std over its seeds (n when some runs lack it);
    a speed (is_rate) as the median over runs of each run's median, the figure the summary shows."""
    table = Table("metrics", ["variant", *(f"{c} (median)" if is_rate(c) else c for c in columns)])
    for v in variants:
        cells = [Cell(v.label)]
        for c in columns:
            if is_rate(c):
                cells.append(_c(v.rate(c)))
                continue
            stat = v.stat(c)
            if stat is None:
                cells.append(Cell(""))
            else:
                partial = f" (n={stat.n})" if stat.n != len(v.runs) else ""
                cells.append(Cell(fmt_pm(stat.mean, stat.std) + partial, stat.mean))
        table.rows.append(cells)
    return table


def runs_table(variants: list[Variant], metric: str) -> Table:
    """Every run: its variant, seed, how it ended (and whether it was resumed), the last step it logged, its
    metric at the budget (with the step it was read at) and at its end, its overrides."""
    table = Table("runs", ["run", "variant", "seed", "status", "last step", f"{metric} (compared)", "read at step",
                           f"{metric} (last logged)", "overrides"])
    for v in variants:
        for r in v.runs:
            status = r.state
            if r.resumed:
                status += f" (resumed: {r.attempts} attempts)"
            point = v.budget.point(r, metric)
            table.rows.append([Cell(r.name), Cell(v.label), Cell(v.seed_label(r)), Cell(status), _c(r.last_step),
                               _c(point[1] if point else None), _c(point[0] if point else None),
                               _c(r.final(metric)), Cell(" ".join(r.overrides))])
    return table


def config_difference(variants: list[Variant], keys: list[str]) -> Table:
    """Every config key that differs between the variants (seeds, locations and --ignore'd keys aside), one
    column per variant: the whole difference behind the factors the summary shows."""
    table = Table("config", ["key", *(v.label for v in variants)])
    table.rows = [[Cell(k), *(_c(v.settings.get(k)) for v in variants)] for k in keys]
    return table


def skipped_table(skipped: list[Skipped]) -> Table:
    table = Table("skipped", ["directory", "why it is not shown"])
    table.rows = [[Cell(str(s.path)), Cell(s.reason)] for s in skipped]
    return table


def curve_columns(runs: list[Run], columns: list[str]) -> list[str]:
    """Metrics logged at more than one step by some run: these get curves (tokens seen and training time are
    the curves' other x-axes, not curves)."""
    return [c for c in columns if c not in X_COLUMNS and c not in X_AXES.values() and any(len(r.series(c)[1]) > 1 for r in runs)]
