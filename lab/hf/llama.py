"""lab GPT in the Llama layout (rotary, RMSNorm, SwiGLU) -> transformers' LlamaForCausalLM."""
from __future__ import annotations

import logging

import torch

from lab.errors import LabError
from lab.hf.family import Family, mismatches, setting

log = logging.getLogger("lab")


class Llama(Family):
    hf_class, auto_class, kind = "LlamaForCausalLM", "AutoModelForCausalLM", "lm"
    layout = "pre-norm rmsnorm, rotary positions, swiglu FFN, no MoE, unscaled embeddings"

    def check(self, model) -> list[str]:
        return mismatches(model.cfg, {"positions": "rotary", "norm": "rmsnorm", "norm_placement": "pre", "ffn": "swiglu",
                                      "scale_embeddings": False, "moe": None})

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        cfg = model.cfg
        s = backbone(model)
        for i, block in enumerate(model.decoder.layers):
            p, ffn = f"model.layers.{i}.mlp.", block.ffn
            gate, up = ffn.gate_up.weight.split(cfg.d_ff)  # lab: silu(first half) * second half
            s[p + "gate_proj.weight"], s[p + "up_proj.weight"], s[p + "down_proj.weight"] = gate, up, ffn.down.weight
            if cfg.bias:
                gb, ub = ffn.gate_up.bias.split(cfg.d_ff)
                s[p + "gate_proj.bias"], s[p + "up_proj.bias"], s[p + "down_proj.bias"] = gb, ub, ffn.down.bias
        config = {"model_type": "llama", "intermediate_size": cfg.d_ff, "mlp_bias": bool(cfg.bias), **backbone_config(model)}
        return config, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """LlamaForCausalLM's config.json -> lab.models.gpt.GPT's arguments."""
        bias = bool(config.get("attention_bias", False))
        setting(config, "mlp_bias", (bias,), False)  # lab's model.bias is both or neither
        return {**backbone_arch(config), "d_ff": config["intermediate_size"], "bias": bias}


def rotary_to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """lab rotates interleaved feature pairs (0,1), (2,3), ... of each head; Llama rotates (i, i + hd/2).
    Reordering each head's q and k output features to [0, 2, 4, ..., 1, 3, 5, ...] maps one onto the other
    (q·k is unchanged by a permutation applied to both). w: [H * hd, ...] (weight rows or bias)."""
    hd = w.shape[0] // n_heads
    order = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])
    return w.reshape(n_heads, hd, *w.shape[1:])[:, order].reshape(w.shape)


def backbone(model) -> dict:
    """Embeddings, attention, norms and the output layer (everything but the feed-forward blocks)."""
    cfg = model.cfg
    H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    sizes = [H * hd, KV * hd, KV * hd]  # queries, then n_kv_heads key and value heads
    s = {"model.embed_tokens.weight": model.embed.tokens.weight}
    for i, block in enumerate(model.decoder.layers):
        p = f"model.layers.{i}."
        attn = block.self_attn
        q, k, v = attn.qkv_proj.weight.split(sizes)
        s[p + "self_attn.q_proj.weight"], s[p + "self_attn.k_proj.weight"] = rotary_to_half(q, H), rotary_to_half(k, KV)
        s[p + "self_attn.v_proj.weight"], s[p + "self_attn.o_proj.weight"] = v, attn.out_proj.weight
        if cfg.bias:
            qb, kb, vb = attn.qkv_proj.bias.split(sizes)
            s[p + "self_attn.q_proj.bias"], s[p + "self_attn.k_proj.bias"] = rotary_to_half(qb, H), rotary_to_half(kb, KV)
            s[p + "self_attn.v_proj.bias"], s[p + "self_attn.o_proj.bias"] = vb, attn.out_proj.bias
        s[p + "input_layernorm.weight"], s[p + "post_attention_layernorm.weight"] = block.norm_attn.weight, block.norm_ffn.weight
    s["model.norm.weight"] = model.decoder.final_norm.weight
    s["lm_head.weight"] = model.lm_head.weight
    return s


def backbone_config(model) -> dict:
    cfg = model.cfg
    rope = rope_parameters(cfg)
    # Llama 3.1's released config.json form too (rope_theta + rope_scaling): transformers 4, vLLM and llama.cpp's
    # converter read that; transformers 5 reads either (rope_scaling first), and both say the same
    legacy = {} if cfg.rope_scaling is None else {"rope_scaling": {k: v for k, v in rope.items() if k != "rope_theta"}}
    return {
        **legacy,
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base, "rope_parameters": rope,
        "attention_bias": bool(cfg.bias), "attention_dropout": cfg.dropout,
        "tie_word_embeddings": bool(cfg.tie_embeddings), "use_cache": True,
    }


def rope_parameters(cfg) -> dict:
    """model.rope_base and model.rope_scaling as transformers' rope_parameters: rope_type default, or llama3."""
    if cfg.rope_scaling is None:
        return {"rope_type": "default", "rope_theta": cfg.rope_base}
    r = cfg.rope_scaling
    return {"rope_type": "llama3", "rope_theta": cfg.rope_base, "factor": r["factor"],
            "low_freq_factor": r["low_freq_factor"], "high_freq_factor": r["high_freq_factor"],
            "original_max_position_embeddings": int(r["original_max_len"])}


def backbone_arch(config: dict, ffns: dict | None = None, act: str = "silu") -> dict:
    """The Llama backbone's config.json fields -> lab's settings; refused where lab's layers differ.
    ffns: the family's hidden_act -> lab's model.ffn (None: Llama's silu -> swiglu); act: hidden_act's default."""
    D, H = config["hidden_size"], config["num_attention_heads"]
    ffns = ffns or {"silu": "swiglu"}
    ffn = ffns[setting(config, "hidden_act", tuple(ffns), act)]
    # transformers 5 writes rope_parameters; older files rope_theta and rope_scaling (type or rope_type)
    rope = config.get("rope_parameters") or {**(config.get("rope_scaling") or {}),
                                             "rope_theta": config.get("rope_theta", 10000.0)}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "llama3"):
        raise LabError(f"config.json has rotary settings {rope}; lab's rotary positions have a base (rope_theta) "
                       "and Llama 3.1's scaling (rope_type llama3), no other")
    scaling = None if kind == "default" else {  # a missing number: TransformerConfig's one error names them all
        "factor": rope.get("factor"), "low_freq_factor": rope.get("low_freq_factor"),
        "high_freq_factor": rope.get("high_freq_factor"),
        "original_max_len": rope.get("original_max_position_embeddings", config["max_position_embeddings"])}
    length, window = config["max_position_embeddings"], config.get("sliding_window")
    if window is not None and window < length:  # within `window` positions the window hides nothing
        log.info("config.json has sliding_window=%d < max_position_embeddings=%d: imported with model.max_seq_len=%d "
                 "(lab's attention sees its whole context, which the window then never cuts)", window, length, window)
        length = window
    return {"vocab_size": config["vocab_size"], "d_model": D, "n_layers": config["num_hidden_layers"], "n_heads": H,
            "n_kv_heads": config.get("num_key_value_heads") or H,  # grouped-query attention (Llama 3, Mistral)
            "head_dim": config.get("head_dim") or D // H,  # Qwen3's (and some Llama-style files') own width
            "max_seq_len": length, "dropout": float(config.get("attention_dropout", 0.0)),
            "norm_eps": float(config.get("rms_norm_eps", 1e-6)), "rope_base": float(rope.get("rope_theta", 10000.0)),
            "rope_scaling": scaling,
            "positions": "rotary", "norm": "rmsnorm", "norm_placement": "pre", "ffn": ffn, "scale_embeddings": False,
            "tie_embeddings": bool(config.get("tie_word_embeddings", False))}

