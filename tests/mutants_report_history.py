"""One-line bugs in status.json's state history, its drill-down timeline, the wide-table scroll box, the runs
table's controls in the address and --serve's push, for the mutation script (tests/mutants.py)."""
from __future__ import annotations

H = "tests/runtime/rundir/test_history.py::"
APPENDED = H + "test_each_state_written_is_appended_with_its_attempt_process_and_step_reached"
OLD = H + "test_a_status_file_from_before_the_history_reads_and_gains_one_from_its_next_state"
SINGLE = H + "test_a_single_run_counts_its_attempts_from_the_history"
CUT = H + "test_the_last_logged_step_is_the_last_whole_row"
P = "tests/report/test_report_page.py::"
TIMELINE = P + "test_a_runs_record_has_its_state_history_with_a_killed_attempt_named"
BROWSER = P + "test_browser_filters_sorts_groups_the_runs_by_config_keys_and_opens_a_runs_record"
RELOAD = P + "test_browser_the_runs_tables_filter_sort_and_group_survive_a_reload"
SERVE = P + "test_serve_serves_the_page_on_localhost_and_its_version_changes_when_a_run_writes"
PUSHED = P + "test_browser_a_served_page_reloads_when_pushed_and_falls_back_to_asking"
AUTO = "tests/runtime/rundir/test_autoresume.py::test_auto_starts_fresh_then_continues_the_same_run_in_its_directory"
WIDE = "tests/report/test_report.py::test_browser_three_long_preset_names_keep_every_table_inside_a_1400px_page"

MUTANTS = [
    ("ckpt_path=auto: the launch's record not where the run continues", "lab/runtime/rundir/run_dir.py",
     "        if auto and owner:\n            run.record_launch(cfg.ckpt_path)", "        if False:\n            run.record_launch(cfg.ckpt_path)",
     [AUTO]),
    ("state history: rewritten instead of appended", "lab/runtime/rundir/run_dir.py",
     "[*(before.get(history.KEY) or []), history.entry(before, status, self.path)]",
     "[history.entry(before, status, self.path)]", [APPENDED, SINGLE]),
    ("state history: every start is a start", "lab/runtime/rundir/history.py",
     'event = "resumed" if past or attempt > 1 else "started"', 'event = "started"', [APPENDED, OLD, SINGLE]),
    ("state history: attempts of a single run not counted", "lab/runtime/rundir/history.py",
     "attempt = after.get(\"attempts\") or starts + 1", "attempt = after.get(\"attempts\") or 1", [SINGLE]),
    ("state history: a row cut by a kill read as the last step", "lab/runtime/rundir/history.py",
     "for line in reversed(lines[1:-1]):", "for line in reversed(lines[1:]):", [CUT]),
    ("state history: the resume step not kept", "lab/runtime/rundir/history.py",
     'if event == "resumed" and after.get("resumed_from") is not None:', 'if event == "started":', [APPENDED, TIMELINE]),
    ("run timeline: a killed attempt not named", "lab/report/runs_view.py",
     "            if open_attempt is not None:\n                reached", "            if False:\n                reached",
     [TIMELINE, BROWSER]),
    ("run timeline: no resume marked on the curve", "lab/report/runs_view.py",
     'if e.get("event") == "resumed" and isinstance', 'if e.get("event") == "started" and isinstance', [TIMELINE, BROWSER]),
    ("run drill-down: one curve for all attempts", "lab/report/runs_view.py",
     "name:cuts.length?'attempt '+(k?r.resumes[k-1][1]:r.resumes[0][1]-1):c", "name:c", [BROWSER]),
    ("wide tables: the box does not scroll", "lab/report/html.py",
     ".table-scroll{overflow-x:auto;max-width:100%}", ".table-scroll{max-width:100%}", [WIDE]),
    ("wide tables: the first column scrolls away", "lab/report/html.py",
     "{position:sticky;left:0;z-index:1}", "{z-index:1}", [WIDE]),
    ("runs controls: not written to the address", "lab/report/runs_view.py",
     "([k,v])=>v?h.set(k,v):h.delete(k)", "([k,v])=>h.delete(k)", [RELOAD]),
    ("runs controls: the curve controls overwrite the address", "lab/report/html.py",
     "const h=new URLSearchParams(location.hash.slice(1));h.set('x',axis)", "const h=new URLSearchParams();h.set('x',axis)",
     [RELOAD]),
    ("runs controls: the filter not read back", "lab/report/runs_view.py", "set(filter,'filter');", "", [RELOAD]),
    ("--serve push: the stream never carries a version", "lab/report/serve.py",
     'f"data: {now}\\n\\n".encode() if now != sent else b": still\\n\\n"', 'b": still\\n\\n"', [SERVE, PUSHED]),
    ("--serve push: no fallback after an http error", "lab/report/html.py",
     "if(es.readyState===2||++fails>=", "if(++fails>=", [PUSHED]),
    ("--serve: no ETag, Last-Modified's seconds decide", "lab/report/serve.py",
     "        if self.etag:\n", "        if False:\n", [SERVE, PUSHED]),
    ("--serve: HTTP/1.0 answers (the browser ignores their ETag)", "lab/report/serve.py",
     'protocol_version = "HTTP/1.1"', 'protocol_version = "HTTP/1.0"', [PUSHED]),
]
