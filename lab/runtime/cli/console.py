"""What a run prints: each message once, no third-party adverts, user errors once, long phases announced."""
from __future__ import annotations

import contextlib
import io
import logging
import re
import time
import warnings

log = logging.getLogger("lab")

# Messages from libraries that advertise instead of inform (Lightning's "Tip: ... litlogger").
ADVERTS = ("litlogger", "Lightning Experiments platform")


# Per-job detail a sweep's console leaves to each job's train.log: every file read, generated examples, the
# memory note, Lightning's accelerator lines. A single run shows them.
SWEEP_DETAIL = re.compile(r"data: read |[\w/ -]+ @ step \d+ \| |cpu memory: |[GTH]PU available: ")
_sweep_job: list[int] = []  # non-empty while a sweep job runs; [0] counts the lines kept from its console


class DropAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(a in str(record.msg) for a in ADVERTS)


def single_console() -> None:
    """Call after Hydra has configured logging and Lightning is imported. Lightning attaches its own console
    handler to the `lightning` logger ("INFO: ...") and still propagates to the root logger, whose handlers
    Hydra configured (console + train.log): every Lightning message appeared twice on screen. Drop Lightning's
    handler where the root has handlers (its messages still reach the screen and train.log once), and its
    adverts everywhere."""
    import lightning  # noqa: F401, PLC0415 - its package __init__ installs the handler being removed

    root_handles = logging.getLogger().hasHandlers()
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        if root_handles:
            for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
                logger.removeHandler(handler)
            logger.propagate = True
    # lab's batch samplers skip what a checkpoint already trained on (lab.data.batching, resume_point), so a
    # mid-epoch resume is exact (tested: tests/runtime/sweeps/test_sweeps_jobs.py); Lightning cannot see that and warns of
    # "unreliable results" on every such resume
    warnings.filterwarnings("ignore", message=".*your dataloader is not resumable.*")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropAdverts) for f in logger.filters):
            logger.addFilter(DropAdverts())


class SweepDetail(logging.Filter):
    _last: logging.LogRecord | None = None  # one record passes every console handler: counted once

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.INFO and SWEEP_DETAIL.match(record.getMessage()):
            if record is not self._last:
                _sweep_job[0] += 1
                self._last = record
            return False
        return True


@contextlib.contextmanager
def sweep_job_console(log_file: str):
    """While a job of a multirun runs: its console shows progress, warnings and results, not the per-job
    detail (SWEEP_DETAIL, the config tree): that goes to its train.log only, and one line at the end says
    how many lines that was."""
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    detail = SweepDetail()
    for h in handlers:
        h.addFilter(detail)
    _sweep_job[:] = [0]
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(detail)
        if _sweep_job[0]:
            log.info("%d lines of detail (config, files read, samples) are in %s only", _sweep_job[0], log_file)
        _sweep_job.clear()


def show(renderable) -> None:
    """Rich output (the config tree) on the screen; inside a sweep job, in its train.log only."""
    import rich  # noqa: PLC0415
    import rich.console  # noqa: PLC0415

    if not _sweep_job:
        rich.print(renderable)
        return
    text = io.StringIO()
    rich.console.Console(file=text, width=120, color_system=None).print(renderable)
    record_in_log_files("\n" + text.getvalue(), logging.INFO)
    _sweep_job[0] += text.getvalue().count("\n")


def record_in_log_files(message: str, level: int = logging.ERROR) -> None:
    """Write a message to the run's log files only (train.log): for what is also printed on screen another
    way (the one-line `error:` of a user mistake), so it is in the log without showing twice."""
    record = log.makeRecord(log.name, level, __file__, 0, "%s", (message,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


@contextlib.contextmanager
def phase(what: str, min_seconds: float = 2.0):
    """Announce a phase that may be long and silent (data build, tokenizer training, compilation) before it
    starts, and its duration after it if it took more than min_seconds."""
    log.info("%s ...", what)
    t0 = time.perf_counter()
    yield
    elapsed = time.perf_counter() - t0
    if elapsed >= min_seconds:
        log.info("%s: done in %.1fs", what, elapsed)
