"""One-line bugs in lab/report that tests/report must kill, for the mutation script (tests/mutants.py).

Each entry: name, file (relative to the repository root), a snippet occurring exactly once in that file, its
replacement, and the tests that must fail once it is applied.
"""
from __future__ import annotations

T = "tests/report/test_report.py::"
KILLED = T + "test_a_killed_run_here_is_stopped_at_once_and_a_quiet_live_one_is_running"
DIVERGED = T + "test_a_diverged_run_is_named_counted_and_drawn_to_the_step_it_diverged"
SMOOTH = T + "test_only_dense_training_curves_are_marked_for_smoothing"
SMOOTH_PAGE = T + "test_smoothing_in_a_browser_never_moves_a_validation_point_or_the_schedule"
COST = T + "test_the_default_cost_is_training_flops_and_tokens_seen_with_a_note_when_flops_are_missing"
CONCURRENT = T + "test_concurrent_runs_get_a_note_and_their_speed_no_pareto_front"
ONE_FIGURE = T + "test_one_figure_per_variant_for_its_speed_in_every_table"
PRESETS = T + "test_two_presets_are_one_factor_named_by_the_experiment_with_the_whole_difference_in_one_table"
PRESETS3 = T + "test_three_presets_and_a_key_swept_beside_them_stay_separate_factors"
TASKS = T + "test_runs_of_different_tasks_or_metrics_are_refused_and_runs_lacking_the_metric_named"
TAGS = "tests/runtime/trainer/test_wandb.py::test_a_sweep_jobs_tags_are_its_choices_and_its_name_carries_the_variant"
REPORT_WANDB = T + "test_tables_go_to_wandb_under_the_sweeps_group"
LIVE = T + "test_watch_makes_the_open_page_reload_itself_while_a_run_is_running"
SEEN = T + "test_browser_two_presets_every_point_inside_its_axes_and_legends_leave_room_for_the_plot"
LEGEND_ROOM = "tests/report/test_report_page.py::test_browser_legends_leave_the_plot_its_height_and_its_axis_title"
READ_STEP = T + "test_the_summary_names_the_step_it_read_and_a_killed_run_does_not_pull_the_others_back"

MUTANTS = [
    ("lab.report: a dead pid on this host is still running", "lab/report/runs.py",
     "        return \"stopped\", f\"no end recorded and its process", "        return \"running\", \"\"  # f\"", [KILLED]),
    ("lab.report: the heartbeat ignores the run's own log interval", "lab/report/runs.py",
     "HEARTBEAT_GAPS * max(gaps, default=0.0)", "0.0", [KILLED]),
    ("lab.report: a NaN loss is not a divergence", "lab/report/runs.py",
     'if any("loss" in k and not math.isfinite(v)', 'if any("loss" in k and math.isinf(v)', [DIVERGED]),
    ("lab.report: a diverged run reads its last finite value", "lab/report/variants.py",
     "            return float(run.diverged_at), math.nan\n", "            pass\n", [DIVERGED]),
    ("lab.report: diverged runs are not counted in n", "lab/report/tables.py",
     "(stat.n if stat else 0) + len(diverged)", "(stat.n if stat else 0)", [DIVERGED]),
    ("lab.report: dead runs set the common step", "lab/report/variants.py",
     "alive = [r for r in logged if r.status not in DEAD] or logged", "alive = logged", [READ_STEP, DIVERGED]),
    ("lab.report: the summary names the budget step, not the step read", "lab/report/tables.py",
     'at = f" at {steps_text(read)}"', 'at = f" at step {baseline.budget.step:,.0f}"', [READ_STEP]),
    ("lab.report: a diverged run's curve keeps its NaN points", "lab/report/charts.py",
     "            if math.isfinite(y):\n                by_step[s].append(y)", "            by_step[s].append(y)", [DIVERGED]),
    ("lab.report: validation curves are smoothed too", "lab/report/charts.py",
     'return column.startswith("train/") and', "return", [SMOOTH]),
    ("lab.report: the page smooths every trace whatever its mark", "lab/report/html.py",
     "const sw=t.meta.smooth?w:0;", "const sw=w;", [SMOOTH_PAGE]),
    ("lab.report: a final FLOPs count is read at an earlier step", "lab/report/variants.py",
     "(step is None or run.last_step is None or step >= run.last_step)", "True", [COST]),
    ("lab.report: runs on two hosts count as concurrent", "lab/report/variants.py",
     "if a.host == b.host and a.started < b.ended", "if a.started < b.ended", [CONCURRENT]),
    ("lab.report: back-to-back runs count as concurrent", "lab/report/variants.py",
     "a.started < b.ended and b.started < a.ended", "a.started <= b.ended", [CONCURRENT]),
    ("lab.report: the metrics table shows speed at the compared step", "lab/report/tables.py",
     "            if is_rate(c):\n", "            if False:\n", [ONE_FIGURE]),
    ("lab.report: keys that change together stay separate factors", "lab/report/variants.py",
     "        if len(ks) == 1:\n            factors.append(ks[0])", "        if True:\n            factors.append(ks[0])", [PRESETS]),
    ("lab.report: a factor is named by the experiment though a name spans two of its values", "lab/report/variants.py",
     "(names[i] == names[j]) == (sig[i] == sig[j])", "True", [PRESETS3]),
    ("lab.report: runs of two tasks are ranked together", "lab/report/__init__.py",
     "    if len(tasks) > 1:\n", "    if False:\n", [TASKS]),
    ("lab.report: runs optimising different metrics are ranked by the first's", "lab/report/__init__.py",
     "if metric is None and len(optimized) > 1:", "if False:", [TASKS]),
    ("lab.report: runs lacking the metric are not named", "lab/report/__init__.py",
     "lacking = [r.name for r in runs if not r.series(metric)[1]]", "lacking = []", [TASKS]),
    ("W&B: seeds are tags", "lab/runtime/trainer/loggers.py",
     'tags = [o[:64] for o in kept if key(o).rsplit(".", 1)[-1] != "seed"]', "tags = [o[:64] for o in kept]", [TAGS]),
    ("W&B: the run name leaves out the variant", "lab/runtime/trainer/loggers.py",
     'return tags, f"{name}-{num} {short}".strip()[:128]', 'return tags, f"{name}-{num}"', [TAGS]),
    ("lab.report: its own W&B run is written in the sweep directory", "lab/report/wandb_table.py",
     "dir=str(wandb_dir(sweep))", "dir=str(sweep)", [REPORT_WANDB]),
    ("lab.report --watch: the page reloads after every run ended", "lab/report/__main__.py",
     'live = args.watch and any(r.status == "running" for r in report.runs)', "live = args.watch", [LIVE]),
    ("lab.report: legends beside the plot", "lab/report/charts.py",
     'orientation="h", yref="container", yanchor="bottom", y=0, x=0', "", [SEEN, LEGEND_ROOM]),
    ("lab.report: the legend placed under the plot, over its x-axis title", "lab/report/charts.py",
     'yref="container", yanchor="bottom", y=0, x=0', 'yanchor="top", y=-0.18, x=0', [LEGEND_ROOM]),
    ("lab.report: long labels cut at the end (two variants one legend entry)", "lab/report/charts.py",
     'return text[:head] + "…" + text[len(text) - (LABEL_MAX - 1 - head):]', 'return text[: LABEL_MAX - 1] + "…"',
     [T + "test_legend_and_point_labels_are_bounded"]),
    ("lab.report: an entry per seed in every legend", "lab/report/charts.py",
     'legendgroup=v.label, showlegend=False,', "legendgroup=v.label,", [LEGEND_ROOM]),
]
