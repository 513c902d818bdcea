"""Review an ablation: `python -m lab.report <multirun dir | run dirs | globs> [--baseline V] [--metric M]`.

runs (find and load run directories) -> variants (seeds grouped, read at a common budget) -> stats (numbers
only: mean ± std, intervals, tests) -> tables and charts -> renderers (html: one interactive offline page;
markdown: the tables). Imports go one way along that line (import-linter contract in pyproject.toml).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.report import charts, scaling, tables
from lab.report.runs import DEAD, Run, Skipped, common_parent, find_runs, load_run
from lab.report.stats import is_moe
from lab.report.variants import (
    BUDGETS,
    VALUES,
    Budget,
    Variant,
    common_step,
    concurrent,
    cost_axis,
    factorize,
    group_variants,
    ignored_note,
    metric_columns,
    read_steps,
    sort_variants,
    steps_text,
)


@dataclass
class Report:
    title: str
    metric: str
    runs: list[Run]
    variants: list[Variant]
    baseline: Variant
    keys: list[str]  # the factors: a choice key, or a name for keys that change together (factorize)
    skipped: list[Skipped]
    budget: Budget
    budget_note: str  # where the runs are compared, in words: said above the summary
    tables: list[tables.Table]
    sections: list[tuple[str, list[tuple[str, object]]]]  # (section title, [(chart title, plotly figure)])
    scaling_tables: list[tables.Table] = field(default_factory=list)  # lab.report.scaling's, when runs differ in size
    notes: list[str] = field(default_factory=list)  # the cost used, concurrent runs: said below the intro

    def intro(self) -> list[str]:
        """What the summary means, in sentences both renderers print above it."""
        holm = sum(v is not self.baseline for v in self.variants) > 1
        return [
            f"Variants group runs that differ only by seed. Metric: {self.metric}; mean ± sample std over seeds, "
            "95% t-interval of the mean.",
            self.budget_note,
            f"Baseline: {self.baseline.label}. Δ is the mean difference (per seed when the seeds match) with its 95% "
            "interval; effect size d_z = mean / std of the per-seed differences (paired), d = Δ / pooled std "
            "(Welch). Beyond seed noise when p < 0.05 (paired t-test when the seeds match, else Welch's)"
            + ("; p is Holm-adjusted over the variants compared with the baseline." if holm else "."),
            *self.notes,
        ]


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


def pick_budget(runs: list[Run], metric: str, budget: str, which: str) -> tuple[Budget, str]:
    """-> (the budget every run is read at, the sentence that says so: the step the values were actually read
    at, which runs stopped for good before it and are not compared, and which diverged)."""
    value = "best value up to then" if which == "best" else "last logged value"
    if budget == "finished":
        return Budget(None, which), f"Finished runs only, each at its end ({value.replace(' up to then', '')})."
    step = common_step(runs, metric)
    if step is None:
        return Budget(None, which), "No run logged the metric yet."
    at = Budget(step, which)
    read = read_steps(runs, metric, at)
    read_at = f"{metric} read at {steps_text(read)}" if read and set(read) != {step} else ""
    logged = [r for r in runs if r.series(metric)[1] and r.last_step is not None]
    dead = [r for r in logged if r.status in DEAD and r.diverged_at is None and r.last_step < step]
    diverged = [r for r in runs if r.diverged_at is not None and r.diverged_at <= step]
    going = [r.last_step for r in logged if r not in dead]
    if len(set(going)) == 1:
        note = f"Every run{' still going or finished' if dead else ''} reached step {step:,.0f}; each run's {value} at that step is compared" + (
            f" ({read_at})." if read_at else ".")
    else:
        short = sum(s < max(going) for s in going)
        note = (f"Compared at step {step:,.0f}, the largest step every run with a value reached: {short} of "
                f"{len(going)} runs stopped before the furthest (step {max(going):,.0f}); each run's {value} at step "
                f"{step:,.0f} is compared{f' ({read_at})' if read_at else ''}. For finished runs only, at their end: "
                "--budget finished.")
    if dead:
        note += (f" Not compared, stopped for good before step {step:,.0f}: "
                 + "; ".join(f"{r.name} ({r.status} at step {r.last_step:,})" for r in dead) + ".")
    if diverged:
        note += " Diverged (NaN or infinite loss), counted in their variant's n, with no finite value: " + "; ".join(
            f"{r.name} at step {r.diverged_at:,}" for r in diverged) + "."
    return at, note


def check_comparable(runs: list[Run], metric: str | None) -> None:
    """Runs of different tasks (an LM's val/loss is not a classifier's), or optimising different metrics when
    --metric is not given, are refused in one line: never ranked against each other."""
    tasks: dict[str, list[Run]] = {}
    for r in runs:
        tasks.setdefault(str(r.config.get("task._target_")).rsplit(".", 1)[-1], []).append(r)
    if len(tasks) > 1:
        said = ", ".join(f"{t}: {len(rs)} run(s) such as {rs[0].name}" for t, rs in tasks.items())
        raise LabError(f"these runs are of {len(tasks)} tasks ({said}); their metrics are not comparable: report each "
                       "task's runs on its own")
    optimized = {str(r.config.get("optimized_metric")) for r in runs} - {"None"}
    if metric is None and len(optimized) > 1:
        raise LabError(f"these runs optimise different metrics ({', '.join(sorted(optimized))}); pass --metric to "
                       "choose the one they are compared by")


def missing_note(runs: list[Run], metric: str) -> str:
    """Which runs never logged the metric (left out of every number, shown in the runs table)."""
    lacking = [r.name for r in runs if not r.series(metric)[1]]
    return (f"{metric} was not logged by {len(lacking)} of {len(runs)} runs: {', '.join(lacking)}." if lacking else "")


def collect(paths: list[Path], metric: str | None = None, baseline: str | None = None, budget: str = "common",
            which: str = "final", ignore: tuple[str, ...] = (), scaling_view: str = "auto",
            label: str | None = None) -> Report:
    """budget: "common" (every run read at the largest step all runs with a value reached) or "finished"
    (finished runs only, at their end); which: "final" value there, or the "best" one up to there.
    ignore: config keys (or "prefix." groups) that do not make a variant, e.g. settings that lab added or moved
    between the runs' versions; the report names them with their values. scaling_view: lab.report.scaling.view's
    mode (auto: when the runs differ in size)."""
    if budget not in BUDGETS or which not in VALUES:
        raise LabError(f"--budget {budget} --value {which}: choose --budget from {', '.join(BUDGETS)} and "
                       f"--value from {', '.join(VALUES)}")
    run_paths, skipped = find_runs(paths)
    root = common_parent(run_paths) if len(run_paths) > 1 else run_paths[0].parent
    runs = [load_run(p, root) for p in run_paths]
    if budget == "finished":
        skipped += [Skipped(r.path, f"{r.status}, not finished: left out by --budget finished") for r in runs
                    if r.status != "finished"]
        runs = [r for r in runs if r.status == "finished"]
        if not runs:
            raise LabError("--budget finished: no run has finished yet; leave it out to compare the runs at the "
                           "largest step they all reached")
    check_comparable(runs, metric)
    columns = metric_columns(runs)
    metric = pick_metric(runs, columns, metric)
    at, budget_note = pick_budget(runs, metric, budget, which)
    variants, keys = group_variants(runs, ignore)
    factors = factorize(variants, keys, label)
    budget_note = " ".join(n for n in (budget_note, ignored_note(runs, ignore)) if n)
    for v in variants:
        v.budget = at
    base = pick_baseline(variants, baseline)  # before sorting: "the first" is the first given
    variants = sort_variants(variants, metric)
    costs, cost_note = cost_axis(variants, metric)
    overlap = concurrent(runs)
    curve_cols = tables.curve_columns(runs, columns)
    moe = charts.moe_charts(variants, columns)
    sections = [
        ("Curves", charts.curves(variants, [c for c in curve_cols if not is_moe(c)])),
        ("Sweep", charts.sweep_view(variants, factors, metric)),
        ("Quality vs cost", charts.cost_scatter(variants, metric, costs, bool(overlap))),
        ("MoE routing", moe + charts.curves(variants, [c for c in curve_cols if is_moe(c) and "expert_" not in c])),
    ]
    table_list = [tables.summary(variants, factors, metric, base, costs, bool(overlap)), tables.final_metrics(variants, columns),
                  tables.runs_table(variants, metric), tables.config_difference(variants, keys)]
    if skipped:
        table_list.append(tables.skipped_table(skipped))
    scaling_tables, scaling_charts = scaling.view(runs, metric, baseline, scaling_view)
    sections.append(("Scaling", scaling_charts))
    title = f"lab report: {len(variants)} variants, {len(runs)} runs in {shown_path(root)}"
    return Report(title, metric, runs, variants, base, factors, skipped, at, budget_note, table_list,
                  [s for s in sections if s[1]], scaling_tables,
                  [n for n in (missing_note(runs, metric), cost_note, overlap) if n])


def shown_path(path: Path) -> str:
    """A path as short as it is unambiguous: relative to the cwd when under it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
