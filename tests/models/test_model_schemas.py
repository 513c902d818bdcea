"""The model's typed schemas (lab.runtime.cli.schemas): one source for every model field and default, which the
constructors, conf/model and saved checkpoints agree with."""
from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import torch
from conftest import CONF
from hydra.utils import get_class
from omegaconf import OmegaConf, open_dict

from lab.errors import ConfigError
from lab.models import build_model
from lab.nn import TransformerConfig
from lab.runtime.cli.schemas import SCHEMAS

MODEL_SCHEMAS = {name: schema for (group, name), schema in SCHEMAS.items() if group == "model"}
ARCH = {f.name for f in dataclasses.fields(TransformerConfig)}
DATA_FACTS = {"vocab_size", "pad_id", "bos_id", "eos_id", "mask_id", "num_labels"}


@pytest.mark.parametrize("name", sorted(MODEL_SCHEMAS))
def test_a_schema_declares_exactly_its_models_keywords_with_the_same_defaults(name):
    """The schema's own fields are the constructor's keywords (the data's facts aside), default for default, so a
    model built in Python and one composed from conf/ agree; the architecture is TransformerConfig's."""
    schema = MODEL_SCHEMAS[name]
    params = inspect.signature(get_class(schema._target_)).parameters
    own = {k: p.default for k, p in params.items() if k not in {"arch"} | DATA_FACTS}
    fields = {f.name: f.default for f in dataclasses.fields(schema) if f.name not in ARCH and f.name != "_target_"}
    assert own == fields
    assert "arch" in params  # the rest: TransformerConfig's fields


@pytest.mark.parametrize("name", sorted(MODEL_SCHEMAS))
def test_conf_model_files_set_only_what_differs_from_the_schema(name):
    schema = OmegaConf.structured(MODEL_SCHEMAS[name])
    own = OmegaConf.load(CONF / "model" / f"{name}.yaml")
    assert list(own.defaults) == [f"/schema/model/{name}@_here_", "_self_"]
    repeated = [k for k in own if k != "defaults" and own[k] == schema[k]]
    assert not repeated, f"conf/model/{name}.yaml repeats the schema's defaults: {repeated}"


def test_a_checkpoint_config_written_before_the_schemas_builds_the_same_model(compose):
    """A saved run's config as lab wrote it before the schemas (conf/model/gpt.yaml's keys, model.moe a partial
    mapping) rebuilds the model the composed schema builds: same parameters, same values from the same seed."""
    old = {"_target_": "lab.models.gpt.GPT", "init_from": None, "d_model": 32, "n_layers": 2, "n_heads": 4,
           "n_kv_heads": None, "head_dim": None, "d_ff": None, "dropout": 0.0, "bias": True, "norm": "layernorm",
           "norm_placement": "pre", "norm_eps": None, "positions": "learned", "rope_base": 10000.0,
           "relative_buckets": 32, "relative_max_distance": 128, "rope_scaling": None, "ffn": "gelu",
           "max_seq_len": 64, "tie_embeddings": True, "scale_embeddings": False, "output_scale": False,
           "attention_scale": None, "init_std": 0.02, "embed_init_std": None, "qk_norm": False,
           "moe": {"num_experts": 4, "top_k": 1}, "logit_softcap": None, "zero_init_proj": False}
    new = compose(["model.d_model=32", "model.n_layers=2", "model.max_seq_len=64",
                   "model.moe={num_experts:4,top_k:1}"]).model
    models = []
    for cfg in (OmegaConf.create(old), new):
        torch.manual_seed(0)
        models.append(build_model(cfg, {"vocab_size": 50}))
    before, now = (m.state_dict() for m in models)
    assert list(before) == list(now) and all(torch.equal(before[k], now[k]) for k in before)
    assert models[0].cfg == models[1].cfg and models[1].cfg.moe.top_k == 1


@pytest.mark.parametrize("override,line", [
    ("model.d_model=abc", "model.d_model='abc' must be an integer; set model.d_model=<that> on the command line"),
    ("model.logit_softcap=big", "model.logit_softcap='big' must be a number or null; set"),
    ("model.nlayer=2", "model.nlayer is not a config key; did you mean model.n_layers?"),
    ("model.relative_bucket=8", "model.relative_bucket is not a config key; did you mean model.relative_buckets?"),
    ("+model.embed_norm=true", "model.embed_norm is already a config key: give it without the +, model.embed_norm=true"),
    ("model.moe.top_kk=1", "model.moe.top_kk is not a config key; did you mean model.moe.top_k?"),
])
def test_composition_errors_on_model_keys_are_one_line(compose, override, line):
    """OmegaConf's refusals (a type, an unknown key) in lab's words, the schema's fields as suggestions."""
    from lab.runtime.cli.errors import hydra_error_line

    setup = ["model.moe={num_experts:2}"] if override.startswith("model.moe.") else []
    with pytest.raises(Exception) as e:
        compose([*setup, override])
    assert hydra_error_line(e.value).startswith(line)


@pytest.mark.parametrize("schema,fields,message", [
    ("gpt", {"n_layers": 0}, "model.n_layers=0 must be an integer >= 1"),
    ("gpt", {"logit_softcap": 0.0}, "model.logit_softcap=0.0 must be a number in (0, inf) or null"),
    ("encoder_classifier", {"classifier_dropout": 1.0}, "model.classifier_dropout=1.0 must be a probability in [0, 1)"),
    ("gpt", {"moe": {"num_experts": 2, "top_k": 3}}, "model.moe.top_k=3: must be between 1 and num_experts=2"),
    ("gpt", {"moe": {"num_experts": "abc"}}, "model.moe.num_experts='abc' must be an integer"),
    ("gpt", {"moe": {"top_k": True}}, "model.moe.top_k=True must be an integer"),
    ("gpt", {"moe": {"renormalize": 1}}, "model.moe.renormalize=1 must be true or false or null"),
])
def test_a_schema_refuses_what_its_types_cannot(schema, fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        MODEL_SCHEMAS[schema](**fields)


def test_the_cli_checks_run_the_models_schema_before_anything_is_built(compose):
    from lab.runtime.cli.config_checks import check_config

    cfg = compose(["+experiment=encoder_classifier", "paths.output_dir=/tmp/x", "model.classifier_dropout=1.5"])
    with open_dict(cfg):
        del cfg["hydra"]
    with pytest.raises(ConfigError, match=re.escape("model.classifier_dropout=1.5 must be a probability in [0, 1)")):
        check_config(cfg)


@pytest.mark.parametrize("model,line", [
    ("logit_softcp: 30", "model.logit_softcp (set in conf/experiment/bad.yaml) is not a field of GPTConfig; did you mean "
                         "model.logit_softcap?; remove it there"),
    ("d_model: wide", "model.d_model='wide' in conf/experiment/bad.yaml must be an integer; fix it there"),
])
def test_a_conf_file_value_the_schema_refuses_names_the_file(tmp_path, model, line):
    import shutil

    from hydra import compose, initialize_config_dir

    from lab.runtime.cli.errors import hydra_error_line

    conf = shutil.copytree(CONF, tmp_path / "conf")
    (conf / "experiment" / "bad.yaml").write_text(f"# @package _global_\ndefaults:\n  - gpt_small\n  - _self_\n"
                                                  f"model:\n  {model}\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"), pytest.raises(Exception) as e:
        compose("train", overrides=["+experiment=bad"])
    assert hydra_error_line(e.value) == line
