"""lab GPT in the Llama layout without biases -> transformers' MistralForCausalLM: Llama's tensors under Llama's
names (lab.hf.llama's mapping), grouped-query attention, no biases. Export writes the Llama class (the
first family that fits); this one reads Mistral's checkpoints."""
from __future__ import annotations

from lab.hf import llama

LAYOUT = "the Llama layout without biases"


def check(model) -> list[str]:
    return llama.check(model) + (["model.bias=false"] if model.cfg.bias else [])


def convert(model, meta: dict) -> tuple[dict, dict]:
    config, s = llama.convert(model, meta)
    for key in ("attention_bias", "mlp_bias"):  # Mistral's layers have no biases, and no setting for them
        del config[key]
    return {**config, "model_type": "mistral", "sliding_window": None}, s


def arch(config: dict, state: dict, name: str, tok) -> dict:
    """MistralForCausalLM's config.json -> lab.models.gpt.GPT's arguments."""
    return {**llama.backbone_arch(config), "d_ff": config["intermediate_size"], "bias": False}
