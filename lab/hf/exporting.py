"""lab models into the Hugging Face format: model.safetensors + config.json (+ generation_config.json) +
tokenizer files, loadable with `transformers` and no lab installed, through the family (lab.hf.registry) that
reproduces the model exactly; when none does, one error names the fields and the nearest layout. Import
(lab.hf.importing) reads such a directory back through the same mappings."""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from lab.checkpoints.reading import trained_length as from_config
from lab.errors import LabError
from lab.hf import tokenizer
from lab.hf.family import Family, Kind
from lab.hf.registry import families, kind_of
from lab.models.gpt import GPT
from lab.nn.mup import at_base

log = logging.getLogger("lab")


@dataclass
class Exported:
    """What lab.export wrote: the transformers class, the Auto class that loads it, the file names."""

    hf_class: str
    auto_class: str
    files: list[str]


def as_typed(override: str, model_keys) -> str:
    """A family's "model.k=v" as a user types it on the command line: YAML's true/false/null, and Hydra's "+"
    for a key the run's model config does not have (model_keys: that config's keys; None: unknown)."""
    override = re.sub(r"=(True|False|None)\b", lambda m: "=" + {"True": "true", "False": "false", "None": "null"}[m[1]],
                      override)
    key = override.removeprefix("model.").split("=")[0].split(".")[0].split(" ")[0]
    return "+" + override if model_keys is not None and "=" in override and key not in model_keys else override


def lab_only(model, family: Family) -> list[str]:
    """Options of lab's that no exported family computes (every family needs them off), and qk_norm and
    output_scale, which only a family that says it computes them (Family.computes) does."""
    missing = ["model.qk_norm=false"] if model.cfg.qk_norm and "qk_norm" not in family.computes else []
    if model.cfg.output_scale and "output_scale" not in family.computes:
        missing.append("model.output_scale=false")
    softcap = isinstance(model, GPT) and model.softcap is not None
    return missing + (["model.logit_softcap=null"] if softcap else [])


def pick_family(model, candidates: tuple[Family, ...], model_keys=None) -> Family:
    """The family that reproduces the model exactly (of two, the one the other is exported as), else one
    LabError naming the nearest layout's missing settings (ties: the first in the registry's order)."""
    problems, fit = {}, []
    for family in candidates:
        missing = family.check(model) + lab_only(model, family)
        if not missing:
            fit.append(family)
        problems[family.hf_class] = [as_typed(m, model_keys) for m in missing]
    names = {f.hf_class for f in fit}
    fit = [f for f in fit if f.exported_as not in names]
    if len(fit) > 1:
        raise RuntimeError(f"{', '.join(f.hf_class for f in fit)} all reproduce this model: declare which one "
                           "exports it (Family.exported_as)")
    if fit:
        return fit[0]
    # adding or removing the mixture of experts or QK-norm is a bigger change than all the settings of a layout together
    big = ("model.moe=null", "model.moe (", "model.qk_norm=", "+model.qk_norm=")
    distance = lambda n: sum(10 if m.startswith(big) else 1 for m in problems[n])  # noqa: E731
    nearest = min(problems, key=distance)
    raise LabError(
        f"no Hugging Face class reproduces this model exactly; nearest: {nearest}, which needs "
        + " ".join(problems[nearest])
        + ". Supported layouts: " + "; ".join(f"{f.hf_class}: {f.layout}" for f in candidates)
    )


def special_token_ids(model, tok, kind: Kind) -> dict[str, int | None]:
    if kind == "seq2seq":
        return {"pad": model.pad_id, "bos": model.bos_id, "eos": model.eos_id}
    if kind == "lm":
        eos = tokenizer.special_ids(tok)["eos"]
        return {"pad": eos, "bos": eos, "eos": eos}
    ids = {k: tok.token_id(t) for k, t in (("cls", "[CLS]"), ("sep", "[SEP]"), ("unk", "[UNK]"))}
    return {"pad": model.encoder.pad_id, "mask": model.mask_id if kind == "mlm" else None, **ids}


def trained_length(model, meta: dict) -> int:
    """The length the model was trained on (data.max_length / block_size / max_tokens, at most max_seq_len);
    the model's max_seq_len when the metadata has no config (a model built in code)."""
    return from_config(meta) if meta.get("config") else model.cfg.max_seq_len


def export(model, tok, meta: dict, out_dir: Path) -> Exported:
    """Write the model, its config and its tokenizer into out_dir; nothing when no class reproduces it."""
    kind = kind_of(model)
    if not at_base(model.cfg):
        raise LabError("model.parametrization=mup away from its base shape: transformers' classes have no 1/head_dim "
                       "attention scale nor µP's output multiplier, so lab does not export it (docs/mup.md)")
    ids = special_token_ids(model, tok, kind)
    model_keys = set((meta.get("config") or {}).get("model") or {}) or None
    family = pick_family(model, families(kind), model_keys)
    config, state = family.to_hf(model, meta)
    dtype = next(model.parameters()).dtype  # the model's: a bf16 model is written in bf16
    config.update({"architectures": [family.hf_class], "torch_dtype": str(dtype).removeprefix("torch."),
                   "vocab_size": tok.vocab_size,
                   **{f"{k}_token_id": ids[k] for k in ("bos", "eos", "pad") if ids.get(k) is not None}})
    out_dir.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file  # noqa: PLC0415 - the export extra

    # written from the parameters' own memory: a copy only where the mapping makes one (a transposed or reordered
    # weight, a constant zero of another dtype) and for a tied parameter's second name (safetensors refuses a
    # tensor twice)
    tensors, seen = {}, set()
    for k, v in state.items():
        v = v.detach().to(dtype).contiguous()
        tensors[k] = v.clone() if (v.data_ptr(), v.numel()) in seen else v
        seen.add((v.data_ptr(), v.numel()))
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    files = ["model.safetensors", "config.json"]
    length = trained_length(model, meta)
    if kind in ("lm", "seq2seq"):  # generation settings where the model generates
        generation = {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["pad"], "do_sample": False}
        if "decoder_start_token_id" in config:  # a translation: at most the trained length, as lab.translate
            generation |= {"decoder_start_token_id": config["decoder_start_token_id"], "forced_eos_token_id": ids["eos"],
                           "max_length": length}
        (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        files.append("generation_config.json")
    files += tokenizer.write(tok, out_dir, kind, length, ids)
    return Exported(family.hf_class, family.auto_class, files)
