"""Reading lab checkpoints: clear errors for bad files, and models rebuilt for inference."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lab.errors import LabError


def is_sharded_checkpoint(path: Path) -> bool:
    """A directory of per-rank shards written by FSDP2 (trainer=fsdp): torch.distributed.checkpoint's
    .metadata plus Lightning's meta.pt (everything that is not weights or optimizer state)."""
    return path.is_dir() and (path / ".metadata").is_file() and (path / "meta.pt").is_file()


def consolidate(path: Path) -> dict[str, Any]:
    """A sharded checkpoint directory as one ordinary checkpoint dict (weights and optimizer states
    gathered in CPU memory; parameter names are the unsharded model's)."""
    import re  # noqa: PLC0415

    from lightning.fabric.utilities.load import _load_distributed_checkpoint  # noqa: PLC0415

    ckpt = _load_distributed_checkpoint(path)
    optimizer_keys = sorted((k for k in ckpt if re.fullmatch(r"optimizer_\d+", k)), key=lambda k: int(k[10:]))
    ckpt["optimizer_states"] = [ckpt.pop(k) for k in optimizer_keys]
    return ckpt


def read_checkpoint(path: str | Path, metadata_only: bool = False) -> dict[str, Any]:
    """Load a checkpoint (a file, or an FSDP sharded directory) on CPU, or raise one message that says what
    is wrong with it. metadata_only: for a sharded directory, read only meta.pt (cheap validation)."""
    p = Path(str(path)).expanduser()
    sharded = is_sharded_checkpoint(p)
    if not p.is_file() and not sharded:
        what = "is a directory but not an FSDP sharded checkpoint (no .metadata + meta.pt)" if p.is_dir() else "does not exist"
        raise LabError(f"checkpoint {p} {what}; pass ckpt_path=<run dir>/checkpoints/last.ckpt (or a best-*.ckpt)")
    try:
        if sharded and metadata_only:
            return {"state_dict": {}, **torch.load(p / "meta.pt", map_location="cpu", weights_only=False)}
        ckpt = consolidate(p) if sharded else torch.load(p, map_location="cpu", weights_only=False)
    except Exception as e:
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


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file or sharded directory as given; a run directory (or its checkpoints/) -> its best
    checkpoint (best-*.ckpt, the newest if several), else last.ckpt; which one is said on stderr."""
    import sys  # noqa: PLC0415

    p = Path(str(path)).expanduser()
    if not p.is_dir() or is_sharded_checkpoint(p):
        return p
    folder = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    best = sorted(folder.glob("best-*.ckpt"), key=lambda c: c.stat().st_mtime)
    if best:
        choice, why = best[-1], "the run's best checkpoint" + (f", the newest of {len(best)}" if len(best) > 1 else "")
    elif (folder / "last.ckpt").exists():
        choice, why = folder / "last.ckpt", "the run's last checkpoint; it has no best-*.ckpt"
    else:
        raise LabError(f"ckpt_path={p} is a directory without checkpoints (no checkpoints/best-*.ckpt or last.ckpt); "
                       "give a run directory or a .ckpt file")
    print(f"using {choice} ({why})", file=sys.stderr)
    return choice
