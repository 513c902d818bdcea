"""The Lightning Trainer built from the config (callbacks, loggers, strategy), and one fit with it: train,
stop resumably on a signal (lab.runtime.rundir.signals), test the best checkpoint, end the loggers."""
from __future__ import annotations

import logging

from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from lab.runtime.callbacks.progress import progress_bar_setting
from lab.runtime.rundir import signals
from lab.runtime.rundir.run_dir import RunDir
from lab.runtime.trainer.intervals import count_optimizer_steps, fit_validation_into_budget
from lab.runtime.trainer.loggers import finish_loggers, start_wandb_on_train_start
from lab.runtime.trainer.resume import Resume
from lab.runtime.trainer.strategies import job_processes, pin_child_processes_to_job

log = logging.getLogger("lab")


def build_loggers(cfg: DictConfig) -> list:
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    return [lg for lg in loggers if lg is not None]


def build_trainer(cfg: DictConfig, datamodule, run_dir: RunDir, hyperparams: dict):
    """-> (Trainer, its loggers): every-N-steps settings in optimizer steps, the callbacks, the loggers (W&B
    pinned to the run directory's run id), and the config with `hyperparams` logged to each logger."""
    fit_validation_into_budget(cfg.trainer)
    count_optimizer_steps(cfg.trainer)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks.append(start_wandb_on_train_start())  # W&B begins with training, never for a launch refused in setup
    run_dir.pin_wandb_run(cfg)  # preemption: every launch of this run logs to one W&B run
    loggers = build_loggers(cfg)
    shards_itself = datamodule.shards_batches  # then it must not get Lightning's sampler
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, use_distributed_sampler=not shards_itself,
                          **progress_bar_setting(cfg.trainer, callbacks))
    for lg in loggers:
        lg.log_hyperparams(hyperparams)
    return trainer, loggers


def fit_and_test(cfg: DictConfig, trainer, loggers: list, task, datamodule, resume: Resume | None,
                 run_dir: RunDir) -> dict[str, float]:
    """Fit (from `resume`'s checkpoint, if any), then test the best checkpoint; -> every final metric. A stop
    signal ends fit after a checkpoint of the current step and exits resumably (signals.exit_resumable)."""
    pin_child_processes_to_job()
    exit_code = 1  # W&B records a job that did not get to the end (interrupted, failed) as non-zero
    try:
        with job_processes():
            try:
                # weights_only: resuming from a file runs no code in it
                trainer.fit(task, datamodule=datamodule, ckpt_path=resume.path if resume else None, weights_only=True)
            except SIGTERMException:
                if signals.received() is None:
                    raise
            if signals.received() is not None:
                last = getattr(trainer.checkpoint_callback, "last_model_path", None)
                signals.exit_resumable(trainer.global_step, run_dir.path, last, rank_zero_only.rank == 0)
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            if cfg.get("test") and not trainer.fast_dev_run:
                best = "best" if trainer.checkpoint_callback else None
                results = trainer.test(task, datamodule=datamodule, ckpt_path=best, weights_only=True)
                metrics.update({k: float(v) for k, v in (results[0] if results else {}).items()})
            task.log_final_samples()  # every rank generates (FSDP gathers shards collectively); rank 0 logs
        exit_code = 0
    finally:
        if resume:
            resume.cleanup()
        finish_loggers(loggers, exit_code)  # the next job of a sweep starts its own W&B run
    return metrics
