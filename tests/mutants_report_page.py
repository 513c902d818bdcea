"""One-line bugs in lab.report's page (layout, the runs table's data and script, --serve) that
tests/report/test_report_page.py must kill, for the mutation script (tests/mutants.py)."""
from __future__ import annotations

T = "tests/report/test_report_page.py::"
MARKER = T + "test_the_compared_step_marker_stays_inside_the_data"
AXES = T + "test_browser_no_axis_stretched_past_the_data_and_no_point_label_cut"
LABELS = T + "test_cost_chart_labels_run_toward_the_middle_so_none_is_cut_at_the_edge"
CLIP = T + "test_huge_values_before_a_nan_do_not_flatten_the_healthy_curves"
RECORDS = T + "test_the_runs_table_data_is_every_run_in_the_tables_order_with_its_whole_config_and_curves"
NAN = T + "test_a_diverged_runs_record_has_null_where_its_loss_was_nan"
BROWSER = T + "test_browser_filters_sorts_groups_the_runs_by_config_keys_and_opens_a_runs_record"
INLINED = T + "test_browser_the_runs_table_library_is_inlined_and_orders_numbers_by_value"
SERVE = T + "test_serve_serves_the_page_on_localhost_and_its_version_changes_when_a_run_writes"
BUSY = T + "test_serve_refuses_a_port_in_use_in_one_line_and_writes_nothing"

MUTANTS = [
    ("lab.report page: the compared-step label is an annotation again", "lab/report/charts.py",
     'label=dict(text=f"compared at step {budget:,.0f}", textposition="end", font=dict(size=10)))',
     'annotation_text=f"compared at step {budget:,.0f}")', [MARKER]),
    ("lab.report page: the compared-step line on a curve that ends before it", "lab/report/charts.py",
     "min(x[0] for x in logged) <= budget < max(x[-1] for x in logged)",
     "budget < max(r.last_step for v in variants for r in v.runs)", [MARKER, AXES]),
    ("lab.report page: the outermost cost labels are centred", "lab/report/charts.py",
     '"top right" if x < mid else "top left" if x > mid else "top center"', '"top center"', [LABELS, AXES]),
    ("lab.report page: the y-range clips a diverged run that stays in range", "lab/report/charts.py",
     "    if not out:\n        return\n    reach", "    out = out or list(wild)\n    reach", [CLIP]),
    ("lab.report page: the clipped range is everyone's", "lab/report/charts.py",
     "healthy = [y for r in runs if r.diverged_at is None for y", "healthy = [y for r in runs for y", [CLIP]),
    ("lab.report page: runs' records in another order than the table's rows", "lab/report/runs_view.py",
     "runs = [(v, r) for v in report.variants for r in v.runs]", "runs = [(v, r) for v in report.variants[::-1] for r in v.runs]",
     [RECORDS]),
    ("lab.report page: a NaN point is written as NaN", "lab/report/runs_view.py",
     "if isinstance(v, float) and not math.isfinite(v):", "if False:", [NAN]),
    ("lab.report page: the filter's != is =", "lab/report/runs_view.py", "return m[2]==='='?eq:!eq", "return eq", [BROWSER]),
    ("lab.report page: grouping ignores the group key in the order", "lab/report/runs_view.py",
     "dt.order.fixed(g?{pre:[[col(g),'asc']]}:{})", "dt.order.fixed({})", [BROWSER]),
    ("lab.report page: the runs filter is not applied", "lab/report/runs_view.py", "dt.search.fixed('lab',", "(", [BROWSER]),
    ("lab.report page: a group's header names the table's first run's value", "lab/report/runs_view.py",
     "val(rs.indexes()[0],group.value)", "val(0,group.value)", [BROWSER]),
    ("lab.report page: the sort or group key's column stays hidden", "lab/report/runs_view.py",
     "dt.column(n+k).visible(shown.has(n+k),false)", "dt.column(n+k).visible(false,false)", [BROWSER]),
    ("lab.report page: a clicked header's order not in the controls and address", "lab/report/runs_view.py",
     "dt.on('order',()=>{if(drawing)return;", "dt.on('order',()=>{return;", [BROWSER]),
    ("lab.report page: a run's row does not open its record", "lab/report/runs_view.py",
     "if(i!==undefined)labRunDetail(i)", "if(i===undefined)labRunDetail(i)", [BROWSER]),
    ("lab.report page: numeric columns ordered by their text", "lab/report/runs_view.py",
     "tr.cells[j].dataset.order=isFinite(cells[i][j])?cells[i][j]:''", "0", [INLINED]),
    ("lab.report page: a nan cell ordered as NaN", "lab/report/runs_view.py",
     "tr.cells[j].dataset.order=isFinite(cells[i][j])?cells[i][j]:''", "tr.cells[j].dataset.order=cells[i][j]", [INLINED]),
    ("lab.report page: the table library fetched from a CDN", "lab/report/runs_view.py",
     "try{return (await import(u)).default}", "try{return (await import('https://cdn.datatables.net/2.3.8/js/dataTables.mjs')).default}",
     [INLINED]),
    ("lab.report --serve: the version never changes", "lab/report/serve.py",
     "return str(page.stat().st_mtime_ns if page.is_file() else 0)", 'return "0"', [SERVE]),
    ("lab.report --serve: the port is bound after the first render", "lab/report/__main__.py",
     "        server = serve.bind(out_dir(args), args.serve)  # a port in use: one line, nothing written\n"
     "        args.watch = True\n    render(args, served=server is not None)\n",
     "        args.watch = True\n    render(args, served=True)\n    if args.serve is not None:\n"
     "        server = serve.bind(out_dir(args), args.serve)\n", [BUSY]),
]
