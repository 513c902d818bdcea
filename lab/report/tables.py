"""The report's tables as data (text for people + the exact value behind it), shared by both renderers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lab.report.format import fmt, fmt_diff, fmt_duration, fmt_p, fmt_pm
from lab.report.stats import X_COLUMNS, compare, median, metric_direction

if TYPE_CHECKING:
    from lab.report.runs import Run, Skipped
    from lab.report.stats import Variant


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
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def summary(variants: list[Variant], keys: list[str], metric: str, baseline: Variant) -> Table:
    """One row per variant: choices, n, the metric's mean ± std and 95% interval, the difference from the
    baseline and its test, how the runs ended, parameters, throughput. Best variant highlighted."""
    short = [k.rsplit(".", 1)[-1] if sum(x.rsplit(".", 1)[-1] == k.rsplit(".", 1)[-1] for x in keys) == 1 else k for k in keys]
    table = Table("summary", ["variant", *short, "n", f"{metric} (final, mean ± std)", "95% interval",
                              f"Δ vs {baseline.label}", "beyond seed noise?", "runs", "params", "active params", "tokens/s", "wall time"])
    base_values = baseline.values(metric)
    for v in variants:
        stat = v.stat(metric)
        row = [Cell(v.label), *(_c(v.choices[k]) for k in keys), Cell(str(len(v.runs)), len(v.runs))]
        if stat is None:
            row += [Cell("—"), Cell(""), Cell(""), Cell("")]
        else:
            ci = stat.interval
            row += [Cell(fmt_pm(stat.mean, stat.std), stat.mean),
                    Cell(f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "n = 1")]
            if v is baseline:
                row += [Cell("baseline"), Cell("")]
            elif not base_values:
                row += [Cell(""), Cell("")]
            else:
                cmp = compare(base_values, v.values(metric))
                verdict = f"{'yes' if cmp.significant else 'no'} ({fmt_p(cmp.p)}, {cmp.test})" if cmp.p is not None else cmp.test
                row += [Cell(fmt_diff(cmp.diff), cmp.diff), Cell(verdict, cmp.p)]
        tps = v.throughput()
        wall = median([r.wall_s for r in v.runs])
        row += [Cell(status_counts(v.runs)), _c(v.param("total")), _c(v.param("active")),
                Cell(f"{fmt(tps)} tok/s" if tps is not None else "", tps), Cell(fmt_duration(wall), wall)]
        table.rows.append(row)
    if metric_direction(metric) and variants and variants[0].stat(metric) is not None:
        table.highlight.add(0)  # variants arrive sorted best first
    return table


def final_metrics(variants: list[Variant], columns: list[str]) -> Table:
    """Every metric's final value per variant: mean ± std over its seeds (n when some runs lack it)."""
    table = Table("metrics", ["variant", *columns])
    for v in variants:
        cells = [Cell(v.label)]
        for c in columns:
            stat = v.stat(c)
            if stat is None:
                cells.append(Cell(""))
            else:
                partial = f" (n={stat.n})" if stat.n != len(v.runs) else ""
                cells.append(Cell(fmt_pm(stat.mean, stat.std) + partial, stat.mean))
        table.rows.append(cells)
    return table


def runs_table(variants: list[Variant], metric: str) -> Table:
    """Every run: its variant, seed, how it ended, the last step it logged, its metric and overrides."""
    table = Table("runs", ["run", "variant", "seed", "status", "last step", metric, "overrides"])
    for v in variants:
        for r in v.runs:
            status = r.status + (f": {r.status_note}" if r.status_note else "")
            table.rows.append([Cell(r.name), Cell(v.label), Cell(v.seed_label(r)), Cell(status), _c(r.last_step),
                               _c(r.final(metric)), Cell(" ".join(r.overrides))])
    return table


def skipped_table(skipped: list[Skipped]) -> Table:
    table = Table("skipped", ["directory", "why it is not shown"])
    table.rows = [[Cell(str(s.path)), Cell(s.reason)] for s in skipped]
    return table


def curve_columns(runs: list[Run], columns: list[str]) -> list[str]:
    """Metrics logged at more than one step by some run: these get curves."""
    return [c for c in columns if c not in X_COLUMNS and any(len(r.series(c)[1]) > 1 for r in runs)]
