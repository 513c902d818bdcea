"""Resuming from a checkpoint (`ckpt_path=`): the checkpoint's saved config is compared with this run's before
any data is built or step trained. Another task or another model shape is one error naming the differing keys;
every other difference is listed in one warning line. An FSDP sharded checkpoint directory resumed by a run
without FSDP is consolidated into a temporary single file first."""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError

log = logging.getLogger("lab")

# Where a run writes: differs between any two runs, never worth a word.
IGNORED = ("ckpt_path", "paths.")
# Settings whose value on resume comes from the checkpoint's optimizer / schedule state, not from this config.
KEPT_FROM_CHECKPOINT = ("task.optimizer.", "task.scheduler.warmup_steps", "task.scheduler.min_lr")


@dataclass
class Resume:
    """What training needs to resume: the path Lightning loads, the vocabulary the checkpoint was trained with,
    and files to remove after the run (a consolidated copy)."""

    path: str
    vocab: dict[str, int]
    changes: dict[str, tuple[Any, Any]]
    temporary: list[Path] = field(default_factory=list)

    def cleanup(self) -> None:
        for p in self.temporary:
            p.unlink(missing_ok=True)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"model.moe.top_k": 2, ...}: every leaf of a nested dict; lists stay leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}." if isinstance(value, dict) and value else f"{prefix}{key}"))
    return out


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{key: (checkpoint's value, this run's value)} for every differing leaf, paths of the run directory aside
    (the saved run's directory is read as this run's, so dirpath-like settings compare equal)."""
    old_dir = str((saved.get("paths") or {}).get("output_dir", "\0"))
    new_dir = str((current.get("paths") or {}).get("output_dir", "\0"))
    old, new = flatten(saved), flatten(current)
    changes = {}
    for key in sorted(set(old) | set(new)):
        if key.startswith(IGNORED):
            continue
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, str):
            a = a.replace(old_dir, new_dir)
        if a != b:
            changes[key] = (a, b)
    return changes


def parameter_shapes(model_cfg: dict[str, Any], vocab: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """{parameter name: shape} of the model this config builds, on the meta device (no memory, no init)."""
    import torch  # noqa: PLC0415
    from omegaconf import OmegaConf  # noqa: PLC0415

    from lab.models import build_model  # noqa: PLC0415

    with torch.device("meta"):
        model = build_model(OmegaConf.create(model_cfg), vocab)
    return {name: tuple(p.shape) for name, p in model.state_dict().items()}


def _describe(changes: dict[str, tuple[Any, Any]], keys: list[str]) -> str:
    return ", ".join(f"{k} {changes[k][0]!r} -> {changes[k][1]!r}" for k in keys)


def check_resume(cfg, resolved: dict[str, Any]) -> Resume | None:
    """Before training: read ckpt_path (a bad file is one error), refuse another task or model shape, list the
    other changed settings in one warning, and consolidate an FSDP directory for a run without FSDP."""
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    from lab.checkpoints.reading import is_sharded_checkpoint, read_checkpoint  # noqa: PLC0415
    from lab.runtime.trainer.strategies import _strategy_kind  # noqa: PLC0415

    if not cfg.get("ckpt_path"):
        return None
    path = Path(str(cfg.ckpt_path)).expanduser()
    ckpt = read_checkpoint(path, metadata_only=True)
    meta = ckpt.get("lab") or {}
    if "config" not in meta:
        raise LabError(f"checkpoint {path} was not written by lab.train (no config inside); lab resumes only its own checkpoints")
    saved, vocab = meta["config"], meta.get("vocab", {})
    changes = config_changes(saved, resolved)
    identity = [k for k in changes if k.startswith(("task._target_", "model."))]
    if "task._target_" in changes or parameter_shapes(saved["model"], vocab) != parameter_shapes(resolved["model"], vocab):
        # the error line names the decisive difference; every difference goes to the log line above it
        task = changes.get("task._target_")
        shown = [] if task else identity[:2]
        what = (f"another task ({str(task[0]).rpartition('.')[2]}; this run: {str(task[1]).rpartition('.')[2]})" if task
                else f"another model shape: {_describe(changes, shown)}")
        more = len(identity) - len(shown) - bool(task)
        log.info("checkpoint %s differs from this run in: %s (checkpoint -> this run)", path, _describe(changes, identity))
        raise LabError(f"checkpoint {path} holds {what}{f', and {more} more settings differ (listed above)' if more else ''}"
                       "; resume with its settings, or start a new run without ckpt_path")
    if changes and rank_zero_only.rank == 0:  # once per job, not once per process
        notes = [f"{k} {a!r} -> {b!r}{' (kept from the checkpoint)' if k.startswith(KEPT_FROM_CHECKPOINT) else ''}"
                 for k, (a, b) in changes.items()]
        log.warning("resuming from %s with %d setting(s) changed: %s", path, len(changes), "; ".join(notes))
    resume = Resume(str(path), vocab, changes)
    if is_sharded_checkpoint(path) and _strategy_kind(cfg.trainer.get("strategy", "auto")) != "fsdp":
        resume.path = str(consolidated_copy(path))
        resume.temporary.append(Path(resume.path))
    return resume


def consolidated_copy(path: Path) -> Path:
    """An FSDP sharded directory gathered into one temporary .ckpt file (what `python -m lab.checkpoint
    consolidate` writes), for a run that does not shard: Lightning's other strategies read only files."""
    import torch  # noqa: PLC0415

    from lab.checkpoints.reading import read_checkpoint  # noqa: PLC0415

    ckpt = read_checkpoint(path)
    fd, tmp = tempfile.mkstemp(prefix="lab-consolidated-", suffix=".ckpt")
    os.close(fd)
    try:
        torch.save(ckpt, tmp)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise LabError(f"checkpoint {path} is an FSDP sharded directory and this run does not use FSDP; consolidating "
                       f"it into {tmp} failed ({e}); run `python -m lab.checkpoint consolidate {path} <out.ckpt>` "
                       "and resume with ckpt_path=<out.ckpt>") from e
    log.info("checkpoint %s is FSDP-sharded and this run does not shard: consolidated %d tensors into %s for the resume",
             path, len(ckpt["state_dict"]), tmp)
    return Path(tmp)


def check_vocabulary(resume: Resume | None, vocab: dict[str, int]) -> None:
    """After the data is set up: the vocabulary must be the checkpoint's (same embedding and output shapes)."""
    if resume is None or not resume.vocab:
        return
    differ = {k: (resume.vocab.get(k), vocab.get(k)) for k in sorted(set(resume.vocab) | set(vocab))
              if resume.vocab.get(k) != vocab.get(k)}
    if differ:
        data_keys = [k for k in resume.changes if k.startswith("data.")]
        raise LabError(f"checkpoint {resume.path} was trained with another vocabulary ("
                       + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in differ.items())
                       + f"; changed data settings: {_describe(resume.changes, data_keys) or 'none'}); resume with the "
                       "checkpoint's data settings, or start a new run without ckpt_path")
