"""Reading lab checkpoints: clear errors for bad files, and models rebuilt for inference.

A checkpoint may come from someone else, so reading one never runs code from it: every pickle is read with
torch.load(weights_only=True) (tensors and plain data only) or, for the FSDP index `.metadata` that torch
pickles itself, an unpickler that admits only torch's checkpoint-metadata classes; and a model, task or
datamodule is only rebuilt from a saved config whose every `_target_` is one of lab's own classes."""
from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any, ClassVar

import torch

from lab.errors import LabError, UnsafeFileError

# What lab rebuilds from a checkpoint's saved config, and the packages its `_target_`s may come from.
REBUILT_SECTIONS = ("model", "task", "data")
TRUSTED_PACKAGES = ("lab.models", "lab.tasks", "lab.nn", "lab.data")


def load_weights(path: Path) -> Any:
    """torch.load on CPU with weights_only=True; a file that needs more is refused without running anything."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        refusal = UnsafeFileError.from_load_error(path, e)
        if refusal is None:
            raise
        raise refusal from None


class _DCPMetadataUnpickler(pickle.Unpickler):
    """torch.distributed.checkpoint pickles its `.metadata` index with plain pickle (FileSystemReader uses
    pickle.load): admit only the dataclasses, dtypes and paths such an index holds."""

    ALLOWED: ClassVar = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch.serialization", "_get_layout"),
               ("torch", "Size"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
               ("pathlib", "PureWindowsPath")}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.distributed.checkpoint.metadata" or (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype | torch.memory_format):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"Weights only load failed: Unsupported global: GLOBAL {module}.{name}")


def check_dcp_index(path: Path) -> None:
    """Refuse a sharded directory whose `.metadata` would run code when torch (or Lightning's resume) reads it."""
    try:
        with open(path / ".metadata", "rb") as f:
            _DCPMetadataUnpickler(f).load()
    except pickle.UnpicklingError as e:
        refusal = UnsafeFileError.from_load_error(path / ".metadata", e)
        if refusal is None:
            raise
        raise refusal from None


def is_sharded_checkpoint(path: Path) -> bool:
    """A directory of per-rank shards written by FSDP2 (trainer=fsdp): torch.distributed.checkpoint's
    .metadata plus Lightning's meta.pt (everything that is not weights or optimizer state)."""
    return path.is_dir() and (path / ".metadata").is_file() and (path / "meta.pt").is_file()


def consolidate(path: Path) -> dict[str, Any]:
    """A sharded checkpoint directory as one ordinary checkpoint dict (weights and optimizer states
    gathered in CPU memory; parameter names are the unsharded model's). Lightning's
    _load_distributed_checkpoint, with the index and meta.pt read safely."""
    import re  # noqa: PLC0415

    from torch.distributed.checkpoint import FileSystemReader  # noqa: PLC0415
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner  # noqa: PLC0415
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict  # noqa: PLC0415

    check_dcp_index(path)
    extra = load_weights(path / "meta.pt")
    ckpt: dict[str, Any] = {}  # non-tensor items inside the shards are read with weights_only=True by torch
    _load_state_dict(ckpt, storage_reader=FileSystemReader(path), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    ckpt.update(extra)
    optimizer_keys = sorted((k for k in ckpt if re.fullmatch(r"optimizer_\d+", k)), key=lambda k: int(k[10:]))
    ckpt["optimizer_states"] = [ckpt.pop(k) for k in optimizer_keys]
    return ckpt


def read_checkpoint(path: str | Path, metadata_only: bool = False) -> dict[str, Any]:
    """Load a checkpoint (a file, or an FSDP sharded directory) on CPU, or raise one message that says what
    is wrong with it. metadata_only: for a sharded directory, read only the index and meta.pt (cheap
    validation; resuming through Lightning then reads files already checked)."""
    p = Path(str(path)).expanduser()
    sharded = is_sharded_checkpoint(p)
    if not p.is_file() and not sharded:
        what = "is a directory but not an FSDP sharded checkpoint (no .metadata + meta.pt)" if p.is_dir() else "does not exist"
        raise LabError(f"checkpoint {p} {what}; pass ckpt_path=<run dir>/checkpoints/last.ckpt (or a best-*.ckpt)")
    try:
        if sharded and metadata_only:
            check_dcp_index(p)
            return {"state_dict": {}, **load_weights(p / "meta.pt")}
        ckpt = consolidate(p) if sharded else load_weights(p)
    except UnsafeFileError:
        raise
    except Exception as e:  # torch raises many types for a damaged file
        lines = [line for line in str(e).split("WeightsUnpickler error:")[-1].splitlines() if line.strip()]
        reason = lines[0].strip() if lines else ""  # torch's advice around the reason is not the reason
        raise LabError(f"checkpoint {p} cannot be read ({type(e).__name__}: {reason}); it is damaged or not a "
                       "checkpoint. Use another checkpoint from the run's checkpoints/ directory.") from e
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise LabError(f"checkpoint {p} has no state_dict: it is not a Lightning checkpoint written by lab")
    if "lab" in ckpt:  # every reader (resume too) refuses a saved config naming anything but lab's classes
        lab_metadata(ckpt, p)
    return ckpt


def _is_lab_target(target: Any) -> bool:
    """A `_target_` lab may instantiate from someone else's file: a top-level class or function defined in
    one of lab's model/task/nn/data packages (named by its own module, so `lab.data.lm.os.remove` is not),
    or a torch.optim optimizer class (the tasks' `optimizer` partial)."""
    if not isinstance(target, str):
        return False
    module, _, name = target.rpartition(".")
    if module == "torch.optim":
        obj = getattr(torch.optim, name, None)
        return isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)
    if not any(module == p or module.startswith(p + ".") for p in TRUSTED_PACKAGES):
        return False
    try:
        obj = getattr(importlib.import_module(module), name, None)  # lab's own module: importing it runs lab's code
    except ImportError:
        return False
    return callable(obj) and getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == name


def _is_recorded_target(target: Any) -> bool:
    """A `_target_` in a section lab never builds from a file (trainer, callbacks, logger): kept as a record of
    the run, but still only lab's or Lightning's names, so a checkpoint carries nothing foreign anywhere."""
    return isinstance(target, str) and target.startswith(("lab.", "lightning."))


def _refuse_foreign(node: Any, where: str, path, allowed) -> None:
    if isinstance(node, dict):
        if "_target_" in node and not allowed(node["_target_"]):
            raise LabError(f"checkpoint {path} asks to build {node['_target_']!r} at {where}._target_; lab only "
                           f"builds its own classes ({', '.join(TRUSTED_PACKAGES)}, torch.optim optimizers) from a "
                           "checkpoint's config, so nothing from this file was run. Use a checkpoint written by lab.train")
        for key, value in node.items():
            _refuse_foreign(value, f"{where}.{key}", path, allowed)
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            _refuse_foreign(value, f"{where}[{i}]", path, allowed)
    elif isinstance(node, str) and "${" in node:  # OmegaConf would resolve it (environment, lab.sqlite's mkdir)
        raise LabError(f"checkpoint {path} has an interpolation {node!r} at {where}; lab saves resolved configs, "
                       "so this file was not written by lab.train and is not used")


def metadata_for(resolved: dict[str, Any], datamodule) -> dict[str, Any]:
    """What every checkpoint of a run carries under `lab` (Task.lab_metadata) for load_model to rebuild the
    model without the run: the resolved config, the vocabulary, the tokenizer and what else inference needs
    from the data (e.g. label names), if the datamodule offers it."""
    return {
        "config": resolved,
        "vocab": datamodule.vocab,
        "tokenizer": datamodule.tokenizer.to_json(),
        "data": datamodule.checkpoint_metadata(),
    }


def lab_metadata(ckpt: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The `lab` entry of a checkpoint (config, vocab, tokenizer, data facts), checked before anything is
    instantiated from it: every `_target_` in the sections lab rebuilds (model, task, data) is one of lab's
    own classes, every other one is only a lab or Lightning name, and nothing is an interpolation."""
    meta = ckpt.get("lab")
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise LabError(f"checkpoint {path} was not written by lab.train (no config inside); it cannot be rebuilt")
    for key, section in meta["config"].items():
        rebuilt = key in REBUILT_SECTIONS
        _refuse_foreign(section, f"config.{key}", path, _is_lab_target if rebuilt else _is_recorded_target)
    return meta


def trained_length(meta: dict[str, Any]) -> int:
    """Tokens per sequence the model saw in training, specials included, from the config in the checkpoint:
    data.max_length (classifier, MLM), data.block_size (LM), data.max_tokens (translator); positions past it
    were never trained, so inference never uses them."""
    cfg = meta["config"]
    data, limit = cfg.get("data") or {}, int(cfg["model"]["max_seq_len"])
    for key in ("max_length", "block_size", "max_tokens"):
        if data.get(key) is not None:
            return min(int(data[key]), limit)
    return limit


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
