"""Batching shared by the sentence-level datamodules: global -> per-device batch size, dynamic padding,
length-bucketed batch sampling."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

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


def resume_point(trainer, batches_in_epoch: Callable[[int], int]) -> tuple[int, int]:
    """Where a run resumed at trainer.global_step continues: (epoch, batches of that epoch this rank already
    trained on). Lightning steps the optimizer every accumulate_grad_batches batches and after the last batch
    of an epoch; batches_in_epoch(e) is this rank's batch count in epoch e. (0, 0) for a fresh run."""
    if trainer is None:
        return 0, 0
    steps, accum, epoch = trainer.global_step, trainer.accumulate_grad_batches, 0
    while steps >= (epoch_steps := math.ceil(batches_in_epoch(epoch) / accum)) > 0:
        steps, epoch = steps - epoch_steps, epoch + 1
    return epoch, steps * accum


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length, so dynamic padding pads little.

    Each epoch: shuffle all indices (seed, epoch), cut them into pools of `pool_batches` batches, sort each
    pool by length, cut it into batches, shuffle the batch order. Batches stay random across epochs and
    pools while the padding inside a batch is small. shuffle=False (evaluation): one sort by length.
    With several devices each rank takes every world-th batch.
    A resumed run (`resume(trainer)`) leaves out the batches of the current epoch that the checkpoint's steps
    already trained on, so it continues with the very batch the interrupted run would have loaded next.

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
        self.resume_epoch, self.resume_skip = 0, 0
        # Lightning calls set_epoch on loader.sampler and loader.batch_sampler.sampler, never on the batch
        # sampler itself: without this every epoch would repeat the first epoch's batches
        self.sampler = self

    def resume(self, trainer) -> BucketBatchSampler:
        """Skip what the optimizer steps restored from a checkpoint consumed (nothing in a fresh run). Starts
        at the resumed epoch: Lightning creates the first iterator before it calls set_epoch."""
        self.resume_epoch, self.resume_skip = resume_point(trainer, self._len_in_epoch)
        self.epoch = self.resume_epoch
        return self

    def _len_in_epoch(self, epoch: int) -> int:
        current, self.epoch = self.epoch, epoch
        try:
            return len(self)
        finally:
            self.epoch = current

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
        mine = batches[self.rank : usable : self.world]
        # resumed mid-epoch: Lightning counts the skipped batches as seen, so len() stays the whole epoch's
        return iter(mine[self.resume_skip :] if self.epoch == self.resume_epoch else mine)

    def __len__(self) -> int:
        n = -(-len(self.lengths) // self.batch_size) if not self.shuffle else len(self._batches())
        return n // self.world if self.world > 1 else n


class StepOrderedSampler(Sampler[int]):
    """This process's share of each global batch, in order: rank r of W takes samples r, r+W, r+2W, ...

    Lightning would otherwise inject a *shuffling* DistributedSampler for training, so a 2-process run saw
    other examples at step k than a 1-process run (and a resumed run another permutation). Strided and
    unshuffled, per optimizer step the W ranks together load exactly samples [k*B, (k+1)*B) of the global
    order, with or without gradient accumulation, so datasets whose samples are a function of their index
    (RandomWindows) give the same batches for every strategy and device count.
    skip: samples of the global order trained on before a resume (a multiple of W); iteration starts after
    them while len() stays the whole epoch's, as Lightning (which counts them as seen) expects."""

    def __init__(self, length: int, rank: int = 0, world: int = 1, skip: int = 0):
        self.length, self.rank, self.world, self.skip = length, rank, world, skip

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.skip + self.rank, self.length - self.length % self.world, self.world))

    def __len__(self) -> int:
        return self.length // self.world


def step_ordered_sampler(dataset, trainer, skip: int = 0) -> StepOrderedSampler:
    """A StepOrderedSampler over dataset for this process (data-parallel replicas and rank from the trainer's
    strategy: DDP, FSDP2, DeepSpeed); Lightning leaves a loader with a sampler of its datamodule's alone
    when the datamodule says shards_batches."""
    shard = trainer.distributed_sampler_kwargs if trainer is not None and trainer.world_size > 1 else None
    rank, world = (shard["rank"], shard["num_replicas"]) if shard else (0, 1)
    return StepOrderedSampler(len(dataset), rank, world, skip)
