"""lab GPT in the Llama layout (rotary, RMSNorm, SwiGLU) -> transformers' LlamaForCausalLM."""
from __future__ import annotations

import torch

LAYOUT = "pre-norm rmsnorm, rotary positions, swiglu FFN, no MoE, unscaled embeddings"
RMS_EPS = 1e-6  # lab.nn.norms.RMSNorm's default


def check(model) -> list[str]:
    cfg = model.cfg
    wanted = {"positions": "rotary", "norm": "rmsnorm", "norm_placement": "pre", "ffn": "swiglu",
              "scale_embeddings": False, "moe": None}
    return [f"model.{k}={v}" for k, v in wanted.items() if getattr(cfg, k) != v]


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
    D, H = cfg.d_model, cfg.n_heads
    s = {"model.embed_tokens.weight": model.embed.tokens.weight}
    for i, block in enumerate(model.decoder.layers):
        p = f"model.layers.{i}."
        attn = block.self_attn
        q, k, v = attn.qkv_proj.weight.split(D)
        s[p + "self_attn.q_proj.weight"], s[p + "self_attn.k_proj.weight"] = rotary_to_half(q, H), rotary_to_half(k, H)
        s[p + "self_attn.v_proj.weight"], s[p + "self_attn.o_proj.weight"] = v, attn.out_proj.weight
        if cfg.bias:
            qb, kb, vb = attn.qkv_proj.bias.split(D)
            s[p + "self_attn.q_proj.bias"], s[p + "self_attn.k_proj.bias"] = rotary_to_half(qb, H), rotary_to_half(kb, H)
            s[p + "self_attn.v_proj.bias"], s[p + "self_attn.o_proj.bias"] = vb, attn.out_proj.bias
        s[p + "input_layernorm.weight"], s[p + "post_attention_layernorm.weight"] = block.norm_attn.weight, block.norm_ffn.weight
    s["model.norm.weight"] = model.decoder.final_norm.weight
    s["lm_head.weight"] = model.lm_head.weight
    return s


def backbone_config(model) -> dict:
    cfg = model.cfg
    return {
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": RMS_EPS,
        "rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": bool(cfg.bias), "attention_dropout": cfg.dropout,
        "tie_word_embeddings": bool(cfg.tie_embeddings), "use_cache": True,
    }


def convert(model, meta: dict) -> tuple[dict, dict]:
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
