"""lab's translator in the "Attention Is All You Need" layout (post-norm, sinusoidal positions, shared
embeddings) -> transformers' MarianMTModel."""
from __future__ import annotations

import torch

from lab.errors import LabError
from lab.hf.family import Family, bias_of, has_bias, mismatches, setting


class Marian(Family):
    hf_class, auto_class, kind = "MarianMTModel", "AutoModelForSeq2SeqLM", "seq2seq"
    layout = "post-norm layernorm, sinusoidal positions, relu or gelu FFN, shared source/target embeddings, no MoE"

    def check(self, model) -> list[str]:
        cfg = model.cfg
        missing = mismatches(cfg, {
            "positions": "sinusoidal", "norm": "layernorm", "norm_placement": "post", "moe": None,
            "norm_eps": 1e-5,  # Marian's and Pegasus' layer norms have PyTorch's epsilon (no setting)
            "n_kv_heads": cfg.n_heads,  # and one key/value head per query head
            "head_dim": cfg.d_model // cfg.n_heads})  # heads d_model / n_heads wide (no head_dim setting)
        if cfg.ffn not in ACTIVATION:
            missing.append("model.ffn=relu")  # or gelu
        if model.tgt_embed.tokens.weight is not model.src_embed.tokens.weight:
            missing.append("model.share_embeddings=true")
        return missing

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        return convert_layers(model, "marian")

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """MarianMTModel's config.json -> lab.models.seq2seq.EncoderDecoder's arguments."""
        return layers_arch(config, state, "post")


ACTIVATION = {"relu": "relu", "gelu": "gelu_new", "gelu_erf": "gelu", "silu": "swish"}  # lab's FFN -> activation_function


def hidden_order(d: int) -> torch.Tensor:
    """lab's sinusoidal table interleaves sin (even features) and cos (odd); Marian's puts the sines in the
    first half and the cosines in the second. Reordering the hidden features of the whole model [0, 2, 4,
    ..., 1, 3, 5, ...] maps one onto the other exactly: layer norms are order-free, and every weight that
    reads or writes the residual stream is reordered along that side."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def convert_layers(model, model_type: str) -> tuple[dict, dict]:
    """The BART-family encoder-decoder both Marian and Pegasus are: every layer, the shared embedding, lm_head
    and the config fields they share (Pegasus adds its final norms)."""
    cfg = model.cfg
    D = cfg.d_model
    order = hidden_order(D)
    reads = lambda w: w[:, order]  # noqa: E731 - a Linear whose input is the residual stream
    writes = lambda w: w[order]  # noqa: E731 - a Linear's output rows / a bias / a norm on the stream

    def norm(prefix: str, m) -> dict:
        return {prefix + ".weight": writes(m.weight), prefix + ".bias": writes(bias_of(m, D))}

    def ffn(prefix: str, f) -> dict:
        return {prefix + "fc1.weight": reads(f.up.weight), prefix + "fc1.bias": bias_of(f.up, cfg.d_ff),
                prefix + "fc2.weight": writes(f.down.weight), prefix + "fc2.bias": writes(bias_of(f.down, D))}

    def self_attn(prefix: str, a) -> dict:
        q, k, v = reads(a.qkv_proj.weight).split(D)
        qb, kb, vb = bias_of(a.qkv_proj, 3 * D).split(D)
        return {prefix + "q_proj.weight": q, prefix + "k_proj.weight": k, prefix + "v_proj.weight": v,
                prefix + "q_proj.bias": qb, prefix + "k_proj.bias": kb, prefix + "v_proj.bias": vb,
                prefix + "out_proj.weight": writes(a.out_proj.weight), prefix + "out_proj.bias": writes(bias_of(a.out_proj, D))}

    def cross_attn(prefix: str, a) -> dict:
        k, v = reads(a.kv_proj.weight).split(D)  # keys and values read the encoder output, reordered the same way
        kb, vb = bias_of(a.kv_proj, 2 * D).split(D)
        return {prefix + "q_proj.weight": reads(a.q_proj.weight), prefix + "q_proj.bias": bias_of(a.q_proj, D),
                prefix + "k_proj.weight": k, prefix + "k_proj.bias": kb, prefix + "v_proj.weight": v, prefix + "v_proj.bias": vb,
                prefix + "out_proj.weight": writes(a.out_proj.weight), prefix + "out_proj.bias": writes(bias_of(a.out_proj, D))}

    embed = reads(model.src_embed.tokens.weight)
    s = {"model.shared.weight": embed, "model.encoder.embed_tokens.weight": embed, "model.decoder.embed_tokens.weight": embed}
    for i, b in enumerate(model.encoder.layers):
        p = f"model.encoder.layers.{i}."
        s |= self_attn(p + "self_attn.", b.self_attn) | norm(p + "self_attn_layer_norm", b.norm_attn)
        s |= ffn(p, b.ffn) | norm(p + "final_layer_norm", b.norm_ffn)
    for i, b in enumerate(model.decoder.layers):
        p = f"model.decoder.layers.{i}."
        s |= self_attn(p + "self_attn.", b.self_attn) | norm(p + "self_attn_layer_norm", b.norm_attn)
        s |= cross_attn(p + "encoder_attn.", b.cross_attn) | norm(p + "encoder_attn_layer_norm", b.norm_cross)
        s |= ffn(p, b.ffn) | norm(p + "final_layer_norm", b.norm_ffn)
    # the positional tables are recomputed by Marian itself (in its own order); lab's lm_head may be untied
    s["lm_head.weight"] = reads(model.lm_head.weight)
    s["final_logits_bias"] = torch.zeros(1, model.vocab_size)
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        if not isinstance(stack.final_norm, torch.nn.Identity):  # pre-norm: the norm after the last layer
            s |= norm(f"model.{side}.layer_norm", stack.final_norm)
    config = {
        "model_type": model_type, "is_encoder_decoder": True, "d_model": D,
        "encoder_layers": cfg.n_layers, "decoder_layers": cfg.n_layers,
        "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATION[cfg.ffn],
        "max_position_embeddings": cfg.max_seq_len, "scale_embedding": bool(cfg.scale_embeddings),
        "dropout": cfg.dropout, "attention_dropout": 0.0, "activation_dropout": 0.0,
        "share_encoder_decoder_embeddings": True, "tie_word_embeddings": bool(cfg.tie_embeddings),
        "decoder_vocab_size": model.vocab_size, "pad_token_id": model.pad_id, "eos_token_id": model.eos_id,
        "bos_token_id": model.bos_id, "decoder_start_token_id": model.bos_id, "forced_eos_token_id": model.eos_id,
        "use_cache": True,
    }
    return config, s


def layers_arch(config: dict, state: dict, norm_placement: str) -> dict:
    """The config.json fields Marian and Pegasus share -> EncoderDecoder's arguments."""
    act = setting(config, "activation_function", ("relu", "gelu_new", "gelu_pytorch_tanh", "gelu", "swish", "silu"), "gelu")
    setting(config, "share_encoder_decoder_embeddings", (True,), True)
    sides = {k: (config[f"encoder_{k}"], config[f"decoder_{k}"]) for k in ("layers", "attention_heads", "ffn_dim")}
    if any(a != b for a, b in sides.values()):
        raise LabError(f"config.json's encoder and decoder differ ({sides}); lab's translator has one setting for "
                       "both sides")
    return {"vocab_size": config["vocab_size"], "pad_id": config["pad_token_id"], "eos_id": config["eos_token_id"],
            "bos_id": config.get("decoder_start_token_id", config["pad_token_id"]), "share_embeddings": True,
            "d_model": config["d_model"], "n_layers": sides["layers"][0], "n_heads": sides["attention_heads"][0],
            "d_ff": sides["ffn_dim"][0], "max_seq_len": config["max_position_embeddings"],
            "dropout": float(config.get("dropout", 0.1)), "positions": "sinusoidal", "norm": "layernorm",
            "norm_placement": norm_placement, "ffn": {"relu": "relu", "gelu": "gelu_erf", "swish": "silu", "silu": "silu"}.get(act, "gelu"),
            "scale_embeddings": bool(config.get("scale_embedding", False)),
            "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
            "bias": has_bias(state, lambda k: k.startswith("model.") and k.endswith(".bias"))}
