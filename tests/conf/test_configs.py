"""Every shipped config composes and builds; overrides reach the objects."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONF
from hydra.utils import instantiate

from lab.models import build_model

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# Values an experiment requires from the command line (??? in its file).
REQUIRED = {"encoder_classifier_pretrained": ["model.init_from=/runs/encoder_mlm/checkpoints/last.ckpt"]}
# Every vocabulary fact a datamodule may report; build_model passes each model only those it takes.
VOCAB = {"vocab_size": 97, "pad_id": 0, "eos_id": 1, "bos_id": 2, "mask_id": 3, "cls_id": 4, "sep_id": 5, "num_labels": 2}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_builds_model_and_task(compose, name):
    cfg = compose([f"+experiment={name}", *REQUIRED.get(name, [])])
    assert cfg.name == name, "an experiment names its runs after itself"
    model = build_model(cfg.model, VOCAB)
    task = instantiate(cfg.task, model=model)
    optimizer = task.configure_optimizers()
    assert optimizer is not None
    assert cfg.data._target_ and cfg.trainer._target_ == "lightning.pytorch.Trainer"


def test_experiment_files_are_global_overrides():
    for path in (CONF / "experiment").glob("*.yaml"):
        assert Path(path).read_text().startswith("# @package _global_"), path.name


def test_command_line_overrides_reach_the_model(compose):
    cfg = compose(["+experiment=gpt_small", "model.n_layers=2", "data.tokenizer=char", "trainer.max_steps=100"])
    model = build_model(cfg.model, {"vocab_size": 50})
    assert len(model.decoder.layers) == 2 and model.vocab_size == 50
    assert cfg.data.tokenizer == "char" and cfg.task.scheduler.total_steps == 100


def test_no_config_hard_codes_a_vocab_size():
    offenders = [p for p in (CONF / "model").rglob("*.yaml") if "vocab_size:" in p.read_text()]
    assert not offenders, f"model configs must get vocab_size from the data: {offenders}"


@pytest.mark.parametrize("debug", sorted(p.stem for p in (CONF / "debug").glob("*.yaml")))
def test_debug_configs_compose_after_an_experiment(compose, debug):
    cfg = compose(["+experiment=gpt_nano_char", f"+debug={debug}"])
    assert cfg.trainer.max_steps <= 200 and cfg.logger.wandb.mode == "disabled"
