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
