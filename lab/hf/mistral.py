"""lab GPT in the Llama layout without biases -> transformers' MistralForCausalLM: Llama's tensors under Llama's
names (lab.hf.llama's mapping), grouped-query attention, no biases. A model both classes reproduce is exported
as LlamaForCausalLM (exported_as); this family reads Mistral's checkpoints."""
from __future__ import annotations

from lab.hf import llama


class Mistral(llama.Llama):
    hf_class = "MistralForCausalLM"
    layout = "the Llama layout without biases"
    exported_as = "LlamaForCausalLM"

    def check(self, model) -> list[str]:
        return super().check(model) + (["model.bias=false"] if model.cfg.bias else [])

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config, s = super().to_hf(model, meta)
        for key in ("attention_bias", "mlp_bias"):  # Mistral's layers have no biases, and no setting for them
            del config[key]
        return {**config, "model_type": "mistral", "sliding_window": None}, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """MistralForCausalLM's config.json -> lab.models.gpt.GPT's arguments."""
        return {**llama.backbone_arch(config), "d_ff": config["intermediate_size"], "bias": False}
