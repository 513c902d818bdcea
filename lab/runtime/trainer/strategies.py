"""The trainer config group (conf/trainer/*): strategies, the checks that refuse combinations that cannot
work before Lightning starts processes, and what makes DDP/FSDP child processes re-run only their own job."""
from __future__ import annotations

import inspect
import logging
import os
import sys
from contextlib import contextmanager
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from omegaconf import OmegaConf

from lab.errors import LabError
from lab.nn.fsdp import ShardsBlocks

log = logging.getLogger("lab")
# ModelParallelStrategy's precision plugins; 16-mixed needs a sharded grad scaler it does not have.
FSDP_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")


class FSDP2Strategy(ModelParallelStrategy, ShardsBlocks):
    """FSDP2 through Lightning's ModelParallelStrategy: every process is one data-parallel shard (no tensor
    parallelism); `Task.configure_model` shards each transformer Block with the settings below.

    param_dtype / reduce_dtype: FSDP2 MixedPrecisionPolicy dtypes (bfloat16 | float16 | float32 | null).
    activation_checkpointing: recompute each block's activations in backward (memory for compute).
    compile_blocks: torch.compile each block after sharding (set from the top-level `compile`).
    save_distributed_checkpoint: true writes one shard per rank into a checkpoint *directory*
    (consolidate with `python -m lab.checkpoint consolidate <dir> <file.ckpt>`); false gathers a single file on rank 0.
    process_group_backend: null picks gloo on CPU, nccl on GPU.
    """

    def __init__(
        self,
        param_dtype: str | None = None,
        reduce_dtype: str | None = None,
        activation_checkpointing: bool = False,
        compile_blocks: bool = False,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
    ):
        super().__init__(tensor_parallel_size=1, save_distributed_checkpoint=save_distributed_checkpoint,
                         process_group_backend=process_group_backend)
        self.fsdp_settings = {
            "param_dtype": param_dtype,
            "reduce_dtype": reduce_dtype,
            "activation_checkpointing": activation_checkpointing,
            "compile_blocks": compile_blocks,
        }

    def setup_environment(self) -> None:
        if self._data_parallel_size == "auto":  # all processes of all nodes shard one model
            self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        """A sharded checkpoint directory is written whole under a temporary name, then renamed into place
        (lab.checkpoints.atomic.replace_dir): a kill mid-write never leaves a half-written `last.ckpt/`."""
        from pathlib import Path  # noqa: PLC0415

        from lab.checkpoints.atomic import replace_dir, tmp_name  # noqa: PLC0415

        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        final = Path(self.broadcast(str(filepath)))
        tmp = tmp_name(final, per_process=False)  # the same name on every rank: they write one directory
        if self.global_rank == 0 and tmp.exists():
            import shutil  # noqa: PLC0415

            shutil.rmtree(tmp)
        self.barrier("lab_sharded_checkpoint_tmp")
        super().save_checkpoint(checkpoint, tmp, storage_options)
        self.barrier("lab_sharded_checkpoint_written")
        if self.global_rank == 0:
            replace_dir(tmp, final)
        self.barrier("lab_sharded_checkpoint_renamed")


def _strategy_kind(strategy: Any) -> str:
    """fsdp (lab's FSDP2) | deepspeed | ddp | other, from a strategy name or a `_target_` dict."""
    text = str(strategy.get("_target_", "")) if hasattr(strategy, "get") else str(strategy)
    if text.endswith(("FSDP2Strategy", "ModelParallelStrategy")):
        return "fsdp"
    for kind in ("deepspeed", "ddp"):
        if kind in text.lower():
            return kind
    return "other"


def _check_signature(node: Any, where: str) -> None:
    """Every `_target_` in the trainer config exists and accepts the keys given to it."""
    from hydra.utils import get_method  # noqa: PLC0415

    if not hasattr(node, "items"):
        return
    if "_target_" in node:
        try:
            target = get_method(node["_target_"])
        except Exception as e:  # hydra wraps import errors in several types
            raise LabError(f"{where}._target_={node['_target_']!r} cannot be imported ({e})") from e
        params = inspect.signature(target).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            unknown = [k for k in node if not str(k).startswith("_") and k not in params]
            if unknown:
                raise LabError(f"{where}: {node['_target_']} has no argument(s) {', '.join(map(str, unknown))}")
    for key, value in node.items():
        if not str(key).startswith("_"):
            _check_signature(value, f"{where}.{key}")


def check_trainer(cfg) -> None:
    """Refuse trainer settings that cannot work, with one message saying what to use instead.

    Runs before anything is instantiated, so a GPU-only strategy on a CPU machine is a clear error
    instead of a traceback from deep inside Lightning or a child process."""
    import torch  # noqa: PLC0415

    t = cfg.trainer
    kind = _strategy_kind(t.get("strategy", "auto"))
    accelerator = str(t.get("accelerator", "auto"))
    precision = str(t.get("precision", "32-true"))
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    _check_signature(OmegaConf.to_container(t, resolve=False), "trainer")  # keys only: paths resolve at run time
    if kind == "deepspeed" and not on_gpu:
        raise LabError("trainer=deepspeed runs on CUDA GPUs only (Lightning's DeepSpeed strategy has no CPU "
                       "accelerator); on CPU use trainer=ddp_cpu or trainer=fsdp_cpu")
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise LabError(f"trainer.accelerator={accelerator} but no CUDA GPU is visible to torch "
                       f"(torch {torch.__version__}); on CPU use trainer=cpu, trainer=ddp_cpu or trainer=fsdp_cpu")
    if kind == "deepspeed":
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("deepspeed") is None:
            raise LabError("trainer=deepspeed needs the deepspeed package: `pip install deepspeed` on the GPU machine")
    if precision in ("16-mixed", "16") and not on_gpu:
        raise LabError(f"trainer.precision={precision}: float16 autocast needs a CUDA GPU; on CPU use bf16-mixed or 32-true")
    if kind == "fsdp" and precision not in FSDP_PRECISIONS:
        raise LabError(f"trainer.precision={precision} is not supported with FSDP2 (ModelParallelStrategy has no "
                       f"sharded float16 grad scaler); choose one of {', '.join(FSDP_PRECISIONS)}")
    if kind in ("fsdp", "deepspeed") and t.get("gradient_clip_algorithm") == "value":
        raise LabError(f"trainer.gradient_clip_algorithm=value is not supported with {kind}; use norm (the default)")
    optimizer = (cfg.get("task") or {}).get("optimizer") or {}
    if optimizer.get("fused") and t.get("gradient_clip_val") and precision.endswith("-mixed") \
            and not str(optimizer.get("_target_", "")).startswith("lab."):
        # Lightning's mixed-precision plugin refuses to clip the gradients of an optimizer that unscales them
        # itself (torch's fused ones), even under bf16 where nothing is scaled (found on an H100, issue 32)
        raise LabError(f"task.optimizer.fused=true cannot be combined with trainer.gradient_clip_val="
                       f"{t.get('gradient_clip_val')} under trainer.precision={precision} (Lightning does not clip a "
                       "fused optimizer's gradients); set trainer.gradient_clip_val=null, or drop task.optimizer.fused")


def compile_model(cfg, task) -> None:
    """`compile: true` compiles the task's training work (lab.tasks.base.Task.compile_for_training: the model,
    or a language model with its loss), except under FSDP2, where each block is compiled after it is sharded
    (FSDP2Strategy.compile_blocks follows `compile`): a compiled root would trace FSDP hooks."""
    if cfg.get("compile"):
        log.info("compile=true: torch.compile compiles the model during the first training step (a minute or more on CPU)")
    if cfg.get("compile") and _strategy_kind(cfg.trainer.get("strategy", "auto")) != "fsdp":
        task.compile_for_training()


def pin_child_processes_to_job() -> None:
    """In a Hydra multirun, make the processes Lightning's DDP/FSDP launcher starts re-run this job only.

    Lightning starts ranks 1..N-1 by re-running `sys.argv` plus `hydra.run.dir=<HydraConfig run.dir>`.
    Inside a sweep, sys.argv is the whole sweep (`-m a=1,2 ...`): each child would launch the entire grid
    again into a new, stray sweep directory. Here sys.argv becomes this job's own overrides and the run
    dir this job's output dir, so each child joins its job, writes into the job's directory, and leaves.
    Rank 0 only (children already run a single job); harmless outside multirun or without extra processes.
    """
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415
    from hydra.types import RunMode  # noqa: PLC0415
    from omegaconf import read_write  # noqa: PLC0415

    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return
    sys.argv = [sys.argv[0], *hc.overrides.task]
    with read_write(hc.run):
        hc.run.dir = hc.runtime.output_dir


# What Lightning's process launcher writes into the launching process's environment.
LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextmanager
def job_processes():
    """One training job's distributed lifetime. Jobs of a Hydra multirun run one after another in one
    process; Lightning leaves the process group open and LOCAL_RANK/MASTER_PORT/... in os.environ, so the
    next job would think its processes were started externally and talk to the previous job's (gone) ranks.
    On exit: destroy the process group and restore those variables."""
    import torch.distributed as dist  # noqa: PLC0415

    saved = {k: os.environ.get(k) for k in LAUNCHER_ENV}
    try:
        yield
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
