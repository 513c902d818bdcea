"""Every shipped config composes and builds; overrides reach the objects."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONF
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lab.models import build_model
from lab.runtime.cli.help import exit_with_help

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


# ---- the speedrun recipe (conf/recipe/speedrun.yaml), used by the gpt_*_fast presets and +recipe=speedrun ----

def leaves(node, prefix: str = "") -> dict:
    """{dotted key: value} of every leaf of a container (the hydra node left out)."""
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    return {k: v for key, value in node.items() if key != "hydra" for k, v in leaves(value, f"{prefix}{key}.").items()}


def test_the_recipe_on_gpt_small_is_gpt_small_fast_but_for_its_steps(compose):
    """`+experiment=gpt_small +recipe=speedrun` sets every value of the recipe, and gpt_small_fast is exactly
    gpt_small with the recipe and its own steps. Catches `- /recipe: speedrun` listed before `- gpt_small` in
    gpt_small_fast's defaults (gpt_small's lr 1e-3, warmup 100 and min_lr 1e-4 would win over the recipe)."""
    recipe = {k: v for k, v in leaves(OmegaConf.to_container(OmegaConf.load(CONF / "recipe" / "speedrun.yaml"))).items()
              if not k.startswith("defaults")}  # its defaults list chooses task/optimizer=muon
    applied = leaves(OmegaConf.to_container(compose(["+experiment=gpt_small", "+recipe=speedrun"])))
    preset = leaves(OmegaConf.to_container(compose(["+experiment=gpt_small_fast"])))
    assert len(recipe) == 17
    assert applied["task.optimizer._target_"] == preset["task.optimizer._target_"] == "lab.tasks.optim.MuonAdamW"
    for key, value in recipe.items():
        assert applied[key] == preset[key] == value, key
    assert {k for k in applied.keys() | preset.keys() if applied.get(k) != preset.get(k)} == {
        "name", "trainer.max_steps", "trainer.val_check_interval"}


def test_a_preset_wins_over_its_recipe_and_the_command_line_over_both(compose):
    cfg = compose(["+experiment=gpt_nano_char_fast"])
    assert cfg.task.optimizer.muon_lr == 0.03  # the preset's own value, after the recipe's 0.02
    assert cfg.task.optimizer.lr == 3e-3 and cfg.task.scheduler.min_lr == 0.0  # the recipe's, over gpt_nano_char's
    assert cfg.task.optimizer.betas == [0.9, 0.99] and cfg.trainer.gradient_clip_val == 1.0  # gpt_nano_char's
    cfg = compose(["+experiment=gpt_nano_char_fast", "task.optimizer.muon_lr=0.05", "model.qk_norm=false"])
    assert cfg.task.optimizer.muon_lr == 0.05 and cfg.model.qk_norm is False
    cfg = compose(["+experiment=gpt_small", "+recipe=speedrun", "task.scheduler.warmup_steps=7"])
    assert cfg.task.scheduler.warmup_steps == 7 and cfg.task.optimizer.lr == 3e-3
    assert compose(["+experiment=gpt2_small_fast_gpu"]).task.scheduler.warmup_steps == 100


def test_a_recipe_before_its_preset_is_refused_with_one_line(capsys):
    """Hydra applies +recipe before +experiment in that order: the preset would silently undo the recipe."""
    with pytest.raises(SystemExit) as exit_:
        exit_with_help("train", ["+recipe=speedrun", "+experiment=gpt_small", "trainer.max_steps=5"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("error: +recipe=speedrun comes before +experiment=gpt_small: Hydra applies them "
                                       "in that order, so the preset would override the recipe; put +recipe=... after "
                                       "+experiment=...\n")
    exit_with_help("train", ["+experiment=gpt_small", "+recipe=speedrun"])  # the right order: no help, no error
    exit_with_help("train", ["+recipe=speedrun"])  # on the primary config alone
