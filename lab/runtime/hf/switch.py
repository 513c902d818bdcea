"""lab's translator in T5's layout with a Switch mixture of experts -> transformers'
SwitchTransformersForConditionalGeneration (Fedus et al. 2021): pre-norm RMSNorm, no biases, T5's relative
position bias (one table per stack), unscaled attention, one shared token embedding, ReLU (or GELU) FFNs, and
top-1 softmax routing on every n-th layer of both stacks.

Two things are equal by choice of config rather than by layout:
- Capacity. Switch drops a sequence's tokens beyond `expert_capacity` per expert; lab counts capacity over the
  batch. The export sets expert_capacity to the longest sequence the model takes (model.max_seq_len), so
  transformers never drops, which is lab's eval computation when model.moe.capacity_factor_eval=null.
- The output projection. With tie_word_embeddings=true, T5 multiplies the decoder output by d_model^-0.5
  before the tied projection; lab's tied projection has no such factor, so the export writes
  tie_word_embeddings=false and lm_head.weight as its own copy of the shared embedding (the same logits). An
  imported tied checkpoint gets an untied lab output projection of shared * d_model^-0.5 (`fold`, said in one
  line): transformers' logits up to float rounding."""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("lab")

LAYOUT = ("pre-norm rmsnorm, relative positions (T5's bias), attention_scale=1.0, relu or gelu FFN, no biases, "
          "shared unscaled embeddings, model.moe: softmax top-1 token choice, experts of width d_ff, dropless at eval")
ACTIVATION = {"relu": "relu", "gelu": "gelu_new"}  # lab's FFN -> dense_act_fn


def sparse_layers(n_layers: int, n_sparse: int) -> list[int]:
    """The layers SwitchTransformersStack makes sparse: every (n_layers // n_sparse)-th, from layer 1."""
    if n_sparse <= 0:
        return []
    step = n_layers // n_sparse
    return [i for i in range(n_layers) if i % step == 1 or step == 1]


def check(model) -> list[str]:
    cfg = model.cfg
    if cfg.moe is None:
        return ["model.moe (Switch top-1 experts on every other layer)"]
    wanted = {"positions": "relative", "norm": "rmsnorm", "norm_placement": "pre", "bias": False,
              "attention_scale": 1.0, "scale_embeddings": False, "embed_norm": False,
              "n_kv_heads": cfg.n_heads}  # one key/value head per query head
    missing = [f"model.{k}={v}" for k, v in wanted.items() if getattr(cfg, k) != v]
    if cfg.ffn not in ACTIVATION:
        missing.append("model.ffn=relu")  # or gelu
    if model.tgt_embed.tokens.weight is not model.src_embed.tokens.weight:
        missing.append("model.share_embeddings=true")
    layers = [b.ffn for b in model.encoder.layers]
    moe_at = [i for i, f in enumerate(layers) if hasattr(f, "router")]
    if moe_at != sparse_layers(cfg.n_layers, len(moe_at)):
        missing.append("model.moe.every_n=2")  # Switch's sparse layers are 1, 1+step, ...: every_n 1 or 2 match
    moe = layers[moe_at[0]] if moe_at else None
    if moe is not None:
        settings = {"router": "token_choice", "top_k": 1, "gate": "softmax", "capacity_factor_eval": None,
                    "num_shared": 0, "bias_update_rate": 0.0}
        missing += [f"model.moe.{k}={'null' if v is None else v}" for k, v in settings.items()
                    if getattr(moe.moe, k) != v]
        if moe.renormalize:
            missing.append("model.moe.renormalize=false")  # Switch weighs the output by the raw probability
        if moe.experts.w_out.shape[-1] != cfg.d_ff:
            missing.append("model.moe.expert_hidden=null")  # Switch's experts are as wide as its dense FFNs
    return missing


def convert(model, meta: dict) -> tuple[dict, dict]:
    cfg = model.cfg
    q_dim = cfg.n_heads * cfg.head_dim

    def attention(prefix: str, a) -> dict:
        if a.cross:
            q, (k, v) = a.q_proj.weight, a.kv_proj.weight.split(q_dim)
        else:
            q, k, v = a.qkv_proj.weight.split(q_dim)
        return {prefix + "q.weight": q, prefix + "k.weight": k, prefix + "v.weight": v, prefix + "o.weight": a.out_proj.weight}

    def feed_forward(prefix: str, f) -> dict:
        if not hasattr(f, "router"):
            return {prefix + "wi.weight": f.up.weight, prefix + "wo.weight": f.down.weight}
        s = {prefix + "router.classifier.weight": f.router.weight}
        for e, (w_in, w_out) in enumerate(zip(f.experts.w_in, f.experts.w_out)):  # [E, H, D], [E, D, H]
            s[f"{prefix}experts.expert_{e}.wi.weight"], s[f"{prefix}experts.expert_{e}.wo.weight"] = w_in, w_out
        return s

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
            s |= feed_forward(p + ff + ".mlp.", b.ffn) | {p + ff + ".layer_norm.weight": b.norm_ffn.weight}
    s["lm_head.weight"] = model.lm_head.weight  # its own copy when tied (see the module's docstring)
    n_sparse = sum(hasattr(b.ffn, "router") for b in model.encoder.layers)
    moe = next(b.ffn for b in model.encoder.layers if hasattr(b.ffn, "router"))
    config = {
        "model_type": "switch_transformers", "is_encoder_decoder": True, "d_model": cfg.d_model, "d_kv": cfg.head_dim,
        "d_ff": cfg.d_ff, "num_layers": cfg.n_layers, "num_decoder_layers": cfg.n_layers, "num_heads": cfg.n_heads,
        "num_experts": moe.experts.num_experts, "num_sparse_encoder_layers": n_sparse,
        "num_sparse_decoder_layers": n_sparse,
        "expert_capacity": cfg.max_seq_len,  # no sequence of the model's can overflow it: dropless
        "n_positions": cfg.max_seq_len,  # T5's field for the longest input (lab's max_seq_len comes back from it)
        "router_bias": False, "router_jitter_noise": moe.moe.jitter, "router_dtype": "float32",
        "router_ignore_padding_tokens": False, "router_z_loss_coef": moe.moe.z_loss_weight,
        "router_aux_loss_coef": moe.moe.load_balance_weight,
        "relative_attention_num_buckets": cfg.relative_buckets,
        "relative_attention_max_distance": cfg.relative_max_distance,
        "dropout_rate": cfg.dropout, "layer_norm_epsilon": cfg.norm_eps, "dense_act_fn": ACTIVATION[cfg.ffn],
        "tie_word_embeddings": False, "pad_token_id": model.pad_id, "eos_token_id": model.eos_id,
        "bos_token_id": model.bos_id, "decoder_start_token_id": model.bos_id, "use_cache": True,
    }
    return config, s


def fold(state: dict, config: dict) -> dict:
    """A tied checkpoint (T5's d_model^-0.5 on the decoder output) -> an untied output projection with the factor
    in it, which lab computes without one."""
    if config.get("tie_word_embeddings", True):
        state = dict(state)
        state["lm_head.weight"] = state["shared.weight"] * config["d_model"] ** -0.5
        log.info("tied embeddings with T5's d_model^-0.5 output scale: imported as an untied output projection "
                 "(shared.weight * %.6g; 1 tensor added)", config["d_model"] ** -0.5)
    return state


def arch(config: dict, state: dict, name: str, tok) -> dict:
    """SwitchTransformersForConditionalGeneration's config.json -> lab.models.seq2seq.EncoderDecoder's arguments."""
    from lab.errors import LabError  # noqa: PLC0415
    from lab.runtime.hf.importing import setting  # noqa: PLC0415

    act = setting(config, "dense_act_fn", tuple(ACTIVATION.values()), "relu")
    setting(config, "router_bias", (False,), False)
    n_layers, n_dec = config.get("num_layers", 12), config.get("num_decoder_layers") or config.get("num_layers", 12)
    sparse = [sparse_layers(n, config.get(f"num_sparse_{side}_layers", 3))
              for n, side in ((n_layers, "encoder"), (n_dec, "decoder"))]
    every_n = [n for n in range(1, n_layers + 1) if [i for i in range(n_layers) if (i + 1) % n == 0] == sparse[0]]
    if n_layers != n_dec or sparse[0] != sparse[1] or not every_n:
        raise LabError(f"config.json's stacks have {n_layers} and {n_dec} layers, experts on layers {sparse[0]} and "
                       f"{sparse[1]}; lab's translator has one setting for both sides and experts on every n-th layer")
    capacity = config.get("expert_capacity", 64)
    if capacity < config.get("n_positions", 512):
        log.info("Switch drops a sequence's tokens beyond expert_capacity=%d per expert; lab imports it dropless at "
                 "eval: equal while no sequence sends more than %d tokens to one expert", capacity, capacity)
    tied = not config.get("tie_word_embeddings", True) and torch.equal(state["lm_head.weight"], state["shared.weight"])
    moe = {"num_experts": config.get("num_experts", 8), "top_k": 1, "expert_hidden": None, "router": "token_choice",
           "gate": "softmax", "renormalize": False, "capacity_factor": 1.25, "capacity_factor_eval": None,
           "jitter": float(config.get("router_jitter_noise", 0.01)), "num_shared": 0, "bias_update_rate": 0.0,
           "load_balance_weight": float(config.get("router_aux_loss_coef", 0.001)),
           "z_loss_weight": float(config.get("router_z_loss_coef", 0.001)), "every_n": every_n[0]}
    return {"vocab_size": config["vocab_size"], "pad_id": config.get("pad_token_id", 0),
            "eos_id": config.get("eos_token_id", 1), "bos_id": config.get("decoder_start_token_id", 0),
            "share_embeddings": True, "d_model": config["d_model"], "n_layers": n_layers,
            "n_heads": config["num_heads"], "head_dim": config["d_kv"], "d_ff": config["d_ff"],
            "max_seq_len": config.get("n_positions", 512), "dropout": float(config.get("dropout_rate", 0.1)),
            "positions": "relative", "relative_buckets": config.get("relative_attention_num_buckets", 32),
            "relative_max_distance": config.get("relative_attention_max_distance", 128), "attention_scale": 1.0,
            "norm": "rmsnorm", "norm_eps": float(config.get("layer_norm_epsilon", 1e-6)), "norm_placement": "pre",
            "ffn": {v: k for k, v in ACTIVATION.items()}[act], "bias": False, "scale_embeddings": False,
            "tie_embeddings": tied, "moe": moe}
