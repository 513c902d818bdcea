"""Training throughput: tokens/s per device and global, and MFU on GPUs with known peak FLOPs."""
from __future__ import annotations

import logging
import time

import lightning as L
import torch

log = logging.getLogger("lab")

# Dense bf16 peak FLOP/s (no sparsity), by substring of torch.cuda.get_device_name().
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12, "V100": 125e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def flops_per_token(cfg, counts: dict[str, int], seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) of a model with lab.nn config `cfg` and parameter counts
    `counts` (lab.nn.params.count_parameters) at `seq_len` positions: 6 per parameter in a matrix product plus
    the attention scores and their weighted sum (PaLM appendix B)."""
    return 6 * counts["matmul"] + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len


class Throughput(L.Callback):
    """Logs perf/tokens_per_s (this device), perf/tokens_per_s_global (all devices) and perf/mfu every
    `every_n_batches` training batches, measured between batches so data loading counts, and validation
    does not. FLOPs per token = 6 * active params in matrix products (lookup tables left out: an untied token
    embedding, learned positions; lab.nn.params) + 12 * layers * n_heads * head_dim * seq_len (PaLM appendix B; the
    attention width, d_model unless model.head_dim says otherwise).
    With them perf/tokens_seen (all devices, estimated as this device's count x world size) and
    perf/train_s (seconds of training so far, without validation): both carried across a resume in the
    checkpoint, so a report can draw curves against tokens or training time (lab.report)."""

    def __init__(self, every_n_batches: int = 10):
        self.every = every_n_batches
        self._t0: float | None = None
        self._tokens = 0
        self._first_step_logged = False
        self.tokens_seen, self.train_s = 0, 0.0

    def state_dict(self) -> dict:
        return {"tokens_seen": self.tokens_seen, "train_s": self.train_s}

    def load_state_dict(self, state_dict: dict) -> None:
        self.tokens_seen, self.train_s = int(state_dict.get("tokens_seen", 0)), float(state_dict.get("train_s", 0.0))

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
                   "perf/tokens_seen": float(self.tokens_seen), "perf/train_s": self.train_s}
        peak = peak_flops(pl_module.device)
        if peak:
            metrics["perf/mfu"] = per_device * flops_per_token(pl_module.model.cfg, pl_module.parameter_counts(), self._seq_len) / peak
        pl_module.log_dict(metrics, on_step=True, on_epoch=False)
        self._t0 = None

    def on_validation_start(self, trainer, pl_module):
        if self._t0 is not None:  # the training time of the window validation cuts short still counts
            self.train_s += time.perf_counter() - self._t0
        self._t0 = None  # restart the window after validation
