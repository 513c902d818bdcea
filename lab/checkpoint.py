"""Reading lab checkpoints: clear errors for bad files, and models rebuilt for inference."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lab.errors import LabError


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint on CPU, or raise one message that says what is wrong with the file."""
    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise LabError(f"checkpoint {p} does not exist; pass ckpt_path=<run dir>/checkpoints/last.ckpt (or a best-*.ckpt)")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - torch raises many types for a damaged file
        raise LabError(f"checkpoint {p} cannot be read ({type(e).__name__}: {e}); it is damaged or not a checkpoint. "
                       "Use another checkpoint from the run's checkpoints/ directory.") from e
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise LabError(f"checkpoint {p} has no state_dict: it is not a Lightning checkpoint written by lab")
    return ckpt


def lab_metadata(ckpt: dict[str, Any], path: str | Path) -> dict[str, Any]:
    meta = ckpt.get("lab")
    if not meta or "config" not in meta:
        raise LabError(f"checkpoint {path} was not written by lab.train (no config inside); it cannot be rebuilt")
    return meta


def load_model(path: str | Path, device: str | torch.device = "cpu"):
    """-> (model in eval mode, tokenizer, metadata). Rebuilt from the config saved inside the checkpoint."""
    from omegaconf import OmegaConf  # noqa: PLC0415

    from lab.data.tokenizers import tokenizer_from_json  # noqa: PLC0415
    from lab.models import build_model  # noqa: PLC0415

    ckpt = read_checkpoint(path)
    meta = lab_metadata(ckpt, path)
    cfg = OmegaConf.create(meta["config"])
    model = build_model(cfg.model, meta["vocab"])
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model.load_state_dict(state)
    return model.to(device).eval(), tokenizer_from_json(meta["tokenizer"]), meta

