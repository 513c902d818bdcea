"""lab's translator in T5's layout -> transformers' T5ForConditionalGeneration (Raffel et al. 2020): pre-norm
RMSNorm, no biases, T5's relative position bias (one table per stack, lab.nn.positions.RelativePositionBias),
unscaled attention (model.attention_scale=1.0), one shared unscaled token embedding, ReLU or GELU FFNs. The
stacks' mapping is shared with SwitchTransformers (lab.hf.switch), which adds experts.

The output projection: T5 scales the decoder output by d_model^-0.5 before it (lab's model.output_scale) unless
config.json says scale_decoder_outputs=false (transformers 5; older configs, and transformers 4, say it with
tie_word_embeddings=false), and transformers 5 ties it to the shared embedding always: the export writes both
flags from model.output_scale and needs model.tie_embeddings=true."""
from __future__ import annotations

import logging
from collections import ChainMap

import torch

from lab.errors import LabError
from lab.hf.family import Family, mismatches, setting

log = logging.getLogger("lab")

ACTIVATION = {"relu": "relu", "gelu": "gelu_new", "gelu_erf": "gelu"}  # lab's FFN -> T5's feed_forward_proj


class T5(Family):
    hf_class, auto_class, kind = "T5ForConditionalGeneration", "AutoModelForSeq2SeqLM", "seq2seq"
    layout = ("pre-norm rmsnorm, relative positions (T5's bias), attention_scale=1.0, relu, gelu or gelu_erf FFN, no "
              "biases, shared unscaled tied embeddings, output_scale either way, no MoE")
    computes = frozenset({"output_scale"})

    def check(self, model) -> list[str]:
        missing = backbone_check(model)
        if model.cfg.ffn not in ACTIVATION:
            missing.append("model.ffn=relu")  # or gelu, gelu_erf
        if not model.cfg.tie_embeddings:
            missing.append("model.tie_embeddings=true")  # transformers 5 ties T5's lm_head to the shared embedding
        return missing + (["model.moe=null"] if model.cfg.moe is not None else [])

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config = {**backbone_config(model), "model_type": "t5", "feed_forward_proj": ACTIVATION[model.cfg.ffn],
                  "scale_decoder_outputs": bool(model.cfg.output_scale)}
        return config, stacks(model, "DenseReluDense", dense)

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """T5ForConditionalGeneration's config.json -> EncoderDecoder's arguments (T5 v1.0's ReLU, or a GELU; the
        gated FFNs of T5 v1.1 and Flan-T5 are refused)."""
        act = setting(config, "feed_forward_proj", tuple(ACTIVATION.values()), "relu")
        return {**backbone_arch(config, state, scales_output(config)), "ffn": {v: k for k, v in ACTIVATION.items()}[act]}

    def fold(self, state: dict, config: dict) -> dict:
        return tie_output(state)


def backbone_check(model) -> list[str]:
    """The fields T5 and Switch both need (everything but the feed-forward blocks)."""
    cfg = model.cfg
    missing = mismatches(cfg, {"positions": "relative", "norm": "rmsnorm", "norm_placement": "pre", "bias": False,
                               "attention_scale": 1.0, "scale_embeddings": False, "embed_norm": False,
                               "n_kv_heads": cfg.n_heads})  # one key/value head per query head
    if model.tgt_embed.tokens.weight is not model.src_embed.tokens.weight:
        missing.append("model.share_embeddings=true")
    return missing


def stacks(model, ffn_name: str, feed_forward) -> dict:
    """Both stacks' tensors under T5's names; feed_forward(prefix, module) -> the FFN's (dense or experts)."""
    q_dim = model.cfg.n_heads * model.cfg.head_dim

    def attention(prefix: str, a) -> dict:
        if a.cross:
            q, (k, v) = a.q_proj.weight, a.kv_proj.weight.split(q_dim)
        else:
            q, k, v = a.qkv_proj.weight.split(q_dim)
        return {prefix + "q.weight": q, prefix + "k.weight": k, prefix + "v.weight": v, prefix + "o.weight": a.out_proj.weight}

    embed = model.src_embed.tokens.weight
    s = {"shared.weight": embed, "encoder.embed_tokens.weight": embed, "decoder.embed_tokens.weight": embed}
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        s[f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = stack.relative.weight  # [buckets, H]
        s[f"{side}.final_layer_norm.weight"] = stack.final_norm.weight
        for i, b in enumerate(stack.layers):
            p = f"{side}.block.{i}.layer."
            s |= attention(p + "0.SelfAttention.", b.self_attn) | {p + "0.layer_norm.weight": b.norm_attn.weight}
            ff = "1"
            if b.cross_attn is not None:
                s |= attention(p + "1.EncDecAttention.", b.cross_attn) | {p + "1.layer_norm.weight": b.norm_cross.weight}
                ff = "2"
            s |= feed_forward(f"{p}{ff}.{ffn_name}.", b.ffn) | {p + ff + ".layer_norm.weight": b.norm_ffn.weight}
    s["lm_head.weight"] = model.lm_head.weight  # its own copy when tied (see the module's docstring)
    return s


def dense(prefix: str, f) -> dict:
    return {prefix + "wi.weight": f.up.weight, prefix + "wo.weight": f.down.weight}


def backbone_config(model) -> dict:
    cfg = model.cfg
    return {"is_encoder_decoder": True, "d_model": cfg.d_model, "d_kv": cfg.head_dim, "d_ff": cfg.d_ff,
            "num_layers": cfg.n_layers, "num_decoder_layers": cfg.n_layers, "num_heads": cfg.n_heads,
            "n_positions": cfg.max_seq_len,  # T5's field for the longest input (lab's max_seq_len comes back from it)
            "relative_attention_num_buckets": cfg.relative_buckets,
            "relative_attention_max_distance": cfg.relative_max_distance,
            "dropout_rate": cfg.dropout, "layer_norm_epsilon": cfg.norm_eps,
            "tie_word_embeddings": bool(model.cfg.output_scale),  # T5 v1.0 / transformers 4: also "scale the output"
            "pad_token_id": model.pad_id, "eos_token_id": model.eos_id, "bos_token_id": model.bos_id,
            "decoder_start_token_id": model.bos_id, "use_cache": True}


def scales_output(config: dict) -> bool:
    """Whether transformers' T5 multiplies the decoder output by d_model^-0.5: config.json's scale_decoder_outputs
    (transformers 5), else what T5 v1.0/v1.1 configs say with tie_word_embeddings (false: no scale)."""
    return bool(config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False))


def tie_output(state: dict) -> dict:
    """transformers 5 ties T5's output projection to the shared embedding whatever the file holds: so does lab (a
    file lm_head.weight that differs is replaced, said in one line)."""
    shared = state["shared.weight"]
    if "lm_head.weight" in state and not torch.equal(state["lm_head.weight"], shared):
        log.info("lm_head.weight differs from shared.weight; transformers ties T5's output projection to the shared "
                 "embedding, so lab does (1 tensor replaced)")
    return ChainMap({"lm_head.weight": shared}, state)  # the others read from the file as they are asked for


def backbone_arch(config: dict, state: dict, scaled: bool) -> dict:
    """config.json's fields T5 and Switch share -> lab.models.seq2seq.EncoderDecoder's arguments (scaled: the decoder
    output is scaled by d_model^-0.5, lab's model.output_scale)."""
    n_layers, n_dec = config.get("num_layers", 6), config.get("num_decoder_layers") or config.get("num_layers", 6)
    if n_layers != n_dec:
        raise LabError(f"config.json's stacks have {n_layers} and {n_dec} layers; lab's translator has one setting "
                       "for both sides")
    tied = torch.equal(state["lm_head.weight"], state["shared.weight"])
    return {"vocab_size": config["vocab_size"], "pad_id": config.get("pad_token_id", 0),
            "eos_id": config.get("eos_token_id", 1), "bos_id": config.get("decoder_start_token_id", 0),
            "share_embeddings": True, "d_model": config["d_model"], "n_layers": n_layers,
            "n_heads": config["num_heads"], "head_dim": config["d_kv"], "d_ff": config["d_ff"],
            "max_seq_len": config.get("n_positions", 512), "dropout": float(config.get("dropout_rate", 0.1)),
            "positions": "relative", "relative_buckets": config.get("relative_attention_num_buckets", 32),
            "relative_max_distance": config.get("relative_attention_max_distance", 128), "attention_scale": 1.0,
            "norm": "rmsnorm", "norm_eps": float(config.get("layer_norm_epsilon", 1e-6)), "norm_placement": "pre",
            "bias": False, "scale_embeddings": False, "tie_embeddings": tied, "output_scale": bool(scaled)}
