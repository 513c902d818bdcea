"""The global batch rule every datamodule follows: `data.batch_size` is the GLOBAL batch per optimizer step."""
from __future__ import annotations

from lab.errors import DataError


def per_device_batch_size(global_batch: int, trainer) -> int:
    """Examples each process loads per forward: global / (data-parallel processes x gradient accumulation).

    trainer.world_size counts every process of every node for DDP, FSDP2 (lab.trainer.FSDP2Strategy shards
    over all of them) and DeepSpeed alike, so the optimizer sees the same number of examples per step
    whatever the strategy, device count or accumulation; only the split changes. Without a trainer
    (notebooks, tests) the whole batch is one device's."""
    world, accum = (trainer.world_size, trainer.accumulate_grad_batches) if trainer is not None else (1, 1)
    if global_batch % (world * accum):
        raise DataError(
            f"data.batch_size={global_batch} (global) is not divisible by devices x accumulate_grad_batches "
            f"= {world} x {accum}; choose a multiple of {world * accum}"
        )
    return global_batch // (world * accum)


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
