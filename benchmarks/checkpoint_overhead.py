"""Cost of bounded-loss checkpointing (lab.runtime.callbacks.RunCheckpoint) on a small CPU run.

    python benchmarks/checkpoint_overhead.py [--steps 300] [--rounds 3] [--every 50]

gpt_nano_char shape (4 layers x 128, context 64, batch 12), the same Lightning training three ways, side by
side in one process, in interleaved rounds (best round of each reported, tokens/s after a 20-step warm-up):
  none      no checkpoint callback
  default   RunCheckpoint as configured by default (every_minutes=10): the per-step decision, no write
            within a run this short
  every N   RunCheckpoint writing last.ckpt (atomic: temp file, fsync, rename) every N optimizer steps
Also the time of one atomic last.ckpt write, and what the default costs once its write every 10 minutes is
amortised (write time / 600 s).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_overhead import BATCH, SHAPE, WARMUP, StepTimer, loader, optimizer_factory, schedule

from lab.models.gpt import GPT
from lab.runtime.callbacks import RunCheckpoint
from lab.tasks.language_model import LanguageModelTask


class WriteTimer(RunCheckpoint):
    """Times each last.ckpt write, and the per-step decision (on_train_batch_end minus the writes in it):
    measured inside one run, these hold under a loaded machine, where whole-run tokens/s do not."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.write_s: list[float] = []
        self.decide_s: list[float] = []

    def _save_last_checkpoint(self, trainer, monitor_candidates):
        t0 = time.perf_counter()
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.write_s.append(time.perf_counter() - t0)

    def on_train_batch_end(self, trainer, *args):
        t0, writes = time.perf_counter(), len(self.write_s)
        super().on_train_batch_end(trainer, *args)
        self.decide_s.append(time.perf_counter() - t0 - sum(self.write_s[writes:]))


def run(steps: int, every: int | None, checkpointing: bool) -> tuple[float, list[float], list[float]]:
    torch.manual_seed(0)
    task = LanguageModelTask(GPT(**SHAPE), optimizer_factory(), schedule(steps))
    timer = StepTimer()  # first: its on_train_end stops the clock before the end-of-training write
    callbacks: list[L.Callback] = [timer]
    ckpt = None
    if checkpointing:
        ckpt = WriteTimer(dirpath=tempfile.mkdtemp(), filename="best-step{step}", monitor="val/loss",
                          every_n_steps=every, every_minutes=None if every else 10)
        callbacks.append(ckpt)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=checkpointing,
                        limit_val_batches=0, gradient_clip_val=1.0, enable_model_summary=False,
                        enable_progress_bar=False, callbacks=callbacks)
    trainer.fit(task, train_dataloaders=loader(steps))
    writes = ckpt.write_s[:-1] if ckpt else []  # the last one is the end-of-training write, outside the clock
    return (steps - WARMUP) * BATCH * 64 / timer.elapsed, writes, ckpt.decide_s if ckpt else []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    variants = {"none": (None, False), "default": (None, True), f"every {args.every}": (args.every, True)}
    speed: dict[str, list[float]] = {k: [] for k in variants}
    writes: list[float] = []
    decide: list[float] = []
    for _ in range(args.rounds):
        for name, (every, on) in variants.items():
            tokens_per_s, w, d = run(args.steps, every, on)
            speed[name].append(tokens_per_s)
            writes += w
            decide += d
    base = max(speed["none"])
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} threads, gpt_nano_char shape, batch {BATCH}x64, "
          f"{args.steps} steps, best of {args.rounds} interleaved rounds")
    print(f"{'checkpointing':14} {'tokens/s':>10} {'overhead':>9}  rounds")
    for name, values in speed.items():
        print(f"{name:14} {max(values):10.0f} {100 * (base / max(values) - 1):+8.1f}%  {[round(v) for v in values]}")
    step_s = BATCH * 64 / base
    w = sorted(writes)[len(writes) // 2]
    d = sorted(decide)[len(decide) // 2]
    print(f"one step (no checkpointing): {1000 * step_s:.0f} ms; per-step decision: median {1e6 * d:.0f} us "
          f"({100 * d / step_s:.3f}% of a step)")
    print(f"one atomic last.ckpt write: median {1000 * w:.0f} ms over {len(writes)} writes; amortised: every "
          f"{args.every} steps {100 * w / (args.every * step_s):.2f}%, every 10 min (default) {100 * w / 600:.3f}% of run time")


if __name__ == "__main__":
    main()
