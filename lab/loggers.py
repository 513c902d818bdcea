"""Experiment loggers. W&B's mode is decided here, never by a prompt."""
from __future__ import annotations

import logging
import netrc
import os

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


def wandb_logger(mode: str | None = None, **kwargs):
    """A Lightning WandbLogger in the resolved mode, or None when disabled (no run is created at all)."""
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    os.environ["WANDB_MODE"] = mode  # DDP ranks and sweep jobs inherit the decision
    os.environ.setdefault("WANDB_SILENT", "true")
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(mode=mode, **kwargs)
