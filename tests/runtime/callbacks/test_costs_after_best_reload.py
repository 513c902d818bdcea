"""status.json's cost/tokens and cost/train_flops are what training consumed up to its last step, even when the
best checkpoint, which the test stage reloads (callback states included), comes from an earlier step."""
from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import torch
from torch.utils.data import DataLoader

from lab.runtime.callbacks.throughput import Throughput

BATCH, CONTEXT, STEPS, BEST = 2, 8, 8, 4
MATMUL, SHAPE = 10, SimpleNamespace(n_layers=1, n_heads=1, head_dim=4)
FLOPS_PER_TOKEN = 6 * MATMUL + 12 * 1 * 1 * 4 * CONTEXT  # lab.nn.params.flops_per_token by hand


class Tiny(L.LightningModule):
    """The task surface Throughput reads, on a linear layer; its validation loss is lowest at step BEST."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(CONTEXT, 1)
        self.model = SimpleNamespace(cfg=SHAPE)

    def count_tokens(self, batch) -> int:
        return batch.numel()

    def sequence_length(self, batch) -> int:
        return batch.shape[1]

    def parameter_counts(self) -> dict[str, int]:
        return {"matmul": MATMUL}

    def training_step(self, batch, batch_idx):
        return self.lin(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", float(abs(self.global_step - BEST)))

    def test_step(self, batch, batch_idx):
        self.log("test/loss", self.lin(batch).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def _loader(self):
        return DataLoader(torch.ones(BATCH * STEPS, CONTEXT), batch_size=BATCH)

    train_dataloader = val_dataloader = test_dataloader = _loader


def test_costs_are_the_last_steps_after_the_best_checkpoint_is_reloaded(tmp_path):
    """Best checkpoint at step 4 of 8; after trainer.test(ckpt_path="best") the callback's counters are step 4's,
    its costs() still step 8's: 8 batches x 16 tokens, x FLOPs per token. Catches costs read from the live counters
    (cost/tokens = 64 instead of 128)."""
    throughput = Throughput(every_n_batches=1)
    best = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", save_top_k=1)
    trainer = L.Trainer(max_steps=STEPS, val_check_interval=2, limit_val_batches=1, limit_test_batches=1,
                        callbacks=[throughput, best], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
    task = Tiny()
    trainer.fit(task)
    assert f"step={BEST}" in best.best_model_path  # the premise: the best comes before the last step
    trainer.test(task, ckpt_path="best", weights_only=True)
    tokens = STEPS * BATCH * CONTEXT
    assert throughput.tokens_seen == BEST * BATCH * CONTEXT  # the reload took the counters back to step 4
    assert throughput.costs() == {"cost/tokens": tokens, "cost/train_flops": tokens * FLOPS_PER_TOKEN}
