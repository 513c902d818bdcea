"""One training run: data, model and task from the config, fit, test; the heart of `python -m lab.train`."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from lab.runtime.cli import print_config_tree

log = logging.getLogger("lab")


def build_loggers(cfg: DictConfig) -> list:
    from hydra.utils import instantiate  # noqa: PLC0415

    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    return [lg for lg in loggers if lg is not None]


def fit_validation_into_budget(trainer_cfg: DictConfig) -> None:
    """trainer.max_steps=100 with the experiment's val_check_interval=250 would be a Lightning error;
    validate at the end instead, and say so."""
    interval, steps = trainer_cfg.get("val_check_interval"), trainer_cfg.get("max_steps", -1)
    if isinstance(interval, int) and 0 < steps < interval:
        log.info("trainer.val_check_interval=%d > trainer.max_steps=%d: validating at step %d", interval, steps, steps)
        with open_dict(trainer_cfg):
            trainer_cfg.val_check_interval = steps


def train(cfg: DictConfig) -> float | None:
    """Prepare data, build model + task from what the data says, fit, test; return the optimized metric."""
    import lightning as L  # noqa: PLC0415 - heavy imports after Hydra has parsed the command line
    import torch  # noqa: PLC0415
    from hydra.utils import instantiate  # noqa: PLC0415
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    from lab.models import build_model  # noqa: PLC0415
    from lab.runtime.checkpoints import read_checkpoint  # noqa: PLC0415
    from lab.runtime.loggers import finish_loggers  # noqa: PLC0415
    from lab.runtime.sweeps import record_final_metrics  # noqa: PLC0415
    from lab.runtime.trainer import check_trainer, compile_model, job_processes, pin_child_processes_to_job  # noqa: PLC0415

    t_start = time.perf_counter()
    check_trainer(cfg)
    out_dir = Path(cfg.paths.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if rank_zero_only.rank != 0:  # DDP/FSDP children: warnings and errors only, rank 0 reports
        log.setLevel(logging.WARNING)
    else:
        print_config_tree(cfg)
        out_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(resolved, out_dir / "config.yaml")
    if cfg.get("ckpt_path"):
        read_checkpoint(cfg.ckpt_path, metadata_only=True)  # a bad path or damaged file fails here, with a clear message
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision("high")

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule.vocab)
    task = instantiate(cfg.task, model=model)
    task.lab_metadata = {
        "config": resolved,
        "vocab": datamodule.vocab,
        "tokenizer": datamodule.tokenizer.to_json(),
        # anything else inference needs from the data (e.g. label names), if the datamodule offers it
        "data": datamodule.checkpoint_metadata() if hasattr(datamodule, "checkpoint_metadata") else {},
    }
    compile_model(cfg, model)
    counts = task.parameter_counts()
    log.info("parameters: %s total, %s active per token", f"{counts['total']:,}", f"{counts['active']:,}")

    fit_validation_into_budget(cfg.trainer)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    loggers = build_loggers(cfg)
    # a datamodule that gives each rank its share itself (shards_batches) must not get Lightning's sampler
    shards_itself = getattr(datamodule, "shards_batches", False)
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, use_distributed_sampler=not shards_itself)
    for lg in loggers:
        lg.log_hyperparams({**resolved, "params/total": counts["total"], "params/active": counts["active"]})

    log.info("setup took %.1fs; training in %s", time.perf_counter() - t_start, out_dir)
    pin_child_processes_to_job()
    exit_code = 1  # W&B records a job that did not get to the end (interrupted, failed) as non-zero
    try:
        with job_processes():
            trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            if cfg.get("test") and not trainer.fast_dev_run:
                best = "best" if trainer.checkpoint_callback else None
                results = trainer.test(task, datamodule=datamodule, ckpt_path=best)
                metrics.update({k: float(v) for k, v in (results[0] if results else {}).items()})
            if hasattr(task, "log_samples") and task.samples:
                task.log_samples()  # every rank generates (FSDP gathers shards collectively); rank 0 logs
        exit_code = 0
    finally:
        finish_loggers(loggers, exit_code)  # the next job of a sweep starts its own W&B run
    record_final_metrics({**metrics, "params/total": counts["total"], "params/active": counts["active"]})
    log.info("finished in %.1fs; run dir %s", time.perf_counter() - t_start, out_dir)
    value = metrics.get(cfg.get("optimized_metric") or "")
    return value if value is not None and math.isfinite(value) else None
