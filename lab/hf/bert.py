"""lab encoders in BERT's layout (post-norm, learned positions, GELU, normalised embeddings) ->
transformers' BertForMaskedLM (the MLM) and BertForSequenceClassification (the classifier, BERT pooler)."""
from __future__ import annotations

import logging
from collections import ChainMap

import torch

from lab.hf.family import Family, bias_of, has_bias, mismatches, setting
from lab.models.encoder import BertPooling

log = logging.getLogger("lab")

# lab's FFN -> hidden_act: BERT has one activation, in the FFN and the MLM head alike, and lab's head follows the
# FFN's (lab.models.encoder.MLMHead.for_model): the tanh GELU, or the exact one of released BERT checkpoints
ACTIVATION = {"gelu": "gelu_new", "gelu_erf": "gelu"}


class BertForMaskedLM(Family):
    """The MLM; BertForSequenceClassification below is the classifier on the same encoder."""

    hf_class, auto_class, kind = "BertForMaskedLM", "AutoModelForMaskedLM", "mlm"
    layout = ("post-norm layernorm, learned positions, gelu or gelu_erf FFN, embed_norm=true, unscaled embeddings, no MoE; "
              "classifiers: pooling=bert, head=sequence")

    def check(self, model) -> list[str]:
        cfg = model.cfg
        missing = mismatches(cfg, {"positions": "learned", "norm": "layernorm", "norm_placement": "post",
                                   "embed_norm": True, "scale_embeddings": False, "moe": None,
                                   "n_kv_heads": cfg.n_heads,  # one key/value head per query head
                                   "head_dim": cfg.d_model // cfg.n_heads})  # heads d_model / n_heads wide (no setting)
        return missing + ([] if cfg.ffn in ACTIVATION else ["model.ffn=gelu"])  # or gelu_erf

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config, s = encoder_config(model), encoder_state(model.encoder, model.cfg)
        h = model.mlm_head
        s |= {"cls.predictions.transform.dense.weight": h.dense.weight, "cls.predictions.transform.dense.bias": h.dense.bias,
              "cls.predictions.transform.LayerNorm.weight": h.norm.weight, "cls.predictions.transform.LayerNorm.bias": h.norm.bias,
              "cls.predictions.decoder.weight": h.decoder.weight, "cls.predictions.decoder.bias": h.decoder.bias,
              "cls.predictions.bias": h.decoder.bias}
        return config, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """BertForMaskedLM's config.json -> lab.models.encoder.MaskedLM's arguments."""
        return {**encoder_arch(config, state), "mask_id": tok.token_id("[MASK]")}

    def fold(self, state: dict, config: dict) -> dict:
        return fold(state)


class BertForSequenceClassification(BertForMaskedLM):
    hf_class, auto_class, kind = "BertForSequenceClassification", "AutoModelForSequenceClassification", "encoder"

    def check(self, model) -> list[str]:
        missing = super().check(model)
        if model.head_kind != "sequence":
            missing.append("model.head=sequence")
        if not isinstance(model.pool, BertPooling):
            missing.append("model.pooling=bert")
        return missing

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        config, s = encoder_config(model), encoder_state(model.encoder, model.cfg)
        labels = (meta.get("data") or {}).get("labels") or [f"LABEL_{i}" for i in range(model.classifier.out_features)]
        s |= {"bert.pooler.dense.weight": model.pool.dense.weight, "bert.pooler.dense.bias": model.pool.dense.bias,
              "classifier.weight": model.classifier.weight, "classifier.bias": model.classifier.bias}
        config |= {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
                   "label2id": {label: i for i, label in enumerate(labels)}, "classifier_dropout": None,
                   "problem_type": "single_label_classification"}
        return config, s

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """BertForSequenceClassification's config.json -> lab.models.encoder.EncoderClassifier's arguments."""
        kw, dropout = encoder_arch(config, state), config.get("classifier_dropout")
        return {**kw, "num_labels": len(config.get("id2label") or {}) or config.get("num_labels", 2), "pooling": "bert",
                "head": "sequence", "classifier_dropout": float(kw["dropout"] if dropout is None else dropout)}


def encoder_state(encoder, cfg, prefix: str = "bert.") -> dict:
    D = cfg.d_model
    e = encoder.embed
    s = {prefix + "embeddings.word_embeddings.weight": e.tokens.weight,
         prefix + "embeddings.position_embeddings.weight": e.positions.weight,
         prefix + "embeddings.token_type_embeddings.weight": torch.zeros(1, D),  # lab has no segments: type 0 adds 0
         prefix + "embeddings.LayerNorm.weight": e.norm.weight, prefix + "embeddings.LayerNorm.bias": bias_of(e.norm, D)}
    for i, b in enumerate(encoder.stack.layers):
        p = f"{prefix}encoder.layer.{i}."
        q, k, v = b.self_attn.qkv_proj.weight.split(D)
        qb, kb, vb = bias_of(b.self_attn.qkv_proj, 3 * D).split(D)
        s |= {p + "attention.self.query.weight": q, p + "attention.self.query.bias": qb,
              p + "attention.self.key.weight": k, p + "attention.self.key.bias": kb,
              p + "attention.self.value.weight": v, p + "attention.self.value.bias": vb,
              p + "attention.output.dense.weight": b.self_attn.out_proj.weight,
              p + "attention.output.dense.bias": bias_of(b.self_attn.out_proj, D),
              p + "attention.output.LayerNorm.weight": b.norm_attn.weight,
              p + "attention.output.LayerNorm.bias": bias_of(b.norm_attn, D),
              p + "intermediate.dense.weight": b.ffn.up.weight, p + "intermediate.dense.bias": bias_of(b.ffn.up, cfg.d_ff),
              p + "output.dense.weight": b.ffn.down.weight, p + "output.dense.bias": bias_of(b.ffn.down, D),
              p + "output.LayerNorm.weight": b.norm_ffn.weight, p + "output.LayerNorm.bias": bias_of(b.norm_ffn, D)}
    return s


def encoder_config(model) -> dict:
    cfg = model.cfg
    return {
        "model_type": "bert", "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.d_ff,
        "hidden_act": ACTIVATION[cfg.ffn],
        "max_position_embeddings": cfg.max_seq_len, "type_vocab_size": 1,
        "layer_norm_eps": cfg.norm_eps,  # every norm's, the MLM head's too (it follows model.norm_eps)
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout,
        "pad_token_id": model.encoder.pad_id, "tie_word_embeddings": bool(cfg.tie_embeddings),
    }


def fold(state: dict) -> dict:
    """lab has no segment embeddings: BERT adds token type 0's row to every token, as a position's row is
    added, so that row goes into the position table (one float addition per element) and the token-type table
    becomes the one row of zeros lab's export writes; rows for type ids > 0 (sentence pairs) are dropped, said
    in one line."""
    types = next((k for k in state if k.endswith("embeddings.token_type_embeddings.weight")), None)
    if types is None:
        return state
    positions, rows = types.replace("token_type_embeddings", "position_embeddings"), state[types]
    if len(rows) > 1:
        log.info("token type embeddings: type 0 folded into the positions; %d row(s) for other types dropped "
                 "(lab's encoders read one segment)", len(rows) - 1)
    # the two tensors replaced, the others read from the file as they are asked for
    # added in float32 (a bf16 file's sum rounded once, where the model's dtype asks)
    return ChainMap({positions: state[positions].float() + rows[0].float(), types: torch.zeros_like(rows[:1])}, state)


def encoder_arch(config: dict, state: dict) -> dict:
    """The encoder's config.json fields (both classes) -> lab.models.encoder's arguments."""
    act = setting(config, "hidden_act", ("gelu_new", "gelu_pytorch_tanh", "gelu"), "gelu")  # "gelu": the exact one
    setting(config, "position_embedding_type", ("absolute",), "absolute")
    return {"vocab_size": config["vocab_size"], "pad_id": config.get("pad_token_id", 0), "d_model": config["hidden_size"],
            "n_layers": config["num_hidden_layers"], "n_heads": config["num_attention_heads"],
            "d_ff": config["intermediate_size"], "max_seq_len": config["max_position_embeddings"],
            "dropout": float(config.get("hidden_dropout_prob", 0.1)), "positions": "learned", "norm": "layernorm",
            "norm_placement": "post", "ffn": "gelu_erf" if act == "gelu" else "gelu", "embed_norm": True,
            "norm_eps": float(config.get("layer_norm_eps", 1e-12)), "scale_embeddings": False,
            "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
            "bias": has_bias(state, lambda k: k.startswith("bert.") and k.endswith(".bias") and ".pooler." not in k)}
