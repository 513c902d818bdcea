"""Every "every N steps" setting counts optimizer steps, as the configs document, also with gradient
accumulation. Lightning counts `val_check_interval` (an int) in training batches, i.e. micro-batches: with
accumulate_grad_batches=2 it validated twice as often as configured. log_every_n_steps, ModelCheckpoint's
every_n_train_steps and max_steps already count optimizer steps. A validation interval longer than the run
validates at its end instead."""
from __future__ import annotations

import logging

from omegaconf import DictConfig, open_dict

log = logging.getLogger("lab")


def count_optimizer_steps(trainer_cfg: DictConfig) -> None:
    """Give Lightning val_check_interval in the micro-batches it counts: optimizer steps x accumulation."""
    interval, accumulate = trainer_cfg.get("val_check_interval"), trainer_cfg.get("accumulate_grad_batches", 1)
    if isinstance(interval, int) and isinstance(accumulate, int) and accumulate > 1:
        with open_dict(trainer_cfg):
            trainer_cfg.val_check_interval = interval * accumulate
        log.info("trainer.val_check_interval=%d optimizer steps = %d batches with accumulate_grad_batches=%d",
                 interval, interval * accumulate, accumulate)


def fit_validation_into_budget(trainer_cfg: DictConfig) -> None:
    """trainer.max_steps=100 with the experiment's val_check_interval=250 would be a Lightning error;
    validate at the end instead, and say so."""
    interval, steps = trainer_cfg.get("val_check_interval"), trainer_cfg.get("max_steps", -1)
    if isinstance(interval, int) and 0 < steps < interval:
        log.info("trainer.val_check_interval=%d > trainer.max_steps=%d: validating at step %d", interval, steps, steps)
        with open_dict(trainer_cfg):
            trainer_cfg.val_check_interval = steps
