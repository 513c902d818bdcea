"""Review an ablation: `python -m lab.report <multirun dir | run dirs | globs> [--baseline V] [--metric M]`.

runs (find and load run directories) -> stats (seeds grouped into variants, mean ± std, intervals, tests)
-> tables and charts -> renderers (html: one interactive offline page; markdown: the tables).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.report import charts, tables
from lab.report.runs import Run, Skipped, common_parent, find_runs, load_run
from lab.report.stats import Variant, group_variants, is_moe, metric_columns, sort_variants


@dataclass
class Report:
    title: str
    metric: str
    runs: list[Run]
    variants: list[Variant]
    baseline: Variant
    keys: list[str]
    skipped: list[Skipped]
    tables: list[tables.Table]
    sections: list[tuple[str, list[tuple[str, object]]]]  # (section title, [(chart title, plotly figure)])


def pick_metric(runs: list[Run], columns: list[str], metric: str | None) -> str:
    if metric:
        if metric not in columns:
            raise LabError(f"--metric {metric} was not logged by any run; logged: {', '.join(columns)}")
        return metric
    optimized = runs[0].config.get("optimized_metric")
    if optimized in columns:
        return optimized
    for candidate in ("val/loss", *(c for c in columns if c.startswith("val/")), *columns):
        if candidate in columns:
            return candidate
    raise LabError("the runs logged no metrics yet")


def pick_baseline(variants: list[Variant], baseline: str | None) -> Variant:
    if baseline is None:
        return variants[0]
    matches = [v for v in variants if v.label == baseline] or [v for v in variants if baseline in v.label]
    if len(matches) != 1:
        raise LabError(f"--baseline {baseline!r} matches {len(matches)} variants; choose one of: "
                       + "; ".join(v.label for v in variants))
    return matches[0]


def collect(paths: list[Path], metric: str | None = None, baseline: str | None = None) -> Report:
    run_paths, skipped = find_runs(paths)
    root = common_parent(run_paths) if len(run_paths) > 1 else run_paths[0].parent
    runs = [load_run(p, root) for p in run_paths]
    columns = metric_columns(runs)
    metric = pick_metric(runs, columns, metric)
    variants, keys = group_variants(runs)
    base = pick_baseline(variants, baseline)  # before sorting: "the first" is the first given
    variants = sort_variants(variants, metric)
    curve_cols = tables.curve_columns(runs, columns)
    moe = charts.moe_charts(variants, columns)
    sections = [
        ("Curves", charts.curves(variants, [c for c in curve_cols if not is_moe(c)])),
        ("Sweep", charts.sweep_view(variants, keys, metric)),
        ("Quality vs cost", charts.cost_scatter(variants, metric)),
        ("MoE routing", moe + charts.curves(variants, [c for c in curve_cols if is_moe(c) and "expert_" not in c])),
    ]
    table_list = [tables.summary(variants, keys, metric, base), tables.final_metrics(variants, columns),
                  tables.runs_table(variants, metric)]
    if skipped:
        table_list.append(tables.skipped_table(skipped))
    title = f"lab report: {len(variants)} variants, {len(runs)} runs in {root}"
    return Report(title, metric, runs, variants, base, keys, skipped, table_list, [s for s in sections if s[1]])
