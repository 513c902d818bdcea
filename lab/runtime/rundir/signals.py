"""Stopping a training run on request (SIGTERM, SIGINT, SIGUSR1) without losing work.

A signal only records the request. After the current optimizer step every rank learns of it at the same step
(RunCheckpoint all-reduces the flag), Lightning's loop ends that step (metrics logged, validation if due), a
resumable checkpoint of that step is written, one line says why the run stopped and how to continue it,
and the process exits with EXIT_RESUMABLE so that schedulers and job arrays retry it.

- SIGTERM: preemption, `scancel`, `kill`. The grace period before SIGKILL must cover one step + one checkpoint.
- SIGUSR1: SLURM's pre-timeout signal (`#SBATCH --signal=USR1@120`); under SLURM the job also requeues itself
  (`scontrol requeue $SLURM_JOB_ID`, as Lightning's SLURMEnvironment(auto_requeue=True) does).
  SIGTERM does not requeue: it is also what `scancel` sends (a preempting SLURM requeues the job itself).
- SIGINT (Ctrl+C): the same stop; a second Ctrl+C stops at once, without a checkpoint.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

log = logging.getLogger("lab")

# EX_TEMPFAIL (sysexits.h): "temporary failure, the user is invited to retry". The run stopped on request after
# writing a checkpoint; rerunning the printed command (ckpt_path=auto) continues it.
EXIT_RESUMABLE = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
REQUEUE_SIGNAL = signal.SIGUSR1
REQUEUE_TIMEOUT_S = 30

_received: signal.Signals | None = None


def _on_signal(signum, frame) -> None:
    global _received
    if signum == signal.SIGINT and _received == signal.SIGINT:
        raise KeyboardInterrupt  # a second Ctrl+C: stop now
    if _received is None:
        _received = signal.Signals(signum)


def install() -> None:
    """Take over the stop signals (from Lightning's own SIGTERM/SLURM handlers too, which stop each rank on
    its own step). Main thread only, as Python requires; Lightning restores its predecessors after fit."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _on_signal)


def received() -> signal.Signals | None:
    """The first stop signal this process received, if any."""
    return _received


def request_stop(sig: signal.Signals) -> None:
    """Record a stop as if `sig` had arrived (another rank received it; or a test)."""
    global _received
    _received = _received or sig


def reset() -> None:
    global _received
    _received = None


def continue_command(run_dir: Path) -> str:
    """The command that continues this run in its own directory."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else sys.argv[1:]
    keep = [o for o in overrides if not re.match(r"^\+*(ckpt_path|hydra\.run\.dir)=", o)]
    return shlex.join(["python", "-m", "lab.train", *keep, f"hydra.run.dir={run_dir}", "ckpt_path=auto"])


def slurm_job_id() -> str | None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")
    return job if job and re.fullmatch(r"[0-9_]+", job) else None


def requeue_slurm_job(job_id: str) -> bool:
    """`scontrol requeue <job>`: the job goes back to the queue and reruns its batch script (bounded wait)."""
    try:
        result = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=REQUEUE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("SLURM: could not requeue job %s (%s); resubmit it yourself", job_id, e)
        return False
    if result.returncode != 0:
        log.warning("SLURM: `scontrol requeue %s` failed (exit %d: %s); resubmit it yourself",
                    job_id, result.returncode, result.stderr.strip())
        return False
    log.info("SLURM: requeued job %s", job_id)
    return True


def exit_resumable(step: int, run_dir: Path, checkpoint: Path | None, is_rank_zero: bool) -> None:
    """Say why the run stopped and how to continue it, requeue under SLURM, exit EXIT_RESUMABLE."""
    sig = _received or signal.SIGTERM
    if is_rank_zero:
        where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint (training had not started)"
        log.warning("stopped by %s after step %d; %s; exit code %d. Continue with: %s",
                    sig.name, step, where, EXIT_RESUMABLE, continue_command(run_dir))
        job = slurm_job_id()
        if job and sig == REQUEUE_SIGNAL:
            requeue_slurm_job(job)
    for handler in logging.getLogger().handlers:
        handler.flush()
    raise SystemExit(EXIT_RESUMABLE)
