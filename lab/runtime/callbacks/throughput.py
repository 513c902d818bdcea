"""Training throughput: tokens/s per device and global, and MFU on GPUs with known peak FLOPs."""
from __future__ import annotations

import logging
import time

import lightning as L
import torch

from lab.nn.params import flops_per_token

log = logging.getLogger("lab")

# Dense bf16 peak FLOP/s (no sparsity), by substring of torch.cuda.get_device_name().
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12, "V100": 125e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


class Throughput(L.Callback):
    """Logs perf/tokens_per_s (this device), perf/tokens_per_s_global (all devices) and perf/mfu every
    `every_n_batches` training batches, measured between batches so data loading counts, and validation
    does not. FLOPs per token = 6 * active params in matrix products (lookup tables left out: an untied token
    embedding, learned positions; lab.nn.params) + 12 * layers * n_heads * head_dim * seq_len (PaLM appendix B; the
    attention width, d_model unless model.head_dim says otherwise).
    With them perf/tokens_seen (all devices, estimated as this device's count x world size), perf/flops_seen
    (those tokens times the FLOPs per token at each batch's sequence length) and perf/train_s (seconds of
    training so far, without validation): carried across a resume in the checkpoint, so a report can draw
    curves against tokens, compute or training time (lab.report); `costs` gives the run's totals."""

    def __init__(self, every_n_batches: int = 10):
        self.every = every_n_batches
        self._t0: float | None = None
        self._tokens = 0
        self._first_step_logged = False
        self.tokens_seen, self.train_s, self.flops_seen = 0, 0.0, 0.0
        self._counts: dict[str, int] | None = None
        self._trained: dict[str, float] = {}

    def state_dict(self) -> dict:
        return {"tokens_seen": self.tokens_seen, "train_s": self.train_s, "flops_seen": self.flops_seen}

    def load_state_dict(self, state_dict: dict) -> None:
        self.tokens_seen, self.train_s = int(state_dict.get("tokens_seen", 0)), float(state_dict.get("train_s", 0.0))
        self.flops_seen = float(state_dict.get("flops_seen", 0.0))

    def costs(self) -> dict[str, float]:
        """What the run's training consumed (status.json's final metrics): tokens and FLOPs, all devices, as
        training ended (the test that follows loads the best checkpoint, and this callback's counts with it)."""
        return self._trained

    def on_train_end(self, trainer, pl_module):
        self._trained = {"cost/tokens": float(self.tokens_seen), "cost/train_flops": self.flops_seen}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if not self._first_step_logged and trainer.is_global_zero:
            from lab.runtime.cli.errors import LAUNCH_TIME  # noqa: PLC0415

            log.info("first training step %.1fs after launch", time.time() - LAUNCH_TIME)
            self._first_step_logged = True
        if self._t0 is None:
            self._t0, self._tokens, self._batches = time.perf_counter(), 0, 0
            self._seq_len = pl_module.sequence_length(batch)
        tokens = pl_module.count_tokens(batch)
        self._tokens += tokens
        self.tokens_seen += tokens * trainer.world_size
        if self._counts is None:  # the model's shape does not change while it trains
            self._counts = pl_module.parameter_counts()
        seq_len = pl_module.sequence_length(batch)
        self.flops_seen += tokens * trainer.world_size * flops_per_token(pl_module.model.cfg, self._counts, seq_len)
        self._batches += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._t0 is None or self._batches < self.every:
            return
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - self._t0
        per_device = self._tokens / elapsed
        self.train_s += elapsed
        metrics = {"perf/tokens_per_s": per_device, "perf/tokens_per_s_global": per_device * trainer.world_size,
                   "perf/tokens_seen": float(self.tokens_seen), "perf/flops_seen": self.flops_seen, "perf/train_s": self.train_s}
        peak = peak_flops(pl_module.device)
        if peak:
            metrics["perf/mfu"] = per_device * flops_per_token(pl_module.model.cfg, self._counts, self._seq_len) / peak
        pl_module.log_dict(metrics, on_step=True, on_epoch=False)
        self._t0 = None

    def on_validation_start(self, trainer, pl_module):
        if self._t0 is not None:  # the training time of the window validation cuts short still counts
            self.train_s += time.perf_counter() - self._t0
        self._t0 = None  # restart the window after validation
