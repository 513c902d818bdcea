"""Export a lab checkpoint to the Hugging Face format: model.safetensors + config.json (+ generation_config.json)
+ tokenizer files, loadable with `transformers` and no lab installed.

One module per target family: each has `check(model) -> list[str]` (the fields that keep the model from being
reproduced exactly; empty when it can be) and `convert(model, meta) -> (config dict, state dict)`. The first
family whose check passes is used; when none does, one error names the fields and the nearest layout.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from lab.errors import LabError
from lab.runtime.export import bert, gpt2, llama, marian, mixtral, tokenizer

log = logging.getLogger("lab")

# (class name, module), tried in order, per kind of lab model.
LM_FAMILIES = (("GPT2LMHeadModel", gpt2), ("LlamaForCausalLM", llama), ("MixtralForCausalLM", mixtral))
SEQ2SEQ_FAMILIES = (("MarianMTModel", marian),)
MLM_FAMILIES = (("BertForMaskedLM", bert),)
CLASSIFIER_FAMILIES = (("BertForSequenceClassification", bert),)


def lab_only(model) -> list[str]:
    """Options of lab's that no exported family computes (every family needs them off)."""
    missing = ["model.qk_norm=false"] if model.cfg.qk_norm else []
    return missing + (["model.logit_softcap=null"] if getattr(model, "softcap", None) is not None else [])


def pick_family(model, families):
    problems = {}
    for name, family in families:
        missing = family.check(model) + lab_only(model)
        if not missing:
            return name, family
        problems[name] = missing
    # adding or removing the mixture of experts is a bigger change than any setting: count it as several
    distance = lambda n: sum(5 if m.startswith(("model.moe=None", "model.moe (")) else 1 for m in problems[n])  # noqa: E731
    nearest = min(problems, key=distance)
    raise LabError(
        f"no Hugging Face class reproduces this model exactly; nearest: {nearest}, which needs "
        + "; ".join(problems[nearest])
        + ". Supported layouts: " + "; ".join(f"{n}: {f.LAYOUT}" for n, f in families)
    )


def export(model, tok, meta: dict, out_dir: Path) -> str:
    """Write the model, its config and its tokenizer into out_dir; -> the HF class name."""
    if hasattr(model, "encode") and hasattr(model, "bos_id"):
        families, ids = SEQ2SEQ_FAMILIES, {"pad": model.pad_id, "bos": model.bos_id, "eos": model.eos_id}
    elif hasattr(model, "lm_head") and hasattr(model, "new_caches"):
        eos = tokenizer.special_ids(tok)["eos"]
        families, ids = LM_FAMILIES, {"pad": eos, "bos": eos, "eos": eos}
    elif hasattr(model, "mlm_head") or hasattr(model, "classifier"):
        families = MLM_FAMILIES if hasattr(model, "mlm_head") else CLASSIFIER_FAMILIES
        pad, mask = model.encoder.pad_id, getattr(model, "mask_id", None)
        ids = {"pad": pad, "mask": mask, **{k: tok.token_id(t) for k, t in (("cls", "[CLS]"), ("sep", "[SEP]"), ("unk", "[UNK]"))}}
    else:
        raise LabError(f"lab.export does not know this model ({type(model).__name__})")
    name, family = pick_family(model, families)
    config, state = family.convert(model, meta)
    config.update({"architectures": [name], "torch_dtype": "float32", "vocab_size": tok.vocab_size,
                   **{f"{k}_token_id": ids[k] for k in ("bos", "eos", "pad") if ids.get(k) is not None}})
    out_dir.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file  # noqa: PLC0415 - the export extra

    # safetensors stores no shared storage: tied weights are written once per name, contiguous
    save_file({k: v.detach().to(torch.float32).contiguous().clone() for k, v in state.items()},
              str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if "eos" in ids:  # generation settings where the model generates
        generation = {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["pad"], "do_sample": False}
        if "decoder_start_token_id" in config:
            generation |= {"decoder_start_token_id": config["decoder_start_token_id"], "forced_eos_token_id": ids["eos"]}
        (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tokenizer.write(tok, out_dir, max_length=model.cfg.max_seq_len, specials=ids)
    return name
