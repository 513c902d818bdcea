"""status.json's history (lab.runtime.rundir.history): every state RunDir.write_status writes is appended, with
when, the attempt, the process and the step metrics.csv had reached; older status files without one still read."""
from __future__ import annotations

import json

from lab.runtime.rundir.history import last_logged_step
from lab.runtime.rundir.run_dir import RunDir


def _csv(run, steps, cut=""):
    (run / "csv").mkdir(parents=True, exist_ok=True)
    (run / "csv" / "metrics.csv").write_text("train/loss,step\n" + "".join(f"{5 - s / 100},{s}\n" for s in steps) + cut)


def test_each_state_written_is_appended_with_its_attempt_process_and_step_reached(tmp_path):
    """A job as lab.runtime.sweeps.jobs writes it: started, SIGKILLed at step 16 (no end written), resumed from
    its step-10 checkpoint, completed at step 30. Without the history only the last state and attempts=2 were left."""
    run = RunDir(tmp_path)
    run.write_status(state="running", pid=11, host="h", attempts=1, resumed_from=None)
    _csv(tmp_path, range(0, 17, 2))  # the killed process logged up to step 16 and wrote nothing more
    run.write_status(state="running", pid=22, host="h", attempts=2, resumed_from=10)
    _csv(tmp_path, range(0, 31, 2))
    status = run.write_status(state="completed", metrics={})
    history = status["history"]
    assert [{k: v for k, v in e.items() if k != "at"} for e in history] == [
        {"event": "started", "attempt": 1, "host": "h", "pid": 11},
        {"event": "resumed", "attempt": 2, "host": "h", "pid": 22, "step": 16, "from_step": 10},
        {"event": "completed", "attempt": 2, "host": "h", "pid": 22, "step": 30}]
    assert history[-1]["at"] == status["updated"]
    assert json.loads((tmp_path / "status.json").read_text())["history"] == history
    run.write_status(wandb_id="x")  # no state: nothing appended
    assert run.read_status()["history"] == history


def test_a_status_file_from_before_the_history_reads_and_gains_one_from_its_next_state(tmp_path):
    old = {"state": "interrupted", "attempts": 1, "pid": 5, "host": "h", "updated": "2026-01-01T00:00:00+00:00"}
    (tmp_path / "status.json").write_text(json.dumps(old))
    run = RunDir(tmp_path)
    assert run.read_status() == old
    status = run.write_status(state="running", pid=6, attempts=2)
    assert [(e["event"], e["attempt"], e["pid"]) for e in status["history"]] == [("resumed", 2, 6)]


def test_a_single_run_counts_its_attempts_from_the_history(tmp_path):
    """A single run's status.json has no `attempts` (ckpt_path=auto resumes it in place): the history counts them."""
    run = RunDir(tmp_path)
    run.write_status(state="running", pid=1)
    run.write_status(state="interrupted")
    run.write_status(state="running", pid=2)
    history = run.write_status(state="failed")["history"]
    assert [(e["event"], e["attempt"]) for e in history] == [("started", 1), ("interrupted", 1), ("resumed", 2), ("failed", 2)]


def test_the_last_logged_step_is_the_last_whole_row(tmp_path):
    assert last_logged_step(tmp_path) is None  # no metrics.csv yet
    _csv(tmp_path, range(0, 5000, 1), cut="4.1,50")  # a row cut by a kill; the file is far longer than the tail read
    assert last_logged_step(tmp_path) == 4999
