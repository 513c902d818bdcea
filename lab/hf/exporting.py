"""lab models in and out of the Hugging Face format. Export: model.safetensors + config.json
(+ generation_config.json) + tokenizer files, loadable with `transformers` and no lab installed. Import
(lab.hf.importing): such a directory into lab's model and tokenizer, through the same mappings.

One module per target family: each has `check(model) -> list[str]` (the fields that keep the model from being
reproduced exactly; empty when it can be), `convert(model, meta) -> (config dict, state dict)` (a pure
rearrangement of the weights, which import runs backwards) and `arch(config, state, name, tok)` (config.json ->
lab's model arguments). The first family whose check passes is used; when none does, one error names the fields
and the nearest layout.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.checkpoints.reading import trained_length as from_config
from lab.errors import LabError
from lab.hf import apertus, bert, gpt2, llama, marian, mistral, mixtral, pegasus, qwen3, switch, t5, tokenizer

log = logging.getLogger("lab")

# (class name, module), tried in order, per kind of lab model.
LM_FAMILIES = (("GPT2LMHeadModel", gpt2), ("LlamaForCausalLM", llama), ("MixtralForCausalLM", mixtral),
               ("MistralForCausalLM", mistral),  # after Llama: exports of its layout are LlamaForCausalLM
               ("Qwen3ForCausalLM", qwen3),  # the Llama layout + model.qk_norm
               ("ApertusForCausalLM", apertus))  # gpt_*_fast's: QK-norm and a non-gated FFN (ReLU²)
SEQ2SEQ_FAMILIES = (("MarianMTModel", marian), ("PegasusForConditionalGeneration", pegasus),
                    ("T5ForConditionalGeneration", t5),  # relative position bias, RMSNorm, no biases
                    ("SwitchTransformersForConditionalGeneration", switch))  # T5's layout + Switch experts
MLM_FAMILIES = (("BertForMaskedLM", bert),)
CLASSIFIER_FAMILIES = (("BertForSequenceClassification", bert),)


AUTO_CLASSES = {"GPT2LMHeadModel": "AutoModelForCausalLM", "LlamaForCausalLM": "AutoModelForCausalLM",
                "MixtralForCausalLM": "AutoModelForCausalLM", "MistralForCausalLM": "AutoModelForCausalLM",
                "Qwen3ForCausalLM": "AutoModelForCausalLM", "ApertusForCausalLM": "AutoModelForCausalLM",
                "MarianMTModel": "AutoModelForSeq2SeqLM",
                "PegasusForConditionalGeneration": "AutoModelForSeq2SeqLM",
                "T5ForConditionalGeneration": "AutoModelForSeq2SeqLM",
                "SwitchTransformersForConditionalGeneration": "AutoModelForSeq2SeqLM",
                "BertForMaskedLM": "AutoModelForMaskedLM", "BertForSequenceClassification": "AutoModelForSequenceClassification"}


def _builders():
    from lab.models.encoder import EncoderClassifier, MaskedLM  # noqa: PLC0415
    from lab.models.gpt import GPT  # noqa: PLC0415
    from lab.models.seq2seq import EncoderDecoder  # noqa: PLC0415

    return {"lm": lambda kw: GPT(**kw), "seq2seq": lambda kw: EncoderDecoder(**kw), "mlm": lambda kw: MaskedLM(**kw),
            "encoder": lambda kw: EncoderClassifier(**kw)}


# Hugging Face class -> (family module, kind of lab model): what lab.hf.importing.load reads
IMPORTS = {name: (family, kind) for kind, families in
           (("lm", LM_FAMILIES), ("seq2seq", SEQ2SEQ_FAMILIES), ("mlm", MLM_FAMILIES), ("encoder", CLASSIFIER_FAMILIES))
           for name, family in families}


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


def lab_only(model, family) -> list[str]:
    """Options of lab's that no exported family computes (every family needs them off), and qk_norm and
    output_scale, which only a family with QK_NORM / OUTPUT_SCALE computes."""
    missing = ["model.qk_norm=false"] if model.cfg.qk_norm and not getattr(family, "QK_NORM", False) else []
    if model.cfg.output_scale and not getattr(family, "OUTPUT_SCALE", False):
        missing.append("model.output_scale=false")
    return missing + (["model.logit_softcap=null"] if getattr(model, "softcap", None) is not None else [])


def pick_family(model, families, model_keys=None):
    problems = {}
    for name, family in families:
        missing = family.check(model) + lab_only(model, family)
        if not missing:
            return name, family
        problems[name] = [as_typed(m, model_keys) for m in missing]
    # adding or removing the mixture of experts or QK-norm is a bigger change than all the settings of a layout together
    big = ("model.moe=null", "model.moe (", "model.qk_norm=", "+model.qk_norm=")
    distance = lambda n: sum(10 if m.startswith(big) else 1 for m in problems[n])  # noqa: E731
    nearest = min(problems, key=distance)
    raise LabError(
        f"no Hugging Face class reproduces this model exactly; nearest: {nearest}, which needs "
        + " ".join(problems[nearest])
        + ". Supported layouts: " + "; ".join(f"{n}: {f.LAYOUT}" for n, f in families)
    )


def kind_of(model) -> str:
    """lm | seq2seq | mlm | encoder (the classifier): which families, specials and tokenizer rules apply."""
    if hasattr(model, "encode") and hasattr(model, "bos_id"):
        return "seq2seq"
    if hasattr(model, "lm_head") and hasattr(model, "new_caches"):
        return "lm"
    if hasattr(model, "mlm_head"):
        return "mlm"
    if hasattr(model, "classifier"):
        return "encoder"
    raise LabError(f"lab.export does not know this model ({type(model).__name__})")


FAMILIES = {"lm": LM_FAMILIES, "seq2seq": SEQ2SEQ_FAMILIES, "mlm": MLM_FAMILIES, "encoder": CLASSIFIER_FAMILIES}


def special_token_ids(model, tok, kind: str) -> dict[str, int | None]:
    if kind == "seq2seq":
        return {"pad": model.pad_id, "bos": model.bos_id, "eos": model.eos_id}
    if kind == "lm":
        eos = tokenizer.special_ids(tok)["eos"]
        return {"pad": eos, "bos": eos, "eos": eos}
    ids = {k: tok.token_id(t) for k, t in (("cls", "[CLS]"), ("sep", "[SEP]"), ("unk", "[UNK]"))}
    return {"pad": model.encoder.pad_id, "mask": getattr(model, "mask_id", None), **ids}


def trained_length(model, meta: dict) -> int:
    """The length the model was trained on (data.max_length / block_size / max_tokens, at most max_seq_len);
    the model's max_seq_len when the metadata has no config (a model built in code)."""
    return from_config(meta) if meta.get("config") else model.cfg.max_seq_len


def export(model, tok, meta: dict, out_dir: Path) -> Exported:
    """Write the model, its config and its tokenizer into out_dir; nothing when no class reproduces it."""
    kind = kind_of(model)
    ids = special_token_ids(model, tok, kind)
    model_keys = set((meta.get("config") or {}).get("model") or {}) or None
    name, family = pick_family(model, FAMILIES[kind], model_keys)
    config, state = family.convert(model, meta)
    config.update({"architectures": [name], "torch_dtype": "float32", "vocab_size": tok.vocab_size,
                   **{f"{k}_token_id": ids[k] for k in ("bos", "eos", "pad") if ids.get(k) is not None}})
    out_dir.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file  # noqa: PLC0415 - the export extra

    # safetensors stores no shared storage: tied weights are written once per name, contiguous
    save_file({k: v.detach().to(torch.float32).contiguous().clone() for k, v in state.items()},
              str(out_dir / "model.safetensors"), metadata={"format": "pt"})
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
    return Exported(name, AUTO_CLASSES[name], files)
