"""model.init_from=<Hugging Face directory> decides the model's shape: every setting the directory's config.json
determines (through its family's `config_from_hf`) replaces the preset's before the model is built, said in one
log line; a setting the user typed that contradicts the directory is one error naming both values. What the
directory does not determine (dropout, the init, the task's head, the mixture of experts' training terms) stays
the run's. Only config.json, the tokenizer and the bias tensors' values (for families whose biases show only in
the weights) are read here."""
from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from lab.data.tokenizers import tokenizer_from_hf_dir
from lab.errors import LabError
from lab.hf.exporting import as_typed
from lab.hf.family import Family, Kind
from lab.hf.registry import FAMILIES, MODELS, family_named
from lab.hf.weights import Weights
from lab.nn.config import TransformerConfig

log = logging.getLogger("lab")

# constructor arguments that come from the data (lab.models.build_model), never from a model config
DATA = ("vocab_size", "pad_id", "bos_id", "eos_id", "mask_id", "num_labels")
# settings that leave the function as it is: how training starts and regularises, and a classifier's new head
KEPT = ("dropout", "init_std", "embed_init_std", "pooling", "head", "classifier_dropout", "zero_init_proj")
# the mixture of experts' settings that only shape training (the rest decide which experts compute what)
MOE_TRAINING = ("capacity_factor", "load_balance_weight", "load_balance_scope", "z_loss_weight", "jitter", "dispatch")
# the kinds of Hugging Face model each kind of lab model may start from: a classifier takes the encoder of an MLM
# or of a classifier
STARTS: dict[Kind, tuple[Kind, ...]] = {"lm": ("lm",), "seq2seq": ("seq2seq",), "encoder": ("mlm", "encoder"),
                                        "mlm": ("mlm",)}


def family_of(path: str | Path, config: dict) -> Family:
    name = (config.get("architectures") or ["?"])[0]
    family = family_named(name)
    if family is None:
        raise LabError(f"{path}: architecture {name} is not supported; lab imports {', '.join(f.hf_class for f in FAMILIES)}")
    return family


def refuse_kind(path: str, hf_class: str, model_name: str) -> LabError:
    starts = "; ".join(", ".join(f.hf_class for f in FAMILIES if f.kind in kinds) + f" -> the {what}"
                       for what, kinds in (("LM", STARTS["lm"]), ("MLM", STARTS["mlm"]), ("classifier", STARTS["encoder"]),
                                           ("translator", STARTS["seq2seq"])))
    return LabError(f"model.init_from={path} is a {hf_class}, which a {model_name} cannot start from; {starts}")


def settings(family: Family, config: dict, weights, tok) -> dict[str, Any]:
    """The directory's model settings as model.* keys: config_from_hf's arguments with every architecture setting
    it leaves out at lab's default (the directory's model has no QK-norm, softcap, ... unless its family says so)."""
    args = family.config_from_hf(config, weights, tok)
    arch = {f.name for f in fields(TransformerConfig)}
    resolved = vars(TransformerConfig.from_kwargs(**{k: v for k, v in args.items() if k in arch}))
    out = {k: v for k, v in resolved.items() if k != "moe"}
    out["moe"] = args.get("moe")  # as config_from_hf wrote it (MoEConfig's keys); None: a dense model
    out["logit_softcap"] = None  # no family computes a soft-capped logit (lab.hf.exporting.lab_only)
    out |= {k: v for k, v in args.items() if k not in arch}
    if out["positions"] != "relative":  # T5's bucket settings mean nothing to other positions
        del out["relative_buckets"], out["relative_max_distance"]
    return {k: v for k, v in out.items() if k not in DATA and k not in KEPT}


def given_keys(overrides: list[str]) -> set[str]:
    """The model.* keys a command line sets (model.moe.top_k=2 -> "moe.top_k"; +, ++ and ~ as Hydra reads them)."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    return {k.removeprefix("model.") for k in keys if k.startswith("model.")}


def command_line() -> list[str]:
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def decide(model_cfg: DictConfig, overrides: list[str] | None = None) -> dict[str, Any]:
    """model_cfg with model.init_from=<Hugging Face directory>: the directory's settings written into it (in
    place). overrides: the command line (None: Hydra's). -> {key: value} taken; {} when init_from is no HF dir."""
    path = model_cfg.get("init_from")
    p = Path(str(path or "")).expanduser()
    if not path or not (p / "config.json").is_file():
        return {}
    from lab.hf.importing import read_dir  # noqa: PLC0415

    p, config = read_dir(p)
    family = family_of(p, config)
    target = str(model_cfg.get("_target_"))
    kind = next(k for k, cls in MODELS.items() if f"{cls.__module__}.{cls.__name__}" == target)
    if family.kind not in STARTS[kind]:
        raise refuse_kind(str(path), family.hf_class, target.rsplit(".", 1)[-1])
    with Weights(p) as weights:
        theirs = settings(family, config, family.fold(weights, config), tokenizer_from_hf_dir(p))
    mine = OmegaConf.to_container(model_cfg, resolve=True)
    taken = {k: v for k, v in theirs.items() if k in mine}
    moe = taken.get("moe")
    if moe is not None and mine.get("moe"):  # the run's training terms for the directory's experts
        taken["moe"] = {**moe, **{k: mine["moe"][k] for k in MOE_TRAINING if k in mine["moe"]}}
    typed = given_keys(command_line() if overrides is None else overrides)
    contradicts = [f"model.{k}={value(mine, k)} (the directory's: {value(taken, k)})" for k in sorted(typed)
                   if k.split(".")[0] in taken and not same(value(mine, k), value(taken, k))]
    if contradicts:
        raise LabError(f"model.init_from={path} is a {family.hf_class} whose config.json decides the model's shape; "
                       f"{', '.join(contradicts)}: drop the override")
    with open_dict(model_cfg):
        for k, v in taken.items():
            model_cfg[k] = v
    log.info("model.init_from=%s (%s) decides the model's shape: %s; the rest is the run's", path, family.hf_class,
             " ".join(as_typed(f"model.{k}={v}", None) for k, v in taken.items()))
    return taken


def value(settings_: dict, key: str):
    """A dotted model key's value (moe.top_k: the mixture's top_k; a key of no mixture: None)."""
    head, _, rest = key.partition(".")
    v = settings_.get(head)
    return (v or {}).get(rest) if rest else v


def same(a, b) -> bool:
    return a == b or (isinstance(a, dict) and isinstance(b, dict) and all(same(a.get(k), b.get(k)) for k in b))
