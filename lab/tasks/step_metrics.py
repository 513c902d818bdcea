"""Training metrics as a single process at the same global batch would log them: each metric's mean over the
micro-batches of one optimizer step (gradient accumulation) and over the processes (DDP, FSDP)."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import torch


class StepMeans:
    """Sums what each training micro-batch logs; `take` returns each metric's mean over the micro-batches added
    since the last `take`, reduced by `reduce` (the mean over processes: one collective for all metrics)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.sums)

    def add(self, metrics: Mapping[str, torch.Tensor]) -> None:
        for name, value in metrics.items():
            value = value.detach().float()
            self.sums[name] = self.sums[name] + value if name in self.sums else value
            self.counts[name] = self.counts.get(name, 0) + 1

    def take(self, reduce: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        names = list(self.sums)  # the same names in the same order on every process: the same code logged them
        sums = torch.stack([self.sums[n] for n in names])
        means = reduce(sums / torch.tensor([self.counts[n] for n in names], dtype=sums.dtype, device=sums.device))
        self.sums, self.counts = {}, {}
        return dict(zip(names, means.unbind(), strict=True))
