"""lab GPT with RMSNorm, rotary positions, QK-norm and a non-gated FFN (gpt_*_fast's ReLU²) -> transformers'
ApertusForCausalLM: Llama's attention under Llama's names (lab.hf.llama's mapping, grouped-query attention,
model.head_dim), Qwen3's q_norm / k_norm (RMSNorm over head_dim before rotary, epsilon rms_norm_eps =
model.norm_eps), the MLP down_proj(act(up_proj(x))), no biases."""
from __future__ import annotations

from lab.hf import llama, qwen3
from lab.hf.family import Family, mismatches

ACTIVATION = {"relu_squared": "relu2", "relu": "relu", "gelu": "gelu_pytorch_tanh", "gelu_erf": "gelu"}  # -> hidden_act
FFNS = {**{act: ffn for ffn, act in ACTIVATION.items()}, "gelu_new": "gelu"}  # hidden_act -> lab's FFN (both tanh GELUs)
NORMS = {"input_layernorm": "attention_layernorm", "post_attention_layernorm": "feedforward_layernorm"}  # Llama's names
# what ApertusConfig computes with when config.json names no rotary settings (rope_theta alone included)
ROPE = {"rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0, "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0}


class Apertus(Family):
    hf_class, auto_class, kind = "ApertusForCausalLM", "AutoModelForCausalLM", "lm"
    layout = "pre-norm rmsnorm, rotary positions, model.qk_norm, a relu_squared / relu / gelu / gelu_erf FFN, no biases"
    computes = frozenset({"qk_norm"})  # every Apertus layer has q_norm / k_norm

    def check(self, model) -> list[str]:
        cfg = model.cfg
        missing = mismatches(cfg, {"positions": "rotary", "norm": "rmsnorm", "norm_placement": "pre", "scale_embeddings": False,
                                   "moe": None, "bias": False, "qk_norm": True})
        return missing + ([] if cfg.ffn in ACTIVATION else ["model.ffn=relu_squared"])

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        cfg = model.cfg
        s = {".".join(NORMS.get(part, part) for part in k.split(".")): v for k, v in llama.backbone(model).items()}
        s |= qwen3.qk_norms(model)
        for i, block in enumerate(model.decoder.layers):
            p = f"model.layers.{i}.mlp."
            s[p + "up_proj.weight"], s[p + "down_proj.weight"] = block.ffn.up.weight, block.ffn.down.weight
        return {**llama.backbone_config(model), "model_type": "apertus", "hidden_act": ACTIVATION[cfg.ffn],
                "intermediate_size": cfg.d_ff}, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """ApertusForCausalLM's config.json -> lab.models.gpt.GPT's arguments (ApertusConfig's defaults where it
        has no value: epsilon 1e-5, ROPE, hidden_act xielu, which lab refuses)."""
        qwen3.refuse_attention_bias(config)
        if not config.get("rope_parameters") and not config.get("rope_scaling"):
            config = {**config, "rope_parameters": ROPE}
        backbone = llama.backbone_arch({"rms_norm_eps": 1e-5, **config}, FFNS, act="xielu")
        return {**backbone, "d_ff": config["intermediate_size"], "bias": False, "qk_norm": True}
