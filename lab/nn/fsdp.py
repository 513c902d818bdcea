"""FSDP2 for lab models: one shard group per transformer Block, then the root (embeddings, head, norms)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.errors import ConfigError
from lab.nn.blocks import Block

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    if name not in DTYPES:
        raise ConfigError(f"FSDP mixed precision dtype {name!r} is not one of {', '.join(DTYPES)} (or null)")
    return DTYPES[name]


class ShardsBlocks:
    """A training strategy that shards the model with fully_shard_blocks, called with its fsdp_settings
    (lab.runtime.trainer.strategies.FSDP2Strategy; lab.tasks.base.Task.configure_model does the call)."""

    fsdp_settings: dict[str, Any]


def fully_shard_blocks(
    model: nn.Module,
    mesh,
    param_dtype: str | None = None,
    reduce_dtype: str | None = None,
    activation_checkpointing: bool = False,
    compile_blocks: bool = False,
) -> int:
    """Shard `model` in place with FSDP2 (`torch.distributed.fsdp.fully_shard`) over `mesh`; returns the
    number of Blocks sharded (0 when already sharded: Lightning calls configure_model again for test).

    Each Block is its own FSDP unit, so only one block's full parameters exist at a time in forward and
    backward; the root unit holds what is left (token embedding, tied head, final norm). Parameter names do
    not change, so sharded checkpoints consolidate to the ordinary state dict.
    param_dtype/reduce_dtype: FSDP2 mixed precision (e.g. bfloat16 compute, float32 gradient reduction);
    the sharded master weights stay float32.
    activation_checkpointing: recompute each block's activations in backward (composable
    `checkpoint`, which keeps parameter names unchanged, unlike checkpoint_wrapper).
    compile_blocks: torch.compile each block (compiling the sharded root as a whole breaks on FSDP hooks).
    """
    from torch.distributed._composable import checkpoint  # noqa: PLC0415
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard  # noqa: PLC0415

    if isinstance(model, FSDPModule):
        return 0
    policy = MixedPrecisionPolicy(param_dtype=_dtype(param_dtype), reduce_dtype=_dtype(reduce_dtype))
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    if not blocks:
        raise ConfigError(f"{type(model).__name__} has no lab.nn.Block to shard; FSDP needs a lab transformer")
    for block in blocks:
        if activation_checkpointing:
            checkpoint(block)
        fully_shard(block, mesh=mesh, mp_policy=policy)
        if compile_blocks:
            block.compile()
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return len(blocks)
