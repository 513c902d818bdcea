"""`ckpt_path=auto`: continue the same run from its newest valid checkpoint, in its own directory.

The run is the directory given by `hydra.run.dir` (or `hydra.sweep.dir` in a multirun), or else the newest
run under `<runs_dir>/<name>/` whose saved config.yaml equals this launch's resolved config (ckpt_path and the
run directory itself aside). Its newest checkpoint that loads is used (a damaged one is skipped with a warning);
with no earlier run, or none with a checkpoint, the run starts fresh and says so. The continued run writes into
that directory: metrics.csv continues (lab.runtime.trainer.metrics_csv), train.log is appended, the W&B run resumes
under the id stored in the directory. This is the way to launch cluster jobs: the same command serves the
first start, a requeue after preemption and a restart after a crash.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from lab.checkpoints.atomic import TMP_GLOB, is_tmp
from lab.errors import LabError
from lab.runtime.rundir import lock as rundir

log = logging.getLogger("lab")
AUTO = "auto"
IGNORED_KEYS = ("ckpt_path",)


def _normalised(config: Any, run_dir: Path) -> Any:
    """The config as a comparable value: its own run directory replaced by a placeholder, IGNORED_KEYS dropped."""
    text = str(run_dir)
    if isinstance(config, dict):
        return {k: _normalised(v, run_dir) for k, v in config.items() if k not in IGNORED_KEYS}
    if isinstance(config, list):
        return [_normalised(v, run_dir) for v in config]
    return config.replace(text, "<run_dir>") if isinstance(config, str) else config


def checkpoints_newest_first(run_dir: Path) -> list[Path]:
    """Checkpoint files and FSDP2 sharded directories of a run, most recently written first."""
    from lab.checkpoints.reading import is_sharded_checkpoint  # noqa: PLC0415

    ckpt_dir = run_dir / "checkpoints"
    if not ckpt_dir.is_dir():
        return []
    found = [p for p in ckpt_dir.iterdir() if not is_tmp(p)
             and ((p.is_file() and p.suffix == ".ckpt") or is_sharded_checkpoint(p))]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def newest_valid_checkpoint(run_dir: Path) -> Path | None:
    from lab.checkpoints.reading import read_checkpoint  # noqa: PLC0415

    for path in checkpoints_newest_first(run_dir):
        try:
            read_checkpoint(path, metadata_only=True)
            return path
        except LabError as e:
            log.warning("ckpt_path=auto: skipping %s: %s", path, e)
    return None


def remove_stale_temporaries(run_dir: Path) -> None:
    """Half-written checkpoints of a killed process (a temporary name, never a *.ckpt)."""
    import shutil  # noqa: PLC0415

    stale = list((run_dir / "checkpoints").glob(TMP_GLOB)) if (run_dir / "checkpoints").is_dir() else []
    for p in stale:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    if stale:
        log.info("removed %d unfinished checkpoint write(s) of an earlier process in %s", len(stale), run_dir / "checkpoints")


def _explicit_run_dir() -> bool:
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

    if not HydraConfig.initialized():
        return True
    given = [o.split("=", 1)[0].lstrip("+") for o in HydraConfig.get().overrides.hydra]
    return "hydra.run.dir" in given or "hydra.sweep.dir" in given


def find_earlier_run(cfg: DictConfig, fresh_dir: Path) -> Path | None:
    """The newest run of this name with this resolved config that has a checkpoint (not counting fresh_dir)."""
    mine = _normalised(OmegaConf.to_container(cfg, resolve=True), fresh_dir)
    base = Path(cfg.paths.runs_dir) / cfg.name
    candidates = [p.parent for p in base.glob("*/config.yaml")] + [p.parent for p in base.glob("multirun/*/*/config.yaml")]
    candidates = [d for d in candidates if d.resolve() != fresh_dir.resolve() and checkpoints_newest_first(d)]
    for run_dir in sorted(candidates, key=lambda d: checkpoints_newest_first(d)[0].stat().st_mtime, reverse=True):
        theirs = _normalised(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml")), run_dir)
        if theirs == mine:
            return run_dir
    return None


def claim_run_dir(cfg: DictConfig, is_rank_zero: bool) -> Path:
    """Decide this run's directory (and, for ckpt_path=auto, its checkpoint), lock it on rank zero, and set
    cfg.paths.output_dir / cfg.ckpt_path accordingly. Returns the run directory."""
    fresh = Path(cfg.paths.output_dir)
    if cfg.get("ckpt_path") != AUTO:
        if is_rank_zero:
            rundir.lock_run_dir(fresh)
        return fresh
    explicit = _explicit_run_dir()
    run_dir = fresh if explicit else (find_earlier_run(cfg, fresh) or fresh)
    if is_rank_zero:
        rundir.lock_run_dir(run_dir)  # before reading its checkpoints: a live run there is refused
        remove_stale_temporaries(run_dir)
    ckpt = newest_valid_checkpoint(run_dir)
    if is_rank_zero:
        if ckpt is None:
            log.info("ckpt_path=auto: no earlier checkpoint of this run (%s); starting fresh in %s",
                     "in the given run directory" if explicit else f"name={cfg.name}, same config", run_dir)
        else:
            log.info("ckpt_path=auto: resuming from %s", ckpt)
        if run_dir.resolve() != fresh.resolve():
            rundir.move_log_into(run_dir, fresh)
    with open_dict(cfg):
        cfg.paths.output_dir = str(run_dir)
        cfg.ckpt_path = str(ckpt) if ckpt else None
    _point_processes_at(run_dir, cfg.ckpt_path)
    return run_dir


def _point_processes_at(run_dir: Path, ckpt: str | None) -> None:
    """The processes Lightning starts for DDP/FSDP rerun sys.argv with hydra.run.dir=<HydraConfig run.dir>:
    they must join this run directory and load this very checkpoint rather than decide again."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

    sys.argv = [a for a in sys.argv if not a.lstrip("+").startswith("ckpt_path=")] + [f"ckpt_path={ckpt or 'null'}"]
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        with read_write(hc.run), read_write(hc.runtime):
            hc.run.dir = str(run_dir)
            hc.runtime.output_dir = str(run_dir)
