"""Batching shared by the sentence-level datamodules: global -> per-device batch size, dynamic padding,
length-bucketed batch sampling."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

from lab.errors import DataError


def per_device_batch(batch_size: int, trainer, field: str = "data.batch_size") -> int:
    """data.batch_size is GLOBAL (per optimizer step); each device loads batch / (devices * accumulation)."""
    world, accum = (trainer.world_size, trainer.accumulate_grad_batches) if trainer is not None else (1, 1)
    if batch_size % (world * accum):
        raise DataError(
            f"{field}={batch_size} (global) is not divisible by devices x accumulate_grad_batches "
            f"= {world} x {accum}; choose a multiple of {world * accum}"
        )
    return batch_size // (world * accum)


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Dynamic padding: right-pad to the longest sequence of this batch, not a global maximum. -> [B, T]"""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length, so dynamic padding pads little.

    Each epoch: shuffle all indices (seed, epoch), cut them into pools of `pool_batches` batches, sort each
    pool by length, cut it into batches, shuffle the batch order. Batches stay random across epochs and
    pools while the padding inside a batch is small. shuffle=False (evaluation): one sort by length.
    With several devices each rank takes every world-th batch.

    max_tokens: cut batches by padded tokens (items x longest length) instead of batch_size items, as
    fairseq's --max-tokens does. With a fixed item count, sorted batches of short items hold a fraction of
    the tokens of long ones, yet each is one optimizer step of the same weight: short sequences would count
    for more per token than in random batches. An item longer than max_tokens gets a batch of its own.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int = 0,
                 pool_batches: int = 50, rank: int = 0, world: int = 1, max_tokens: int | None = None):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.shuffle, self.seed, self.max_tokens = batch_size, shuffle, seed, max_tokens
        per_batch = batch_size if max_tokens is None else max(1, max_tokens // max(1, int(self.lengths.mean())))
        self.pool, self.rank, self.world, self.epoch = pool_batches * per_batch, rank, world, 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this at every epoch start
        self.epoch = epoch

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        """Consecutive batches of `order` (sorted by length, ascending)."""
        if self.max_tokens is None:
            return [order[i : i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        batches, batch = [], []
        for i in order.tolist():  # ascending: the newest item is the longest of its batch
            if batch and (len(batch) + 1) * self.lengths[i] > self.max_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        return batches + [batch] if batch else batches

    def _batches(self) -> list[list[int]]:
        if not self.shuffle:
            return self._cut(np.argsort(self.lengths, kind="stable"))
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(len(self.lengths))
        batches = []
        for p in range(0, len(order), self.pool):
            pool = order[p : p + self.pool]
            batches += self._cut(pool[np.argsort(self.lengths[pool], kind="stable")])
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        usable = len(batches) - len(batches) % self.world if self.world > 1 else len(batches)
        return iter(batches[self.rank : usable : self.world])

    def __len__(self) -> int:
        n = -(-len(self.lengths) // self.batch_size) if not self.shuffle else len(self._batches())
        return n // self.world if self.world > 1 else n


def step_ordered_sampler(dataset, trainer):
    """This process's share of each global batch, in order, or None for a single process.

    Lightning would otherwise inject a *shuffling* DistributedSampler for training, so a 2-process run saw
    other examples at step k than a 1-process run (and a resumed run another permutation). A strided,
    unshuffled DistributedSampler hands rank r the samples r, r+W, r+2W, ...: per optimizer step the W ranks
    together load exactly samples [k*B, (k+1)*B) of the global order, with or without gradient
    accumulation, so datasets whose samples are a function of their index (RandomWindows) give the same
    batches for every strategy and device count. Lightning leaves a loader that has a DistributedSampler alone."""
    from torch.utils.data import DistributedSampler  # noqa: PLC0415

    if trainer is None or trainer.world_size == 1:
        return None
    shard = trainer.distributed_sampler_kwargs  # data-parallel replicas and this rank (DDP, FSDP2, DeepSpeed)
    return DistributedSampler(dataset, num_replicas=shard["num_replicas"], rank=shard["rank"], shuffle=False)
