"""Learning-rate schedules (configs use them with `_partial_: true`; the task passes the optimizer)."""
from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> LambdaLR:
    """Linear warmup from 0 to each group's lr, then cosine decay to min_lr at total_steps; min_lr after."""
    base = optimizer.param_groups[0]["lr"]
    floor = min_lr / base if base > 0 else 0.0

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def inverse_sqrt(optimizer: Optimizer, warmup_steps: int) -> LambdaLR:
    """Vaswani et al. 5.3: linear warmup, then lr * sqrt(warmup / step)."""
    return LambdaLR(optimizer, lambda step: min((step + 1) / warmup_steps, math.sqrt(warmup_steps / (step + 1))))
