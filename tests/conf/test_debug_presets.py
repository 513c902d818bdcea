"""Every debug preset (conf/debug/*) works with every experiment: the composed config builds the datamodule,
model, task (optimizer + schedule) and Trainer with its callbacks, and the preset's budget is what it says."""
from __future__ import annotations

import pytest
import torch
from conftest import CONF
from hydra.utils import instantiate
from test_configs import EXPERIMENTS, REQUIRED, VOCAB

from lab.models import build_model

DEBUG = sorted(p.stem for p in (CONF / "debug").glob("*.yaml"))


@pytest.mark.parametrize("debug", DEBUG)
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_debug_preset_builds_with_experiment(compose, experiment, debug, tmp_path):
    cfg = compose([f"+experiment={experiment}", f"+debug={debug}", *REQUIRED.get(experiment, []),
                   f"paths.output_dir={tmp_path}", "trainer.accelerator=cpu", "trainer.precision=32-true"])
    datamodule = instantiate(cfg.data)  # a preset key the datamodule lacks (eval_batches) is a TypeError here
    assert datamodule.eval_batches == cfg.data.eval_batches
    with torch.device("meta"):  # shapes only: the GPU-sized models cost no memory or init time
        task = instantiate(cfg.task, model=build_model(cfg.model, VOCAB))
    schedule = task.configure_optimizers()["lr_scheduler"]["scheduler"]
    assert getattr(schedule, "warmup_steps", 0) <= cfg.trainer.max_steps, "warmup longer than the preset's budget"
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None]
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=False, devices=1, strategy="auto")
    assert trainer.max_steps == (1 if cfg.trainer.get("fast_dev_run") else cfg.trainer.max_steps) <= 200
    assert cfg.logger.wandb.mode == "disabled"
