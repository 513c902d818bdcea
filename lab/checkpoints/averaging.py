"""Checkpoint averaging (Vaswani et al. 2017, fairseq's average_checkpoints.py): the element-wise mean of the
weights of the last N checkpoints of a run, often a better model than any one of them."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from lab.checkpoints.reading import read_checkpoint
from lab.errors import LabError

log = logging.getLogger("lab")


def average_checkpoints(paths: list[Path]) -> dict:
    """-> a checkpoint whose state_dict is the mean of the given ones' (float tensors averaged in float64 and
    cast back; integer buffers taken from the last). Metadata and the rest come from the last checkpoint; no
    optimizer state (an average is for evaluation and inference, not for resuming)."""
    if len(paths) < 2:
        raise LabError(f"averaging needs at least 2 checkpoints, got {len(paths)}")
    checkpoints = [read_checkpoint(p) for p in paths]
    keys = list(checkpoints[-1]["state_dict"])
    for p, c in zip(paths, checkpoints):
        if list(c["state_dict"]) != keys or any(c["state_dict"][k].shape != checkpoints[-1]["state_dict"][k].shape
                                                for k in keys):
            raise LabError(f"{p} has other tensors than {paths[-1]}: average checkpoints of one run only")
    averaged = {}
    for k in keys:
        values = [c["state_dict"][k] for c in checkpoints]
        if values[-1].is_floating_point():
            averaged[k] = torch.stack([v.double() for v in values]).mean(0).to(values[-1].dtype)
        else:
            averaged[k] = values[-1]
    out = {k: v for k, v in checkpoints[-1].items() if k not in ("optimizer_states", "lr_schedulers", "loops", "callbacks")}
    out["state_dict"] = averaged
    out.setdefault("lab", {})
    out["lab"] = {**out["lab"], "averaged_from": [str(p) for p in paths]}
    return out


def last_checkpoints(run_dir: Path, n: int) -> list[Path]:
    """The n newest step checkpoints of a run directory (checkpoints/*.ckpt but last.ckpt, by step)."""
    import re  # noqa: PLC0415

    found = []
    for p in (run_dir / "checkpoints").glob("*.ckpt"):
        m = re.search(r"step[=_-]?(\d+)", p.stem)
        if m and p.name != "last.ckpt":
            found.append((int(m.group(1)), p))
    if len(found) < n:
        raise LabError(f"{run_dir}/checkpoints has {len(found)} step checkpoints, fewer than the {n} to average; "
                       "keep one per validation (callbacks.checkpoint.save_top_k=-1) or pass files")
    return [p for _, p in sorted(found)[-n:]]
