"""Compare runs side by side: `python -m lab.report <multirun dir | run dirs...> [--out DIR]`.

runs (find and load run directories) -> stats (aggregate) -> charts -> renderers (html, markdown).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.report import charts, html, markdown
from lab.report.runs import Run, common_parent, find_runs, load_run
from lab.report.stats import all_metrics, distinguishing_keys, metric_columns, summary

Table = tuple[list[str], list[list[str]]]


@dataclass
class Report:
    title: str
    runs: list[Run]
    summary: Table
    metrics: Table
    overrides: Table
    curves: list[tuple[str, str]]  # (title, base64 PNG)
    moe: list[tuple[str, str]]


def collect(paths: list[Path]) -> Report:
    run_paths = find_runs(paths)
    root = common_parent(run_paths) if len(run_paths) > 1 else run_paths[0].parent
    runs = [load_run(p, root) for p in run_paths]
    keys = distinguishing_keys(runs)
    columns = metric_columns(runs)
    optimized = runs[0].config.get("optimized_metric")
    return Report(
        title=f"lab report: {len(runs)} runs in {root}",
        runs=runs,
        summary=summary(runs, keys, optimized if optimized in columns else None),
        metrics=all_metrics(runs, columns),
        overrides=(["run", "overrides"], [[r.name, " ".join(r.overrides)] for r in runs]),
        curves=charts.curve_charts(runs, columns, charts.run_labels(runs, keys)),
        moe=charts.moe_charts(runs, columns),
    )


def build_report(paths: list[Path]) -> tuple[str, str, list[Run]]:
    """-> (html, markdown, runs)."""
    report = collect(paths)
    return html.render(report), markdown.render(report), report.runs
