"""Stop signals end a real training run after a checkpoint of the current step, resumable, in subprocesses."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_LM, metric_by_step, read_metrics, run_dirs

from lab.runtime.rundir.signals import EXIT_RESUMABLE

LONG = [*TINY_LM, "trainer.max_steps=2000", "trainer.val_check_interval=1000", "callbacks.checkpoint.every_n_steps=5"]


def launch(args: list[str], runs_dir: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "LAB_RUNS_DIR": str(runs_dir), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "lab.train", *args], cwd=ROOT, env=full_env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended early (exit {proc.returncode})"
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def first_checkpoint(runs_dir: Path):
    return lambda: any(runs_dir.rglob("checkpoints/last.ckpt"))


def stop_line(log: Path) -> tuple[int, str]:
    """(step, continue command) from the one line a stopped run prints."""
    lines = [ln for ln in log.read_text().splitlines() if "stopped by" in ln]
    assert len({ln.split(" - ", 1)[-1] for ln in lines}) == 1, lines
    m = re.search(r"stopped by SIG\w+ after step (\d+); checkpoint (\S+); exit code 75\. Continue with: (.*)$", lines[0])
    assert m, lines[0]
    return int(m.group(1)), m.group(3)


def step_of(path: Path) -> int:
    return torch.load(path, weights_only=False)["global_step"]


def test_sigterm_stops_after_the_current_step_with_a_checkpoint_of_it(tmp_path):
    log = tmp_path / "out.txt"
    proc = launch(LONG, tmp_path, log)
    wait_for(first_checkpoint(tmp_path), proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == EXIT_RESUMABLE, log.read_text()[-3000:]
    (run,) = run_dirs(tmp_path)
    step, command = stop_line(log)
    assert step > 5 and step_of(run / "checkpoints" / "last.ckpt") == step  # not the periodic one of step 5
    assert command.startswith("python -m lab.train +experiment=gpt_nano_char") and command.endswith(f"hydra.run.dir={run} ckpt_path=auto")
    rows = metric_by_step(read_metrics(run), "train/loss")
    assert sorted(rows) == list(range(step)), "metrics.csv does not hold exactly the steps before the checkpoint"


def fake_slurm(tmp_path: Path) -> tuple[dict, Path]:
    """A SLURM job environment and an `scontrol` on PATH that records its arguments."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol_calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1",
           "SLURM_JOB_NAME": "lab-train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
           "SLURM_NODELIST": "localhost"}
    return env, calls


@pytest.mark.parametrize("sig, requeued", [(signal.SIGUSR1, True), (signal.SIGTERM, False)], ids=["SIGUSR1-requeues", "SIGTERM-does-not"])
def test_under_slurm_the_pre_timeout_signal_requeues_the_job(tmp_path, sig, requeued):
    env, calls = fake_slurm(tmp_path)
    log = tmp_path / "out.txt"
    proc = launch(LONG, tmp_path / "runs", log, env=env)
    wait_for(first_checkpoint(tmp_path / "runs"), proc)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == EXIT_RESUMABLE, log.read_text()[-3000:]
    step, _ = stop_line(log)
    (run,) = run_dirs(tmp_path / "runs")
    assert step_of(run / "checkpoints" / "last.ckpt") == step
    assert (calls.read_text().split() if calls.exists() else []) == (["requeue", "4242"] if requeued else [])


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
def test_ddp_ranks_stop_at_the_same_step_when_one_rank_is_signalled(tmp_path):
    """SIGTERM reaches rank 1 only: rank 0 learns of it at the next step; both stop there, one checkpoint."""
    log = tmp_path / "out.txt"
    proc = launch([*LONG, "trainer=ddp_cpu"], tmp_path, log)
    wait_for(first_checkpoint(tmp_path), proc, timeout=400)
    (rank1,) = children(proc.pid)
    os.kill(rank1, signal.SIGTERM)
    assert proc.wait(timeout=180) == EXIT_RESUMABLE, log.read_text()[-3000:]
    (run,) = run_dirs(tmp_path)
    step, _ = stop_line(log)
    assert step_of(run / "checkpoints" / "last.ckpt") == step
    assert sorted(metric_by_step(read_metrics(run), "train/loss")) == list(range(step))
