"""A test-only callback (instantiated by lab.train from `+callbacks.snapshot=...` overrides): what an
interruption leaves behind, without interrupting anything."""
from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback


class SnapshotLast(Callback):
    """After optimizer step `at_step`, copy checkpoints/last.ckpt to `to`: the file a run killed at that
    moment would leave, written by the last validation before it (mid-epoch, not at an epoch boundary)."""

    def __init__(self, at_step: int, to: str):
        self.at_step, self.to, self.done = at_step, Path(to), False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at_step and not self.done:
            self.done = True
            if trainer.is_global_zero:
                ckpt = torch.load(Path(trainer.checkpoint_callback.dirpath) / "last.ckpt", weights_only=True)
                # the copy names no test-only class: lab resumes only checkpoints whose config names lab's own
                ckpt["lab"]["config"]["callbacks"].pop("snapshot", None)
                torch.save(ckpt, self.to)

