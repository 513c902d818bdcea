"""The task and data schemas (lab.tasks.config, lab.data.config) as Hydra composes conf/ onto them."""
from __future__ import annotations

import pytest

ADAMW_KEYS = ("lr", "betas", "eps", "weight_decay", "fused")


@pytest.mark.parametrize("task", ["language_model", "classification", "mlm", "translation"])
def test_the_muon_choice_keeps_the_tasks_adamw_settings(compose, task):
    adamw = compose([f"task={task}"]).task.optimizer
    muon = compose([f"task={task}", "+task/optimizer=muon"]).task.optimizer
    assert muon._target_ == "lab.tasks.optim.MuonAdamW" and muon.muon_lr == 0.02
    assert {k: muon[k] for k in ADAMW_KEYS} == {k: adamw[k] for k in ADAMW_KEYS}


def test_a_schedule_option_takes_the_tasks_values_over_its_own(compose):
    cfg = compose(["+experiment=translator_small", "task/scheduler=wsd"])
    assert cfg.task.scheduler._target_ == "lab.tasks.optim.warmup_stable_decay"
    assert cfg.task.scheduler.warmup_steps == 500 and cfg.task.scheduler.decay_fraction == 0.2  # the preset's, wsd's
