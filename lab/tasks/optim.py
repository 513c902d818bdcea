"""Learning-rate schedules (configs use them with `_partial_: true`; the task passes the optimizer).

Resuming with another length (trainer.max_steps, hence total_steps) never makes the learning rate jump: the
schedule keeps its state in the checkpoint and, at the step it resumes from, the cosine decay restarts from
the learning rate reached and ends at min_lr at the new total_steps (WarmupCosine.load_state_dict says so in
one line). A schedule that had already reached min_lr stays there.
"""
from __future__ import annotations

import logging
import math
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

log = logging.getLogger("lab")


class WarmupCosine(LRScheduler):
    """Linear warmup from 0 to each group's lr over warmup_steps, then cosine decay to min_lr at total_steps;
    min_lr after. The decay is one segment, from factor `decay_from` at step `decay_start` (1.0 at warmup_steps
    for a fresh run) to min_lr at total_steps; a resume with another total_steps starts a new segment."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0):
        self.warmup_steps, self.total_steps, self.min_lr = int(warmup_steps), int(total_steps), float(min_lr)
        self.decay_start, self.decay_from = self.warmup_steps, 1.0
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """lr / the optimizer's lr at `step` (0-based optimizer steps)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        base = self.base_lrs[0]
        floor = self.min_lr / base if base > 0 else 0.0
        progress = min(1.0, (step - self.decay_start) / max(1, self.total_steps - self.decay_start))
        return floor + (self.decay_from - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    def get_lr(self) -> list[float]:
        return [base * self.factor(self.last_epoch) for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved schedule; if this run was configured with another total_steps, continue from the
        learning rate reached (see the module docstring) instead of jumping to the new plan's value."""
        planned = self.total_steps
        if "total_steps" not in state_dict:
            log.warning("lr schedule: the checkpoint's scheduler state has no total_steps (written before "
                        "lab.tasks.optim.WarmupCosine); following this run's plan of %d steps", planned)
            state_dict = {k: v for k, v in state_dict.items() if k in ("last_epoch", "base_lrs", "_step_count")}
        super().load_state_dict(state_dict)
        if planned == self.total_steps:
            return
        step, old_total = self.last_epoch, self.total_steps
        if step >= self.warmup_steps:
            self.decay_start, self.decay_from = step, self.factor(step)
        self.total_steps = planned
        lr = self.base_lrs[0] * self.factor(step)
        log.info("lr schedule: total_steps %d -> %d at step %d: the decay continues from lr %.3g to min_lr %.3g "
                 "at step %d (no jump; rule in lab/tasks/optim.py)", old_total, planned, step, lr, self.min_lr, planned)


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> WarmupCosine:
    """Linear warmup from 0 to each group's lr, then cosine decay to min_lr at total_steps; min_lr after.

    Args:
        warmup_steps: optimizer steps of linear warmup from 0 to the optimizer's lr.
        total_steps: the step at which the cosine decay reaches min_lr (trainer.max_steps); a resume with
            another value continues from the lr reached (module docstring).
        min_lr: the learning rate at and after total_steps.
    """
    return WarmupCosine(optimizer, warmup_steps, total_steps, min_lr)


def inverse_sqrt(optimizer: Optimizer, warmup_steps: int) -> LambdaLR:
    """Vaswani et al. 5.3: linear warmup, then lr * sqrt(warmup / step). It has no end, so a longer run simply
    continues it.

    Args:
        warmup_steps: optimizer steps of linear warmup to the optimizer's lr, and the decay's time scale.
    """
    return LambdaLR(optimizer, lambda step: min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1))))
