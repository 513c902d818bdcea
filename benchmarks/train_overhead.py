"""Framework overhead: lab's training step (LanguageModelTask + Lightning Trainer with lab's default
callbacks) vs a plain PyTorch loop over the same model, optimizer, schedule and batches.

    python benchmarks/train_overhead.py [--steps 300] [--rounds 2]

gpt_nano_char shape (4 layers x 128, context 64, batch 12), CPU. Each round runs both, alternating, and
the best round of each is reported (tokens/s over the steps after a 20-step warm-up).
"""
from __future__ import annotations

import argparse
import functools
import tempfile
import time

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from lab.data.lm import RandomWindows
from lab.models.gpt import GPT
from lab.tasks.language_model import LanguageModelTask
from lab.tasks.optim import warmup_cosine

SHAPE = dict(vocab_size=96, d_model=128, n_layers=4, n_heads=4, max_seq_len=64)
BATCH, WARMUP = 12, 20
TOKENS = np.random.default_rng(0).integers(0, 96, 1_000_000).astype(np.uint16)


def loader(steps: int) -> DataLoader:
    return DataLoader(RandomWindows(TOKENS, 64, seed=0, length=steps * BATCH), batch_size=BATCH)


def optimizer_factory():
    return functools.partial(torch.optim.AdamW, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)


def schedule(steps: int):
    return functools.partial(warmup_cosine, warmup_steps=100, total_steps=steps, min_lr=1e-4)


def lab_callbacks() -> list[L.Callback]:
    """lab's default callbacks from conf/callbacks/default.yaml (checkpointing aside: it runs no step)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("callbacks/default")["callbacks"]
    return [instantiate(c) for name, c in cfg.items() if name != "checkpoint"]


class StepTimer(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == WARMUP:
            self.t0 = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        self.elapsed = time.perf_counter() - self.t0


def run_lab(steps: int) -> float:
    torch.manual_seed(0)
    task = LanguageModelTask(GPT(**SHAPE), optimizer_factory(), schedule(steps))
    timer = StepTimer()
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, logger=CSVLogger(tempfile.mkdtemp()), enable_checkpointing=False,
        limit_val_batches=0, gradient_clip_val=1.0, enable_model_summary=False, log_every_n_steps=10,
        callbacks=[timer, *lab_callbacks()],
    )
    trainer.fit(task, train_dataloaders=loader(steps))
    return (steps - WARMUP) * BATCH * 64 / timer.elapsed


def run_plain(steps: int) -> float:
    torch.manual_seed(0)
    model = GPT(**SHAPE)
    params = list(model.parameters())
    opt = optimizer_factory()([
        {"params": [p for p in params if p.dim() >= 2]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ])
    sched = schedule(steps)(opt)
    model.train()
    for i, (x, y) in enumerate(loader(steps)):
        if i == WARMUP:
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
    return (steps - WARMUP) * BATCH * 64 / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    lab, plain = [], []
    for _ in range(args.rounds):
        plain.append(run_plain(args.steps))
        lab.append(run_lab(args.steps))
    best_lab, best_plain = max(lab), max(plain)
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} threads, gpt_nano_char shape, batch {BATCH}x64, "
          f"{args.steps} steps, best of {args.rounds}")
    print(f"{'loop':12} {'tokens/s':>10} {'rounds':>24}")
    print(f"{'plain torch':12} {best_plain:10.0f} {[round(v) for v in plain]!s:>24}")
    print(f"{'lab':12} {best_lab:10.0f} {[round(v) for v in lab]!s:>24}")
    print(f"lab overhead: {100 * (best_plain / best_lab - 1):+.1f}% time per step")


if __name__ == "__main__":
    main()
