"""Masked language modelling (BERT pretraining objective)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from lab.nn import Aux
from lab.tasks.base import Task

IGNORE = -100  # targets of positions the collator did not choose


class MLMTask(Task):
    """Cross-entropy on the chosen (masked) positions only; masked-token accuracy. The batch comes masked
    from the data's collator: (inputs [B, T], targets [B, T] with IGNORE where nothing is predicted)."""

    def __init__(self, model, optimizer, scheduler=None, finetune: dict | None = None):
        super().__init__(model, optimizer, scheduler, finetune)
        self.eval_loss, self.eval_acc = MeanMetric(), MeanMetric()

    def _step(self, batch) -> tuple[torch.Tensor, torch.Tensor, int, Aux]:
        inputs, targets = batch
        chosen = targets != IGNORE  # [B, T]
        logits, aux = self.model(inputs, select=chosen, return_aux=True)  # [N, V]: only the chosen positions
        y = targets[chosen]  # [N]
        loss = F.cross_entropy(logits.float(), y)
        return loss, (logits.argmax(-1) == y).float().mean(), int(y.numel()), aux

    def training_step(self, batch, batch_idx):
        loss, acc, _, aux = self._step(batch)
        aux_total = self.aux_loss(aux)
        self.log_train({"train/loss": loss, "train/acc": acc}, prog_bar=True)
        return loss + aux_total

    def _eval_step(self, batch, stage: str) -> None:
        loss, acc, n, aux = self._step(batch)
        self.eval_loss.update(loss, weight=n)
        self.eval_acc.update(acc, weight=n)
        self.log_routing(stage, aux)  # averaged over the batches (eval-mode capacity)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def _log_eval(self, stage: str) -> None:
        loss, acc = self.eval_loss.compute(), self.eval_acc.compute()
        self.eval_loss.reset()
        self.eval_acc.reset()
        self.log_dict({f"{stage}/loss": loss, f"{stage}/ppl": torch.exp(loss), f"{stage}/acc": acc}, prog_bar=stage == "val")

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")
