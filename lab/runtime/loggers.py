"""Experiment loggers. W&B's mode is decided here, never by a prompt."""
from __future__ import annotations

import logging
import netrc
import os
from pathlib import Path

from lab.errors import LabError

log = logging.getLogger("lab")
MODES = ("online", "offline", "disabled")


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_wandb_mode(mode: str | None) -> str:
    """Explicit mode > WANDB_MODE > online if credentials exist > offline. Never asks."""
    mode = mode or os.environ.get("WANDB_MODE")
    if mode == "dryrun":
        mode = "offline"
    if mode is None:
        mode = "online" if has_wandb_credentials() else "offline"
        if mode == "offline":
            log.info("W&B: no API key found, logging offline (upload later with `wandb sync <run dir>/wandb/offline-run-*`)")
    if mode not in MODES:
        raise LabError(f"logger.wandb.mode={mode!r} is not valid; choose one of {', '.join(MODES)} (or leave it null)")
    return mode


def sweep_settings(name: str | None) -> dict:
    """W&B grouping for a job of a Hydra multirun (grid or Optuna): group = <name>/<sweep directory name>
    (its start time), job_type = sweep, tags = the job's overrides, name = <name>-<job number>.
    Empty outside a multirun (W&B sweeps via `wandb agent` group their runs themselves)."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415
    from hydra.types import RunMode  # noqa: PLC0415

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return {}
    hc = HydraConfig.get()
    return {
        "group": f"{name}/{Path(hc.sweep.dir).name}",
        "job_type": "sweep",
        "tags": [o[:64] for o in hc.overrides.task],  # W&B caps tags at 64 characters
        "name": f"{name}-{hc.job.num}",
    }


def wandb_logger(mode: str | None = None, name: str | None = None, group: str | None = None,
                 job_type: str = "train", tags=(), **kwargs):
    """A Lightning WandbLogger in the resolved mode, or None when disabled (no run is created at all).
    Inside a Hydra multirun: group (unless set) and name come from the sweep, its tags are added (sweep_settings)."""
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    os.environ["WANDB_MODE"] = mode  # DDP ranks and sweep jobs inherit the decision
    os.environ.setdefault("WANDB_SILENT", "true")
    from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415 - after WANDB_* are set

    sweep = sweep_settings(name)
    if sweep:
        group = group or sweep["group"]
        job_type = sweep["job_type"] if job_type == "train" else job_type
        tags = [*tags, *sweep["tags"]]
        name = sweep["name"]
    return WandbLogger(mode=mode, name=name, group=group, job_type=job_type, tags=list(tags), **kwargs)


def finish_loggers(loggers: list, exit_code: int = 0) -> None:
    """End this job's W&B run (rank 0 owns it). Lightning leaves it open, and the next job of a sweep in
    the same process would otherwise log into it instead of starting its own run. exit_code != 0: the run
    was interrupted or failed, and W&B records it so (not as a success)."""
    from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    for logger in loggers:
        if isinstance(logger, WandbLogger) and rank_zero_only.rank == 0 and logger._experiment is not None:
            logger.experiment.finish(exit_code=exit_code)
