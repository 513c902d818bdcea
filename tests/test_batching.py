"""The global batch rule: every strategy and device count trains on the same examples per optimizer step."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from torch.utils.data import DataLoader

from lab.data.batching import per_device_batch, step_ordered_sampler
from lab.data.lm import RandomWindows
from lab.errors import DataError

TOKENS = np.arange(10_000, dtype=np.uint16)


def fake_trainer(world: int, rank: int, accum: int):
    return SimpleNamespace(world_size=world, accumulate_grad_batches=accum,
                           distributed_sampler_kwargs={"num_replicas": world, "rank": rank})


def step_windows(world: int, accum: int, global_batch: int = 12, steps: int = 3) -> list[set[int]]:
    """Window starts each optimizer step sees, over all ranks and accumulated micro-batches."""
    dataset = RandomWindows(TOKENS, block_size=8, seed=0, length=steps * global_batch)
    seen: list[set[int]] = [set() for _ in range(steps)]
    for rank in range(world):
        trainer = fake_trainer(world, rank, accum) if world > 1 or accum > 1 else None
        batch = per_device_batch(global_batch, trainer)
        loader = DataLoader(dataset, batch_size=batch, sampler=step_ordered_sampler(dataset, trainer))
        micro = list(loader)
        assert len(micro) == steps * accum  # every rank runs the same number of micro-batches
        for i, (x, _) in enumerate(micro):
            seen[i // accum] |= set(x[:, 0].tolist())
    return seen


@pytest.mark.parametrize("world, accum", [(2, 1), (2, 2), (3, 2), (1, 4)], ids=["2-ranks", "2-ranks-accum-2", "3-ranks-accum-2", "accum-4"])
def test_each_step_sees_the_single_process_windows(world, accum):
    assert step_windows(world, accum) == step_windows(1, 1)


def test_lightnings_shuffling_sampler_would_not():
    """What step_ordered_sampler replaces: a shuffled DistributedSampler draws other windows per step."""
    from torch.utils.data import DistributedSampler

    dataset = RandomWindows(TOKENS, block_size=8, seed=0, length=36)
    first_step = set()
    for rank in range(2):
        loader = DataLoader(dataset, batch_size=6, sampler=DistributedSampler(dataset, 2, rank, shuffle=True, seed=0))
        first_step |= set(next(iter(loader))[0][:, 0].tolist())
    assert first_step != step_windows(1, 1)[0]


def test_single_process_keeps_the_default_sampler():
    assert step_ordered_sampler(RandomWindows(TOKENS, 8, 0, 12), None) is None
    assert step_ordered_sampler(RandomWindows(TOKENS, 8, 0, 12), fake_trainer(1, 0, 2)) is None


def test_indivisible_global_batch_names_the_multiple():
    with pytest.raises(DataError, match="multiple of 4"):
        per_device_batch(10, fake_trainer(2, 0, 2))
    assert per_device_batch(12, fake_trainer(2, 1, 3)) == 2
