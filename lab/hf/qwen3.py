"""lab GPT in the Llama layout with QK-norm -> transformers' Qwen3ForCausalLM: Llama's tensors under Llama's names
(lab.hf.llama's mapping, grouped-query attention, model.head_dim = head_dim), no biases, plus each layer's
q_norm / k_norm (lab's model.qk_norm: RMSNorm over head_dim before rotary, epsilon rms_norm_eps = model.norm_eps)."""
from __future__ import annotations

from lab.errors import LabError
from lab.hf import llama


class Qwen3(llama.Llama):
    hf_class = "Qwen3ForCausalLM"
    layout = "the Llama layout without biases + model.qk_norm"
    computes = frozenset({"qk_norm"})

    def check(self, model) -> list[str]:
        cfg = model.cfg
        return super().check(model) + (["model.bias=false"] if cfg.bias else []) + ([] if cfg.qk_norm else ["model.qk_norm=true"])

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config, s = super().to_hf(model, meta)
        s |= qk_norms(model)
        del config["mlp_bias"]  # Qwen3's MLP has no biases, and no setting for them; attention_bias is false
        return {**config, "model_type": "qwen3", "use_sliding_window": False, "sliding_window": None}, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """Qwen3ForCausalLM's config.json -> lab.models.gpt.GPT's arguments."""
        refuse_attention_bias(config)
        # a sliding window longer than the context is no window; a shorter one becomes the context (as for Mistral)
        backbone = llama.backbone_arch({**config, "sliding_window": sliding_window(config)})
        return {**backbone, "d_ff": config["intermediate_size"], "bias": False, "qk_norm": True}


def qk_norms(model) -> dict:
    """Each layer's q_norm / k_norm gains (Qwen3's and Apertus's names)."""
    s = {}
    for i, block in enumerate(model.decoder.layers):
        attn, p = block.self_attn, f"model.layers.{i}.self_attn."
        # the gains act on each head's features, which the export reorders for the half-split rotary pairs
        # (llama.rotary_to_half; the norm's mean square is order-blind): the gains take the same order
        s[p + "q_norm.weight"] = llama.rotary_to_half(attn.q_norm.weight, 1)
        s[p + "k_norm.weight"] = llama.rotary_to_half(attn.k_norm.weight, 1)
    return s


def sliding_window(config: dict) -> int | None:
    """The window Qwen3's layers use: none unless use_sliding_window, and then only on the layers layer_types
    (or, in older files, max_window_layers: the layers from it on) marks as sliding."""
    if not config.get("use_sliding_window", False) or config.get("sliding_window") is None:
        return None
    n = config["num_hidden_layers"]
    types = config.get("layer_types") or ["sliding_attention" if i >= config.get("max_window_layers", n) else
                                          "full_attention" for i in range(n)]
    return config["sliding_window"] if "sliding_attention" in types else None


def refuse_attention_bias(config: dict) -> None:
    """attention_bias=true in a family whose MLP has no biases (Qwen3, Apertus): one error."""
    if config.get("attention_bias", False):
        raise LabError("config.json has attention_bias=true (biases on the attention only); lab's model.bias puts "
                       "them on the feed-forward layers too, so lab cannot reproduce this model")
