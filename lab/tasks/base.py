"""What every task shares: optimizer/scheduler wiring, aux losses, checkpoint metadata, token counting."""
from __future__ import annotations

import logging
from typing import Any, Callable

import lightning as L
import torch
from torch import nn

from lab.nn.params import count_parameters

log = logging.getLogger("lab")


class Task(L.LightningModule):
    """A LightningModule around one model.

    optimizer: partial optimizer (Hydra `_partial_: true`), called with two parameter groups: weights
    with >= 2 dims get weight decay, biases/norm gains/1-D params do not.
    scheduler: partial schedule called with the optimizer, stepped every optimizer step.
    """

    def __init__(self, model: nn.Module, optimizer: Callable, scheduler: Callable | None = None):
        super().__init__()
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.lab_metadata: dict[str, Any] = {}  # resolved config + tokenizer, set by the entry point

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2]},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        optimizer = self.optimizer_factory(groups)
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def aux_loss(self, stage: str) -> torch.Tensor | float:
        """Auxiliary losses the model's layers produced during the last forward (MoE routing losses),
        already weighted; logged per layer kind under `<stage>/aux/...`. 0 for dense models."""
        total: torch.Tensor | float = 0.0
        for module in self.model.modules():
            for value in (getattr(module, "aux_losses", None) or {}).values():
                total = total + value
        return total

    def count_tokens(self, batch) -> int:
        """Tokens processed by a training batch (the throughput callback divides by time)."""
        return int(batch[0].numel())

    def sequence_length(self, batch) -> int:
        """Positions per sequence of a training batch (the attention term of the FLOPs estimate)."""
        return int(batch[0].shape[-1])

    def parameter_counts(self) -> dict[str, int]:
        return count_parameters(self.model)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lab"] = self.lab_metadata

    def log_examples(self, key: str, columns: list[str], rows: list[list]) -> None:
        """Examples (samples, translations, mistakes) as a W&B table and as text in the run's log."""
        if self.trainer.global_rank != 0:
            return
        for row in rows:
            log.info("%s @ step %d | %s", key, self.global_step, " | ".join(f"{c}: {v}" for c, v in zip(columns, row)))
        for logger in self.loggers:
            if hasattr(logger, "log_text"):
                logger.log_text(key=key, columns=["step", *columns], data=[[self.global_step, *r] for r in rows])
