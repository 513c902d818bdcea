"""lab GPT in the GPT-2 layout -> transformers' GPT2LMHeadModel."""
from __future__ import annotations

import torch

from lab.hf.family import Family, bias_of, has_bias, mismatches, setting

ACTIVATION = {"gelu": "gelu_new", "gelu_erf": "gelu"}  # lab's FFN -> GPT-2's activation_function (tanh / exact)
BIASES = ("ln_1", "ln_2", "c_attn", "c_proj", "c_fc", "ln_f")  # the layers lab's model.bias switches


def _t(linear) -> torch.Tensor:
    """GPT-2's Conv1D stores [in, out]: the transpose of nn.Linear's weight."""
    return linear.weight.t()


class GPT2(Family):
    hf_class, auto_class, kind = "GPT2LMHeadModel", "AutoModelForCausalLM", "lm"
    layout = "pre-norm layernorm, learned positions, gelu FFN, no MoE, unscaled embeddings"

    def check(self, model) -> list[str]:
        cfg = model.cfg
        missing = mismatches(cfg, {
            "positions": "learned", "norm": "layernorm", "norm_placement": "pre", "scale_embeddings": False, "moe": None,
            "n_kv_heads": cfg.n_heads,  # one key/value head per query head: GPT-2 has no grouped-query attention
            "head_dim": cfg.d_model // cfg.n_heads})  # heads d_model / n_heads wide (no head_dim setting)
        return missing + ([] if cfg.ffn in ACTIVATION else ["model.ffn=gelu"])

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        return to_hf(model)

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """GPT2LMHeadModel's config.json -> lab.models.gpt.GPT's arguments (the inverse of to_hf's config)."""
        act = setting(config, "activation_function", ("gelu_new", "gelu_pytorch_tanh", "gelu"), "gelu_new")
        setting(config, "scale_attn_by_inverse_layer_idx", (False,), False)
        D = config["n_embd"]
        return {"vocab_size": config["vocab_size"], "d_model": D, "n_layers": config["n_layer"], "n_heads": config["n_head"],
                "d_ff": config.get("n_inner") or 4 * D, "max_seq_len": config["n_positions"],
                "dropout": float(config.get("resid_pdrop", 0.0)), "positions": "learned", "norm": "layernorm",
                "norm_placement": "pre", "ffn": "gelu_erf" if act == "gelu" else "gelu", "scale_embeddings": False,
                "norm_eps": float(config.get("layer_norm_epsilon", 1e-5)),
                "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
                "bias": has_bias(state, lambda k: k.endswith(".bias") and k.split(".")[-2] in BIASES)}


def to_hf(model) -> tuple[dict, dict]:
    cfg = model.cfg
    D = cfg.d_model
    s = {"transformer.wte.weight": model.embed.tokens.weight, "transformer.wpe.weight": model.embed.positions.weight}
    for i, block in enumerate(model.decoder.layers):
        p = f"transformer.h.{i}."
        s[p + "ln_1.weight"], s[p + "ln_1.bias"] = block.norm_attn.weight, bias_of(block.norm_attn, D)
        s[p + "attn.c_attn.weight"] = _t(block.self_attn.qkv_proj)  # q, k, v blocks of D rows each, as GPT-2 splits
        s[p + "attn.c_attn.bias"] = bias_of(block.self_attn.qkv_proj, 3 * D)
        s[p + "attn.c_proj.weight"], s[p + "attn.c_proj.bias"] = _t(block.self_attn.out_proj), bias_of(block.self_attn.out_proj, D)
        s[p + "ln_2.weight"], s[p + "ln_2.bias"] = block.norm_ffn.weight, bias_of(block.norm_ffn, D)
        s[p + "mlp.c_fc.weight"], s[p + "mlp.c_fc.bias"] = _t(block.ffn.up), bias_of(block.ffn.up, cfg.d_ff)
        s[p + "mlp.c_proj.weight"], s[p + "mlp.c_proj.bias"] = _t(block.ffn.down), bias_of(block.ffn.down, D)
    s["transformer.ln_f.weight"], s["transformer.ln_f.bias"] = model.decoder.final_norm.weight, bias_of(model.decoder.final_norm, D)
    s["lm_head.weight"] = model.lm_head.weight
    config = {
        "model_type": "gpt2", "n_embd": D, "n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_inner": cfg.d_ff,
        "n_positions": cfg.max_seq_len, "n_ctx": cfg.max_seq_len,
        "activation_function": ACTIVATION[cfg.ffn],
        "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout,
        "scale_attn_weights": True, "tie_word_embeddings": bool(cfg.tie_embeddings), "use_cache": True,
    }
    return config, s
