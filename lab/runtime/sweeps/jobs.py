"""Sweep jobs that fail, stop and continue alone.

Every run directory records how its job ended in `status.json` (running -> completed | interrupted | failed |
pruned, with the error line), written atomically; `completed` is written last, after checkpoints, metrics and
the W&B run are closed, so it is the completion marker. In a Hydra multirun (`-m`, any launcher, Optuna too):

- a job that fails (a user error or an exception) is recorded and the sweep goes on;
- re-running the same command into the same sweep dir (`hydra.sweep.dir=...`) skips completed jobs, resumes
  interrupted or failed ones from their own `checkpoints/last.ckpt`, starts the rest: one line per job says which;
- each job keeps one W&B run id (stored in its status.json, resumed with resume="allow");
- the sweep ends with a summary (N completed, M failed with their error lines and logs) and a non-zero exit
  code if any job did not complete (`SweepCallbacks`, a Hydra callback in conf/train.yaml);
- a launcher that cannot work here (hydra/launcher=slurm without SLURM, submitit not installed) is one
  `error:` line before any job starts.
"""
from __future__ import annotations

import functools
import logging
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from lab.errors import LabError
from lab.runtime.rundir.run_dir import STATUS_FILE, RunDir, launch_fields, now

log = logging.getLogger("lab")
ENDED = ("completed", "interrupted", "failed", "pruned")
_unrecorded: list[str] = []  # failures that could not be written into a job dir (it holds another job)
_durations: list[float] = []  # seconds each job run by this process took (the sweep's ETA)


# ---- the record of one job: status.json in its run directory (lab.runtime.rundir.run_dir) ----------------

def read_status(job_dir: Path) -> dict[str, Any] | None:
    return RunDir(job_dir).read_status()


def write_status(job_dir: Path, **fields: Any) -> dict[str, Any]:
    return RunDir(job_dir).write_status(**fields)


def how_it_ended(e: BaseException) -> tuple[str, str]:
    """-> (state, one line) for an exception that ended a job."""
    from lab.runtime.cli.errors import user_error_in  # noqa: PLC0415 - cli imports this module's callers

    if isinstance(e, KeyboardInterrupt | SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
        return "interrupted", "interrupted (Ctrl-C or a signal)"
    if type(e).__name__ == "TrialPruned":  # optuna's, raised by the pruning callback
        return "pruned", str(e) or "pruned"
    cause = user_error_in(e)
    return "failed", str(cause) if cause is not None else f"{type(e).__name__}: {e}"


def resume_checkpoint(job_dir: Path) -> Path | None:
    """The checkpoint an unfinished job continues from: the newest valid one in its own directory, by the
    rule `ckpt_path=auto` uses (lab.runtime.rundir.autoresume; a damaged newest one is skipped with a warning)."""
    from lab.runtime.rundir.autoresume import newest_valid_checkpoint  # noqa: PLC0415

    return newest_valid_checkpoint(Path(job_dir))


# ---- one job -------------------------------------------------------------------------------------------

def _hydra_job() -> dict[str, Any] | None:
    """This job's place in a Hydra multirun, or None for a single run."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415
    from hydra.types import RunMode  # noqa: PLC0415

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    return {"num": hc.job.num, "dir": Path(hc.runtime.output_dir), "overrides": list(hc.overrides.task),
            "total": sweep_size(Path(hc.sweep.dir))}


def sweep_size(sweep_dir: Path) -> int | None:
    """How many jobs the sweep has: the product of its sweep overrides' value counts (a grid), as Hydra wrote
    them into <sweep dir>/multirun.yaml, or the Optuna sweeper's n_trials; None when it cannot be told."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415
        from omegaconf import OmegaConf  # noqa: PLC0415

        cfg = OmegaConf.load(Path(sweep_dir) / "multirun.yaml")
        trials = OmegaConf.select(cfg, "hydra.sweeper.n_trials")
        if trials is not None:
            return int(trials)
        total = 1
        for o in OverridesParser.create().parse_overrides(list(OmegaConf.select(cfg, "hydra.overrides.task") or [])):
            if o.is_sweep_override():
                total *= len(list(o.sweep_string_iterator()))
        return total
    except Exception:  # no multirun.yaml (another launcher's layout), a sweep syntax with no count: say nothing
        return None


def progress(num: int, total: int | None) -> str:
    """' [k/N, sweep ETA 4m10s]': this job's place, and the time left at the mean of the jobs this process ran."""
    if total is None:
        return ""
    eta = ""
    if _durations:
        m, sec = divmod(round(sum(_durations) / len(_durations) * (total - num)), 60)
        eta = ", sweep ETA " + (f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{sec:02d}s" if m else f"{sec}s")
    return f" [{num + 1}/{total}{eta}]"


def sweep_job(fn):
    """Wrap an entry point's Hydra task function (inside `user_errors_exit`): record how the job ends in its
    run dir; in a multirun also skip / resume / start it, and let a failure end this job only."""

    @functools.wraps(fn)
    def wrapper(cfg: DictConfig):
        from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415 - rank from the environment

        if rank_zero_only.rank != 0:  # DDP/FSDP ranks > 0 re-run this job: rank 0 keeps its record
            return fn(cfg)
        job = _hydra_job()
        if job is None:  # a single run: record its end, errors go on to user_errors_exit (one line, exit 2)
            from lab.runtime.rundir.autoresume import AUTO  # noqa: PLC0415 - as RunDir.claim: when a run starts

            if cfg.get("ckpt_path") != AUTO:  # with auto, RunDir.claim records it where the run continues
                write_status(Path(cfg.paths.output_dir), **launch_fields())
            return _run(fn, cfg, None)
        from lab.runtime.cli import errors as cli  # noqa: PLC0415

        cli.LAUNCH_TIME = time.time()  # "first step N s after launch" counts from this job's own start
        return _run_sweep_job(fn, cfg, job)

    return wrapper


def _run_sweep_job(fn, cfg: DictConfig, job: dict[str, Any]):
    from lab.runtime.rundir import journal  # noqa: PLC0415

    journal.keep()  # a job's failure stays recorded in its own directory: the sweep's summary reads it
    num, job_dir, overrides = job["num"], job["dir"], job["overrides"]
    what = f"job {num} ({' '.join(overrides) or 'no overrides'})"
    where = progress(num, job["total"])
    before = read_status(job_dir)
    if before and before.get("overrides") not in (None, overrides):
        line = (f"{job_dir} holds another job ({' '.join(before['overrides'])}), not {what}: this sweep dir "
                "was made by a different command; use a new hydra.sweep.dir")
        log.error("%s", line)
        print(f"error: {line}", file=sys.stderr)
        _unrecorded.append(f"job {num} failed: {line}")
        return None
    if before and before.get("state") == "completed":
        log.info("%s: skipped, completed %s (%s)", what, before.get("ended"), job_dir)
        return before.get("value")

    resume_step = None
    ckpt = resume_checkpoint(job_dir) if before else None
    if ckpt is not None:  # its own last checkpoint, also over a ckpt_path the whole sweep starts from
        from lab.checkpoints.reading import read_checkpoint  # noqa: PLC0415

        try:
            resume_step = int(read_checkpoint(ckpt, metadata_only=True).get("global_step", 0))
        except LabError as e:  # e.g. killed while writing it: this job fails, the sweep goes on
            line = f"cannot resume: {e}"
            print(f"error: job {num}: {line}", file=sys.stderr)
            write_status(job_dir, state="failed", error=line, ended=now())
            return None
        with open_dict(cfg):
            cfg.ckpt_path = str(ckpt)
        _pass_to_child_processes(f"ckpt_path={ckpt}")
        log.info("%s: resumed from %s at step %d (it was %s)%s", what, ckpt, resume_step, before.get("state"), where)
    elif before:
        log.info("%s: started again from scratch (it was %s, no checkpoint)%s", what, before.get("state"), where)
    else:
        log.info("%s: started%s", what, where)

    wandb_id = (before or {}).get("wandb_id") or uuid.uuid4().hex[:12]
    if cfg.get("logger") and cfg.logger.get("wandb") is not None:
        with open_dict(cfg):  # the same W&B run for every attempt at this job: no duplicate runs
            cfg.logger.wandb.id = wandb_id
            cfg.logger.wandb.resume = "allow"
    write_status(job_dir, **launch_fields(), job=num, overrides=overrides, wandb_id=wandb_id,
                 attempts=(before or {}).get("attempts", 0) + 1, resumed_from=resume_step)
    from lab.runtime.cli.console import sweep_job_console  # noqa: PLC0415

    try:
        with sweep_job_console(str(job_dir / "train.log")):
            return _run(fn, cfg, job_dir)
    except Exception:
        return None  # recorded in status.json, summarised at the end of the sweep; the next job runs


def _pass_to_child_processes(override: str) -> None:
    """DDP/FSDP ranks > 0 re-run the job's overrides (lab.runtime.trainer.strategies.pin_child_processes_to_job):
    add the resume checkpoint to them, or those ranks would start from scratch."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415
    from omegaconf import read_write  # noqa: PLC0415

    hc = HydraConfig.get()
    with read_write(hc.overrides):
        hc.overrides.task.append(override)


def _run(fn, cfg: DictConfig, job_dir: Path | None):
    """Run fn and record how it ended in the run's status.json: job_dir's for a sweep job; for a single run (None)
    cfg.paths.output_dir's once fn has claimed it (ckpt_path=auto may continue an earlier run in its directory)."""
    RunDir.final_metrics.clear()
    t0 = time.time()

    def record(**fields: Any) -> Path:
        where = job_dir or Path(cfg.paths.output_dir)
        before = (read_status(where) or {}).get("wall_s") or 0.0  # the earlier attempts' (the report's wall time)
        write_status(where, **fields, ended=now(), metrics=dict(RunDir.final_metrics),
                     wall_s=round(before + time.time() - t0, 1))
        return where

    try:
        value = fn(cfg)  # a resumed job's metrics.csv continues (lab.runtime.trainer.metrics_csv.RunCSVLogger)
    except BaseException as e:
        from lab.runtime.cli.errors import user_error_in  # noqa: PLC0415

        state, line = how_it_ended(e)
        job = _hydra_job()
        if job is not None and state == "failed":
            if user_error_in(e) is None:  # a bug, not a user error: its traceback goes to the job's train.log
                log.error("job %d failed", job["num"], exc_info=e)
            else:
                log.error("%s", line)
            print(f"error: job {job['num']}: {line}", file=sys.stderr)
        record(state=state, error=None if state == "interrupted" else line)
        if job is not None and state == "interrupted":  # the sweep stops here (Hydra calls no end callback)
            print("\n".join(summarize(job["dir"].parent, job["total"])[0]), file=sys.stderr)
        raise
    where = record(state="completed", error=None, value=value)
    _durations.append(time.time() - t0)
    RunDir(where).drop_lock_file()  # released when the run ended; a completed job is never run again
    return value


# ---- the whole sweep: launcher check before, summary after ------------------------------------------

# hydra-submitit-launcher's own and lab's on top of it (hydra_plugins/lab_launchers).
SUBMITIT_LAUNCHERS = ("hydra_plugins.hydra_submitit_launcher.", "hydra_plugins.lab_launchers.")


def check_launcher(launcher: DictConfig) -> None:
    """Refuse a launcher that cannot work on this machine, before any job starts."""
    import importlib.util  # noqa: PLC0415

    target = str(launcher.get("_target_", ""))
    if target.startswith(SUBMITIT_LAUNCHERS) and importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        raise LabError("hydra/launcher=slurm and submitit_local need the submitit launcher: "
                       "pip install 'lab[slurm]' (or run without hydra/launcher=...: jobs one after another)")
    if target.endswith("SlurmLauncher"):
        missing = [cmd for cmd in ("sbatch", "srun") if shutil.which(cmd) is None]
        if missing:
            raise LabError(f"hydra/launcher=slurm needs SLURM, but {' and '.join(missing)} "
                           f"{'is' if len(missing) == 1 else 'are'} not on PATH here (not a SLURM login node); "
                           "launch from one, or run here with the default launcher (jobs one after another) or "
                           "hydra/launcher=submitit_local (parallel jobs on this machine)")


def summarize(sweep_dir: Path, total: int | None = None) -> tuple[list[str], bool]:
    """-> (lines, every job completed). One line per job that did not complete, with its log; jobs of the
    sweep's `total` (sweep_size) that never started are counted too."""
    jobs = sorted((p for p in Path(sweep_dir).glob(f"*/{STATUS_FILE}")), key=lambda p: (len(p.parent.name), p.parent.name))
    counts: dict[str, int] = {}
    problems = list(_unrecorded)
    for path in jobs:
        status = read_status(path.parent) or {}
        state = status.get("state", "unknown")
        if state == "running":  # no end recorded: the process was killed (SIGKILL, out of memory, node lost)
            state = "interrupted"
        counts[state] = counts.get(state, 0) + 1
        if state not in ("completed", "pruned"):  # pruned: an Optuna trial stopped early on purpose
            reason = status.get("error") or ("no end recorded (killed)" if status.get("state") == "running" else state)
            problems.append(f"job {path.parent.name} {state}: {reason} (log: {path.parent / 'train.log'})")
    order = [s for s in (*ENDED, "unknown") if s in counts]
    unstarted = (total or 0) - len(jobs)
    if unstarted > 0:
        counts["not started"] = unstarted
        order.append("not started")
        problems.append(f"{unstarted} job{'s' if unstarted > 1 else ''} not started")
    head = f"sweep {sweep_dir}: {max(len(jobs), total or 0)} jobs: " + ", ".join(f"{counts[s]} {s}" for s in order)
    lines = [head, *(f"  {p}" for p in problems)]
    if problems:
        lines.append(f"  continue it: the same command with hydra.sweep.dir={sweep_dir} (completed jobs are skipped)")
    return lines, not problems


try:  # Hydra's callback API (hydra-core >= 1.1)
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object


class SweepCallbacks(_HydraCallback):
    """conf/train.yaml hydra.callbacks: check the launcher before a multirun, summarise it after."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_launcher(config.hydra.launcher)
        except LabError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.is_dir():
            return
        lines, all_completed = summarize(sweep_dir, sweep_size(sweep_dir))
        print("\n".join(lines), file=sys.stderr if not all_completed else sys.stdout)
        # Optuna searches budget their failures themselves (hydra.sweeper.max_failure_rate)
        if not all_completed and "lab_optuna_sweeper" not in str(config.hydra.sweeper.get("_target_", "")):
            sys.exit(1)
