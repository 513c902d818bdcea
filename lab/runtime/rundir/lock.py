"""A run directory belongs to one run: a lock held for the life of the process, and moving this process's
log into an earlier run's directory when it continues that run (ckpt_path=auto)."""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
from pathlib import Path

from lab.errors import LabError
from lab.runtime.rundir import journal

log = logging.getLogger("lab")
LOCK_NAME = ".lock"
_held: dict[Path, object] = {}  # run dir -> open lock file (the lock lives as long as the file is open)


def lock_run_dir(run_dir: Path) -> None:
    """Refuse a second process in run_dir. fcntl.flock is released by the kernel when its holder exits, even
    by SIGKILL, so a dead run never leaves its directory blocked (the file stays, the lock does not)."""
    run_dir = run_dir.resolve()
    if run_dir in _held:
        return
    journal.before_write(run_dir / LOCK_NAME)
    run_dir.mkdir(parents=True, exist_ok=True)
    f = open(run_dir / LOCK_NAME, "a+")  # noqa: SIM115 - kept open: closing it releases the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise LabError(f"run directory {run_dir} is in use by another process ({holder}); wait for it to end, "
                       "or give this run its own directory (leave hydra.run.dir to its default)") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    _held[run_dir] = f


def release_run_dirs() -> None:
    """Let go of every run directory this process holds (the next job of a sweep takes its own)."""
    while _held:
        _, f = _held.popitem()
        f.close()


def move_log_into(run_dir: Path, fresh_dir: Path) -> None:
    """Continue in run_dir instead of the directory Hydra just made for this launch: append this launch's
    train.log lines to run_dir/train.log, point the log file handler there, and remove fresh_dir if it holds
    nothing but what Hydra put there."""
    target = run_dir / "train.log"
    journal.before_append(target)
    for logger in (logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger))):
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == fresh_dir.resolve():
                handler.acquire()
                try:
                    handler.close()
                    so_far = Path(handler.baseFilename)
                    with open(target, "a") as out:
                        out.write(so_far.read_text() if so_far.exists() else "")
                    handler.baseFilename, handler.mode = str(target), "a"
                    handler.stream = handler._open()
                finally:
                    handler.release()
    leftovers = {p.name for p in fresh_dir.iterdir()} if fresh_dir.is_dir() else set()
    if leftovers <= {"train.log", ".hydra", LOCK_NAME}:
        shutil.rmtree(fresh_dir, ignore_errors=True)
