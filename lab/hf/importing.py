"""Hugging Face model directories into lab: config.json -> lab's model settings (each family's `config_from_hf`),
and the weights through the very mapping that exports them (each family's `to_hf`), run backwards tensor by tensor
(lab.hf.mapping), so import and export are one mapping and a round trip lab -> HF -> lab is bit-exact by
construction. The model is built with meta parameters, given memory in the run's dtype, and filled from the
memory-mapped safetensors one tensor at a time: no copy of the checkpoint or of the model. Only safetensors and
JSON are read: nothing in the directory runs code."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from lab.data.spm_files import spm_file
from lab.data.tokenizers import HFTokenizer, tokenizer_from_hf_dir
from lab.errors import LabError
from lab.hf.exporting import as_typed
from lab.hf.family import Family
from lab.hf.mapping import fill, materialise, parameters_on_meta, trace
from lab.hf.registry import MODELS, kind_of
from lab.hf.shape import STARTS, family_of, refuse_kind
from lab.hf.weights import SHARDS, Weights
from lab.nn.moe import MixtureOfExperts

log = logging.getLogger("lab")

FILES = ("config.json, model.safetensors and tokenizer.json (or a sentencepiece tokenizer.model, or Marian's "
         "source.spm + vocab.json)")


@dataclass
class Imported:
    model: torch.nn.Module
    tokenizer: object
    hf_class: str
    config: dict  # the directory's config.json


def read_dir(path: str | Path) -> tuple[Path, dict]:
    """-> (directory, config.json); one LabError naming what is missing."""
    p = Path(str(path)).expanduser()
    if not p.is_dir():
        raise LabError(f"{p} is not a directory; give a Hugging Face model directory with {FILES}")
    weights = "model.safetensors" if not (p / SHARDS).is_file() else SHARDS
    missing = [f for f in ("config.json", weights, "tokenizer.json") if not (p / f).is_file()
               and not (f == "tokenizer.json" and spm_file(p))]
    if missing:
        hint = " (or model.safetensors.index.json and its shards; lab reads no pickled pytorch_model.bin: save the " \
               "model with save_pretrained(dir, safe_serialization=True))" if weights in missing else ""
        raise LabError(f"{p} lacks {', '.join(missing)}; lab reads a Hugging Face directory with {FILES}{hint}")
    try:
        config = json.loads((p / "config.json").read_text())
    except ValueError as e:
        raise LabError(f"{p / 'config.json'} is not JSON ({e})") from e
    return p, config


def read_weights(path: Path) -> Weights:
    """model.safetensors, or the shards model.safetensors.index.json names, read one tensor at a time in the
    file's dtype (a context manager: `with read_weights(p) as weights`)."""
    return Weights(path)


def skeleton(family: Family, config: dict, state, tok) -> torch.nn.Module:
    """The directory's lab model with meta parameters (no memory; computed buffers real): what the mapping is
    traced on and the settings compared with."""
    with parameters_on_meta():
        return MODELS[family.kind](**family.config_from_hf(config, state, tok))


def load(path: str | Path, dtype: torch.dtype | None = None) -> Imported:
    """A Hugging Face model directory -> lab's model (eval mode) and tokenizer. dtype: the parameters' (None: the
    checkpoint's). Memory: the model in dtype, plus one file tensor at a time."""
    p, config = read_dir(path)
    family, tok = family_of(p, config), tokenizer_from_hf_dir(p)
    with read_weights(p) as weights:
        state = family.fold(weights, config)
        model, dtype = skeleton(family, config, state, tok), dtype or weights.dtype()
        materialise(model, dtype)  # before the tracing's short-lived tensors, which then never sit between its own
        plan = trace(skeleton(family, config, state, tok), family)
        params = dict(model.named_parameters())
        fill(params, plan, state, str(p), set(params))
    model.to(dtype)  # the computed tables too, as .to() gives a model built in code
    log.info("imported %s from %s: %d parameters (%s)", family.hf_class, p, sum(t.numel() for t in params.values()),
             str(dtype).removeprefix("torch."))
    return Imported(model.eval(), tok, family.hf_class, config)


def is_hf_dir(path: str) -> bool:
    p = Path(str(path)).expanduser()
    return p.is_dir() and (p / "config.json").is_file()


TRAINING_ONLY = ("dropout", "init_std", "embed_init_std", "moe")  # settings that leave the function (and the weights) as they are
DERIVED = ("n_kv_heads", "head_dim", "norm_eps", "d_ff")  # null: TransformerConfig resolves them from the others
MOE_FUNCTION = ("num_experts", "top_k", "expert_hidden", "gate", "router", "num_shared")


def differences(model, other) -> list[str]:
    """The model.* settings (as "model.k=v") that make model compute another function than other. A derived
    setting (DERIVED) equal to model's is named too when others are: null in the run's config resolves anew from
    the pasted ones (model.head_dim stays 32 only if said when d_model changes), unless other's value is what
    null gives."""
    typed = lambda v: "{" + ",".join(f"{k}:{x}" for k, x in v.items()) + "}" if isinstance(v, dict) else v  # noqa: E731
    mine, theirs = vars(model.cfg), vars(other.cfg)
    changed = {k for k, v in theirs.items() if k not in TRAINING_ONLY and mine[k] != v}
    anew = lambda k: theirs[k] != vars(replace(other.cfg, **{k: None}))[k]  # noqa: E731
    diffs = [f"model.{k}={typed(v)}" for k, v in theirs.items()
             if k in changed or (changed and k in DERIVED and anew(k))]
    mine, theirs = model.cfg.moe, other.cfg.moe
    if (mine is None) != (theirs is None):
        diffs.append("model.moe=null" if theirs is None else f"model.moe={{{', '.join(f'{k}: {getattr(theirs, k)}' for k in MOE_FUNCTION)}}}")
    elif theirs is not None:
        def value(layer, k: str):  # expert_hidden=None means d_ff: compare the width the experts have
            return layer.experts.w_out.shape[-1] if k == "expert_hidden" else vars(layer.moe)[k]

        first = lambda m: next(b.ffn for b in m.decoder.layers if isinstance(b.ffn, MixtureOfExperts))  # noqa: E731 - every_n > 1: dense ones first
        mine, theirs = first(model), first(other)
        diffs += [f"model.moe.{k}={value(theirs, k)}" for k in MOE_FUNCTION if value(mine, k) != value(theirs, k)]
    return diffs


def vocabulary(tok) -> dict[str, int]:
    return tok.backend.get_vocab(with_added_tokens=True) if isinstance(tok, HFTokenizer) else {s: i for i, s in enumerate(tok.itos)}


def build_to_fill(build: Callable[[], torch.nn.Module], init_from: str | None, resuming: bool) -> torch.nn.Module:
    """lab.train's model. When model.init_from will overwrite every parameter (an LM, masked LM or translator
    that is not resuming: init_from refuses a directory that lacks one), built with meta parameters and given
    uninitialised memory in each one's dtype: no time goes into a random initialisation the checkpoint replaces.
    A classifier, whose new head starts from init, is built as usual (so is every other run)."""
    if not init_from or resuming:
        return build()
    with parameters_on_meta():
        model = build()
    if kind_of(model) == "encoder":
        return build()  # the meta build drew no random numbers: the head's init is the usual one
    materialise(model)
    return model


def init_from(model, path: str, meta: dict) -> None:
    """model.init_from=<Hugging Face directory>: its weights into the task's model before training, one file tensor
    at a time. The model's settings must be the directory's (lab.hf.shape.decide makes them so in lab.train; else
    one error with the overrides to type) and so must the data's tokenizer; a classifier takes the encoder (and
    BERT's pooler when pooling=bert) and keeps its new head for the data's labels. Said in one line: what was
    loaded, what starts from init."""
    p, config = read_dir(path)
    family, tok = family_of(p, config), tokenizer_from_hf_dir(p)
    kind = kind_of(model)
    if family.kind not in STARTS[kind]:
        raise refuse_kind(path, family.hf_class, type(model).__name__)
    with read_weights(p) as weights:
        state = family.fold(weights, config)
        theirs = skeleton(family, config, state, tok)
        keys = set(((meta or {}).get("config") or {}).get("model") or {}) or None
        hints = [as_typed(h, keys) for h in differences(model, theirs)]
        if hints:
            raise LabError(f"model.init_from={path} is a {family.hf_class} with other settings than this model's; "
                           f"add {' '.join(hints)}")
        if (meta or {}).get("tokenizer"):
            from lab.data.tokenizers import tokenizer_from_json  # noqa: PLC0415

            if vocabulary(tokenizer_from_json(meta["tokenizer"])) != vocabulary(tok):
                raise LabError(f"model.init_from={path}: the data's tokenizer is not the model's (other vocabulary); "
                               f"read the data with it: data.tokenizer_from={path}")
        specials = lambda m: {"pad_id": m.pad_id, "bos_id": m.bos_id, "eos_id": m.eos_id} if kind == "seq2seq" else {}  # noqa: E731
        ids = [f"{k}={v} (the model's: {specials(theirs)[k]})" for k, v in specials(model).items() if v != specials(theirs)[k]]
        if ids:  # a translator's specials come from the data: the same vocabulary may number them otherwise
            raise LabError(f"model.init_from={path}: the data's special tokens are not the model's: {', '.join(ids)}; "
                           f"read the data with its tokenizer: data.tokenizer_from={path}")
        own, src = dict(model.named_parameters()), dict(theirs.named_parameters())
        head = ("classifier.",) if kind == "encoder" else ()
        loaded = [k for k in own if k in src and not k.startswith(head) and own[k].shape == src[k].shape]
        new = [k for k in own if k not in loaded]
        if not head and new:  # an LM or translator takes every tensor
            raise LabError(f"model.init_from={path} lacks {', '.join(new[:4])} for this model")
        fill(own, trace(theirs, family), state, path, set(loaded))
    log.info("init_from %s (%s): loaded %d tensors; new (trained from init): %s", path, family.hf_class,
             len(loaded), ", ".join(new) or "-")
