"""One-line bugs in W&B's completeness after a kill, the report's W&B mode and a run's state from its pid (issue 47), for
tests/mutants.py: name, file, a snippet occurring exactly once in it, its replacement, the tests that must fail."""
from __future__ import annotations

W = "tests/runtime/trainer/test_wandb.py::"
KILLED = W + "test_steps_a_killed_attempt_never_wrote_are_logged_again_on_resume"
CUT = W + "test_a_wandb_file_cut_by_a_kill_reads_up_to_its_last_whole_record"
REUSED = "tests/report/test_run_state.py::test_a_reused_pid_is_not_the_run_s_process"
START = "tests/report/test_run_state.py::test_a_process_start_time_is_the_one_ps_reports"
REPORT_OFFLINE = "tests/report/test_report_wandb.py::test_a_key_and_an_unreachable_server_log_the_tables_offline"

MUTANTS = [
    ("W&B resume: rows a killed attempt never wrote are not logged again", "lab/runtime/trainer/loggers.py",
     "                self._relog_unwritten(int(step))\n", "                pass\n", [KILLED]),
    ("W&B resume: what the earlier segments hold is not read", "lab/runtime/trainer/loggers.py",
     "max(RunDir(save_dir).wandb_last_step(run_id), last_held_step(save_dir, run_id))",
     "RunDir(save_dir).wandb_last_step(run_id)", [KILLED]),
    ("W&B resume: the last held step is logged twice", "lab/runtime/trainer/wandb_resume.py",
     "after < int(step) < before", "after <= int(step) < before", [KILLED]),
    ("W&B resume: a file cut mid-chunk is read past its end", "lab/runtime/trainer/wandb_resume.py",
     "if kind == 0 or pos + 7 + length > len(data):", "if kind == 0:", [CUT]),
    ("run state: a live pid is the run's whatever its start time", "lab/report/runs.py",
     "or started == recorded:", "or started:", [REUSED]),
    ("run state: the start time counts ticks from the wrong field", "lab/runtime/rundir/process.py",
     ".split()[19]", ".split()[20]", [START]),
    ("lab.report W&B: a key means online without asking the server", "lab/report/wandb_table.py",
     "mode = decide_mode(None, False, PROBE_S, str(wandb_dir(sweep)))", 'mode = "online"', [REPORT_OFFLINE]),
]
