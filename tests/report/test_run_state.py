"""A run's state on this host: its pid and the start time of the process that had it (a reused pid is not the run)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path


def running_run(path: Path, status: dict) -> Path:
    """A run with no end recorded: status.json says running, train.log has no closing line."""
    path.mkdir(parents=True)
    (path / "train.log").write_text("... step 3\n")
    (path / "status.json").write_text(json.dumps({"state": "running", "host": os.uname().nodename, **status}))
    return path


def test_a_process_start_time_is_the_one_ps_reports():
    """Against ps's elapsed seconds (an independent reader of the same process): now - etimes, within 2 s;
    the same figure every time it is read, and none for a pid no process holds."""
    from lab.runtime.rundir.process import start_time

    child = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(1.2)
        elapsed = int(subprocess.run(["ps", "-o", "etimes=", "-p", str(child.pid)], capture_output=True, text=True).stdout)
        assert abs(start_time(child.pid) - (time.time() - elapsed)) < 2.0
        assert start_time(child.pid) == start_time(child.pid)
        assert start_time(os.getpid()) < start_time(child.pid)  # this test's process started first
    finally:
        child.kill()
        child.wait()
    assert start_time(child.pid) is None


def test_a_reused_pid_is_not_the_run_s_process(tmp_path):
    """status.json's pid is alive, but the process holding it started at another time than the run's: the run
    is stopped (pid_alive alone called it running: a pid reused after a kill kept a dead run 'running')."""
    from lab.report.runs import run_status
    from lab.runtime.rundir.process import start_time

    pid, started, host = os.getpid(), start_time(os.getpid()), os.uname().nodename
    own = running_run(tmp_path / "own", {"pid": pid, "pid_started": started})
    reused = running_run(tmp_path / "reused", {"pid": pid, "pid_started": started - 3600})
    older = running_run(tmp_path / "older", {"pid": pid})  # written before lab recorded start times
    assert run_status(own) == ("running", "")
    assert run_status(older) == ("running", "")
    assert run_status(reused) == ("stopped", f"no end recorded and its process (pid {pid} on {host}, started "
                                             f"{started - 3600}) is gone: pid {pid} is now another process (started "
                                             f"{started}): killed or crashed")
