"""The global batch rule: every strategy and device count trains on the same examples per optimizer step."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from torch.utils.data import DataLoader

from lab.data.batching import BucketBatchSampler, per_device_batch, step_ordered_sampler
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


@pytest.mark.parametrize("world, accum", [(1, 1), (2, 2)], ids=["1-rank", "2-ranks-accum-2"])
def test_resumed_loader_continues_with_the_next_unseen_windows(world, accum):
    """Resumed at step 2 of 5: the ranks together load steps 2..4 of the uninterrupted run, and len() stays the
    whole epoch's, because Lightning counts the skipped batches as already seen."""
    dataset = RandomWindows(TOKENS, block_size=8, seed=0, length=5 * 12)
    for rank in range(world):
        trainer = fake_trainer(world, rank, accum)
        batch = per_device_batch(12, trainer)
        full = list(DataLoader(dataset, batch_size=batch, sampler=step_ordered_sampler(dataset, trainer)))
        resumed = DataLoader(dataset, batch_size=batch, sampler=step_ordered_sampler(dataset, trainer, skip=2 * 12))
        assert len(resumed) == len(full) == 5 * accum
        assert [x[:, 0].tolist() for x, _ in resumed] == [x[:, 0].tolist() for x, _ in full[2 * accum :]]


def test_indivisible_global_batch_names_the_multiple():
    with pytest.raises(DataError, match="multiple of 4"):
        per_device_batch(10, fake_trainer(2, 0, 2))
    assert per_device_batch(12, fake_trainer(2, 1, 3)) == 2


def test_lightning_reaches_the_bucket_samplers_epoch():
    """Lightning calls set_epoch on loader.sampler / loader.batch_sampler.sampler only; the batches must change."""
    from lightning.fabric.utilities.data import _set_sampler_epoch

    sampler = BucketBatchSampler(list(range(1, 41)), 4, shuffle=True, seed=0)
    loader = DataLoader(list(range(40)), batch_sampler=sampler)
    _set_sampler_epoch(loader, 0)
    first = [b.tolist() for b in loader]
    _set_sampler_epoch(loader, 1)
    assert [b.tolist() for b in loader] != first


@pytest.mark.parametrize("accum", [1, 2, 3], ids=["accum1", "accum2", "accum3"])
def test_resumed_bucket_sampler_continues_with_the_next_batch(accum):
    """Token-budget batches (a batch count that changes by epoch), resumed at every step of 3 epochs: the
    resumed sampler's next batch is the one the uninterrupted run trained on after that step. Lightning steps
    after every accum batches and after an epoch's last batch."""
    lengths = [1 + (i * 7) % 12 for i in range(60)]
    make = lambda: BucketBatchSampler(lengths, 8, True, seed=3, pool_batches=2, max_tokens=40)  # noqa: E731
    epochs = []
    for epoch in range(3):
        s = make()
        s.set_epoch(epoch)
        epochs.append(list(s))
    assert len({len(e) for e in epochs}) > 1, "the case needs batch counts that differ between epochs"
    after_step = []  # (epoch, index of the next batch) after each optimizer step of the uninterrupted run
    for epoch, batches in enumerate(epochs):
        for i in range(len(batches)):
            if (i + 1) % accum == 0 or i + 1 == len(batches):
                after_step.append((epoch, i + 1) if i + 1 < len(batches) else (epoch + 1, 0))
    for step, (epoch, index) in enumerate(after_step[:-1], start=1):
        resumed = make().resume(SimpleNamespace(global_step=step, accumulate_grad_batches=accum))
        assert resumed.epoch == epoch  # set before Lightning's first iterator, which precedes set_epoch
        assert len(resumed) == len(epochs[epoch])  # Lightning counts the skipped batches as seen
        assert next(iter(resumed)) == epochs[epoch][index], f"resumed after step {step}"
