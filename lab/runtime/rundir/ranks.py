"""Which process of a distributed job this is, known before Lightning's Trainer exists (it sets the rank only
when it starts fitting): config printing, config.yaml, W&B runs and the run directory belong to global rank 0.

The rank comes from the launcher's environment, in the order Lightning's accelerator connector detects it:
SLURM (srun: SLURM_PROCID), torchrun (RANK), LSF (jsrun), else Lightning's own convention used by its process
launcher and by manual multi-node launches: NODE_RANK (or GROUP_RANK) * devices per node + LOCAL_RANK."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def devices_per_node(trainer_cfg) -> int:
    """trainer.devices as a process count: an int, a list of device ids, or auto / -1 (all visible GPUs)."""
    devices = trainer_cfg.get("devices", 1)
    if not isinstance(devices, (str, int)) and hasattr(devices, "__len__"):  # a list (ListConfig) of device ids
        return len(devices)
    if str(devices).lstrip("-").isdigit() and int(devices) > 0:
        return int(devices)
    import torch  # noqa: PLC0415

    on_gpu = str(trainer_cfg.get("accelerator", "auto")) in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    return torch.cuda.device_count() if on_gpu else 1


def global_rank(devices: int = 1) -> int:
    """This process's global rank from the environment (0 for a plain single-process run).
    devices: processes per node (only the NODE_RANK convention needs it; rank zero is rank zero for any value)."""
    from lightning.fabric.plugins.environments import LSFEnvironment, SLURMEnvironment, TorchElasticEnvironment  # noqa: PLC0415

    for environment in (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment):
        if environment.detect():
            return int(environment().global_rank())
    node = int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", 0)))
    return node * devices + int(os.environ.get("LOCAL_RANK", 0))


def set_global_rank(trainer_cfg) -> int:
    """Tell Lightning's rank_zero_* helpers (and lab's checks of rank_zero_only.rank) who this process is now,
    before anything is printed or written; the Trainer later sets the same value."""
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    rank_zero_only.rank = global_rank(devices_per_node(trainer_cfg))
    return rank_zero_only.rank


def run_dir(path: str) -> str:
    """`${lab.run_dir:<path>}` (hydra.run.dir): <path> for global rank 0. Every other rank of a job whose ranks
    start independently (NODE_RANK, torchrun, srun) would resolve its own timestamp and leave a stray run
    directory: it gets a scratch directory in the temp dir instead (it writes only Hydra's files there; its
    checkpoint shards follow rank 0's directory, which Lightning broadcasts). Ranks that Lightning's own
    launcher starts are given rank 0's directory on their command line and never come here."""
    rank = global_rank()
    if rank == 0:
        return path
    return str(Path(tempfile.gettempdir()) / "lab-ranks" / f"rank{rank}-pid{os.getpid()}")
