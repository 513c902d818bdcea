"""Hugging Face model directories into lab: config.json -> lab's model settings (each family's `config_from_hf`),
and the weights through the very mapping that exports them (each family's `to_hf`), run backwards.

The export mappings are pure rearrangements (split, transpose, reorder, stack; constant zeros where lab has no
parameter). Running `to_hf` on a copy of the lab model whose every parameter element holds its own number
(1, 2, 3, ...) gives, for each Hugging Face tensor element, the lab element it comes from (0: a constant zero).
Importing gathers each lab element from where its number landed, so import and export are one mapping and a
round trip lab -> HF -> lab is bit-exact by construction. Two checks keep an import from being silently wrong:
where lab writes a constant zero the file must hold zeros, and where lab writes one parameter under two names
(tied embeddings) the file's two copies must be equal. Only safetensors and JSON are read: nothing in the
directory runs code."""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from lab.data.tokenizers import HFTokenizer, tokenizer_from_hf_dir
from lab.errors import LabError
from lab.hf.exporting import as_typed
from lab.hf.family import Family
from lab.hf.registry import MODELS, kind_of
from lab.hf.shape import STARTS, family_of, refuse_kind
from lab.hf.weights import SHARDS, Weights
from lab.nn.moe import MixtureOfExperts

log = logging.getLogger("lab")

FILES = "config.json, model.safetensors and tokenizer.json"


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
    missing = [f for f in ("config.json", weights, "tokenizer.json") if not (p / f).is_file()]
    if missing:
        hint = " (or model.safetensors.index.json and its shards; lab reads no pickled pytorch_model.bin: save the " \
               "model with save_pretrained(dir, safe_serialization=True))" if weights in missing else ""
        raise LabError(f"{p} lacks {', '.join(missing)}; lab reads a Hugging Face directory with {FILES}{hint}")
    try:
        config = json.loads((p / "config.json").read_text())
    except ValueError as e:
        raise LabError(f"{p / 'config.json'} is not JSON ({e})") from e
    return p, config


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, or the shards model.safetensors.index.json names, as float32 tensors."""
    with Weights(path) as weights:
        return {k: weights[k].float() for k in weights}


def traced(model: torch.nn.Module) -> tuple[torch.nn.Module, dict[str, tuple[int, int]]]:
    """A float64 copy of model whose parameters hold 1, 2, 3, ... (element numbers, exact up to 2^53), and
    {parameter name: (first number, count)}. Tied parameters are one parameter: one range."""
    copy_ = copy.deepcopy(model).to(torch.float64)
    ranges, start = {}, 1
    with torch.no_grad():
        for name, p in copy_.named_parameters():
            p.copy_(torch.arange(start, start + p.numel(), dtype=torch.float64).view_as(p))
            ranges[name], start = (start, p.numel()), start + p.numel()
    return copy_, ranges


def load_state(model: torch.nn.Module, family: Family, state: dict[str, torch.Tensor], source: str,
               only: str | None = None) -> list[str]:
    """Copy a Hugging Face state dict into model through family.to_hf (model -> (config, HF state)) run backwards.
    only: a parameter-name prefix (a classifier takes "encoder." and keeps its new head). -> the names loaded.
    Refuses in one line, before changing anything, when a tensor is missing or has another shape, when the file
    holds non-zero values where lab's layout has none, or two different copies of one lab parameter."""
    copy_, ranges = traced(model)
    with torch.no_grad():
        _, ids = family.to_hf(copy_, {})
    wanted = {n: r for n, r in ranges.items() if only is None or n.startswith(only)}
    shapes = [f"{k}: file {tuple(state[k].shape)} vs lab {tuple(v.shape)}" for k, v in ids.items()
              if k in state and tuple(state[k].shape) != tuple(v.shape)]
    if shapes:
        raise LabError(f"{source}: tensors of other shapes than its config.json says: {'; '.join(shapes[:3])}")
    present = [k for k in ids if k in state]
    src_ids = torch.cat([ids[k].reshape(-1) for k in present]).long()
    src = torch.cat([state[k].reshape(-1) for k in present])
    owner = torch.repeat_interleave(torch.arange(len(present)), torch.tensor([ids[k].numel() for k in present]))
    where = torch.full((max(s + n for s, n in ranges.values()),), -1, dtype=torch.long)
    where[src_ids] = torch.arange(len(src_ids))  # an element's position in src (the last copy of a tied one)
    zeros = (src_ids == 0) & (src != 0)
    if zeros.any():
        names = sorted({present[i] for i in owner[zeros].tolist()})
        raise LabError(f"{source}: {', '.join(names[:4])} hold non-zero values where lab's model has no parameter "
                       "(e.g. a bias lab's layout lacks); lab cannot reproduce this model exactly")
    real = src_ids > 0
    copies = real & (src != src[where[src_ids].clamp(min=0)])
    if copies.any():
        names = sorted({present[i] for i in owner[copies].tolist()})
        raise LabError(f"{source}: {', '.join(names[:4])} differ from another tensor lab keeps as one parameter "
                       "(tied embeddings); set tie_word_embeddings=false in its config.json if they are separate")
    missing = sorted({n for n, (s, c) in wanted.items() if (where[s : s + c] < 0).any()})
    if missing:
        absent = sorted(k for k in ids if k not in state)
        raise LabError(f"{source}: model.safetensors lacks {', '.join(absent[:4]) or 'tensors'} for lab's "
                       f"{', '.join(missing[:4])}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, (s, c) in wanted.items():
            params[n].copy_(src[where[s : s + c]].view_as(params[n]))
    unused = sorted(set(state) - set(ids))
    if unused:
        log.info("%s: %d tensor(s) lab's model has no place for, not loaded: %s", source, len(unused),
                 ", ".join(unused[:6]) + (", ..." if len(unused) > 6 else ""))
    return list(wanted)


def load(path: str | Path) -> Imported:
    """A Hugging Face model directory -> lab's model (eval mode, float32) and tokenizer."""
    p, config = read_dir(path)
    family = family_of(p, config)
    name = family.hf_class
    state, tok = read_weights(p), tokenizer_from_hf_dir(p)
    state = family.fold(state, config)
    model = MODELS[family.kind](**family.config_from_hf(config, state, tok))
    load_state(model, family, state, str(p))
    log.info("imported %s from %s: %d parameters", name, p, sum(t.numel() for t in model.parameters()))
    return Imported(model.eval(), tok, name, config)


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


def init_from(model, path: str, meta: dict) -> None:
    """model.init_from=<Hugging Face directory>: its weights into the task's model before training. The model's
    settings must be the directory's (else one error with the overrides to type) and so must the data's tokenizer;
    a classifier takes the encoder (and BERT's pooler when pooling=bert) and keeps its new head for the data's
    labels. Said in one line: what was loaded, what starts from init."""
    imported = load(path)
    kind = kind_of(model)
    if kind_of(imported.model) not in STARTS[kind]:
        raise refuse_kind(path, imported.hf_class, type(model).__name__)
    keys = set(((meta or {}).get("config") or {}).get("model") or {}) or None
    hints = [as_typed(h, keys) for h in differences(model, imported.model)]
    if hints:
        raise LabError(f"model.init_from={path} is a {imported.hf_class} with other settings than this model's; "
                       f"add {' '.join(hints)}")
    if (meta or {}).get("tokenizer"):
        from lab.data.tokenizers import tokenizer_from_json  # noqa: PLC0415

        if vocabulary(tokenizer_from_json(meta["tokenizer"])) != vocabulary(imported.tokenizer):
            raise LabError(f"model.init_from={path}: the data's tokenizer is not the model's (other vocabulary); read "
                           f"the data with it: data.tokenizer_from={path}")
    specials = lambda m: {"pad_id": m.pad_id, "bos_id": m.bos_id, "eos_id": m.eos_id} if kind == "seq2seq" else {}  # noqa: E731
    theirs = specials(imported.model)
    ids = [f"{k}={v} (the model's: {theirs[k]})" for k, v in specials(model).items() if v != theirs[k]]
    if ids:  # a translator's specials come from the data: the same vocabulary may number them otherwise
        raise LabError(f"model.init_from={path}: the data's special tokens are not the model's: {', '.join(ids)}; read "
                       f"the data with its tokenizer: data.tokenizer_from={path}")
    own, src = model.state_dict(), imported.model.state_dict()
    head = ("classifier.",) if kind == "encoder" else ()
    loaded = [k for k in own if k in src and not k.startswith(head) and own[k].shape == src[k].shape]
    new = [k for k in own if k not in loaded]
    if not head and new:  # an LM or translator takes every tensor
        raise LabError(f"model.init_from={path} lacks {', '.join(new[:4])} for this model")
    with torch.no_grad():
        for k in loaded:
            own[k].copy_(src[k])
    log.info("init_from %s (%s): loaded %d tensors; new (trained from init): %s", path, imported.hf_class,
             len(loaded), ", ".join(new) or "-")
