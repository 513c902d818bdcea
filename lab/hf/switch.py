"""lab's translator in T5's layout with a Switch mixture of experts -> transformers'
SwitchTransformersForConditionalGeneration (Fedus et al. 2021): pre-norm RMSNorm, no biases, T5's relative
position bias (one table per stack), unscaled attention, one shared token embedding, ReLU (or GELU) FFNs, and
top-1 softmax routing on every n-th layer of both stacks.

Two things are equal by choice of config rather than by layout:
- Capacity. Switch drops a sequence's tokens beyond `expert_capacity` per expert; lab counts capacity over the
  batch. The export sets expert_capacity to the longest sequence the model takes (model.max_seq_len), so
  transformers never drops, which is lab's eval computation when model.moe.capacity_factor_eval=null.
- The output projection. Tied (tie_word_embeddings=true), Switch multiplies the decoder output by d_model^-0.5
  before it: lab's model.output_scale with tied embeddings. A tied lab model without output_scale is written
  with tie_word_embeddings=false and lm_head.weight its own copy of the shared embedding (the same logits).
The stacks' mapping is T5's (lab.hf.t5), which this one extends with experts."""
from __future__ import annotations

import logging

from lab.errors import LabError
from lab.hf import t5
from lab.hf.family import Family, setting
from lab.nn.moe import MixtureOfExperts

log = logging.getLogger("lab")

ACTIVATION = {"relu": "relu", "gelu": "gelu_new"}  # lab's FFN -> dense_act_fn


class SwitchTransformers(Family):
    hf_class, auto_class, kind = "SwitchTransformersForConditionalGeneration", "AutoModelForSeq2SeqLM", "seq2seq"
    layout = ("pre-norm rmsnorm, relative positions (T5's bias), attention_scale=1.0, relu or gelu FFN, no biases, "
              "shared unscaled embeddings, model.moe: softmax top-1 token choice, experts of width d_ff, dropless at eval")
    computes = frozenset({"output_scale"})  # tied

    def check(self, model) -> list[str]:
        cfg = model.cfg
        if cfg.moe is None:
            return ["model.moe (Switch top-1 experts on every other layer)"]
        missing = t5.backbone_check(model)
        if cfg.ffn not in ACTIVATION:
            missing.append("model.ffn=relu")  # or gelu
        if cfg.output_scale and not cfg.tie_embeddings:
            missing.append("model.tie_embeddings=true")  # Switch scales the output of a tied projection only
        layers = [b.ffn for b in model.encoder.layers]
        moe_at = [i for i, f in enumerate(layers) if isinstance(f, MixtureOfExperts)]
        if moe_at != sparse_layers(cfg.n_layers, len(moe_at)):
            missing.append("model.moe.every_n=2")  # Switch's sparse layers are 1, 1+step, ...: every_n 1 or 2 match
        moe = layers[moe_at[0]] if moe_at else None
        if moe is not None:
            settings, have = {"router": "token_choice", "top_k": 1, "gate": "softmax", "capacity_factor_eval": None,
                              "num_shared": 0, "bias_update_rate": 0.0}, vars(moe.moe)
            missing += [f"model.moe.{k}={'null' if v is None else v}" for k, v in settings.items() if have[k] != v]
            if moe.renormalize:
                missing.append("model.moe.renormalize=false")  # Switch weighs the output by the raw probability
            if moe.experts.w_out.shape[-1] != cfg.d_ff:
                missing.append("model.moe.expert_hidden=null")  # Switch's experts are as wide as its dense FFNs
        return missing

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        cfg = model.cfg
        moe = [b.ffn for b in model.encoder.layers if isinstance(b.ffn, MixtureOfExperts)]
        config = {
            **t5.backbone_config(model), "model_type": "switch_transformers", "dense_act_fn": ACTIVATION[cfg.ffn],
            "num_experts": moe[0].experts.num_experts, "num_sparse_encoder_layers": len(moe),
            "num_sparse_decoder_layers": len(moe),
            "expert_capacity": cfg.max_seq_len,  # no sequence of the model's can overflow it: dropless
            "router_bias": False, "router_jitter_noise": moe[0].moe.jitter, "router_dtype": "float32",
            "router_ignore_padding_tokens": False, "router_z_loss_coef": moe[0].moe.z_loss_weight,
            "router_aux_loss_coef": moe[0].moe.load_balance_weight,
        }
        return config, t5.stacks(model, "mlp", feed_forward)

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """SwitchTransformersForConditionalGeneration's config.json -> lab.models.seq2seq.EncoderDecoder's arguments."""
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
        moe = {"num_experts": config.get("num_experts", 8), "top_k": 1, "expert_hidden": None, "router": "token_choice",
               "gate": "softmax", "renormalize": False, "capacity_factor": 1.25, "capacity_factor_eval": None,
               "jitter": float(config.get("router_jitter_noise", 0.01)), "num_shared": 0, "bias_update_rate": 0.0,
               "load_balance_weight": float(config.get("router_aux_loss_coef", 0.001)),
               "z_loss_weight": float(config.get("router_z_loss_coef", 0.001)), "every_n": every_n[0]}
        return {**t5.backbone_arch(config, state, config.get("tie_word_embeddings", True)),
                "ffn": {v: k for k, v in ACTIVATION.items()}[act], "moe": moe}

    def fold(self, state: dict, config: dict) -> dict:
        """Tied (the default), the output projection is the shared embedding (transformers ties them)."""
        return t5.tie_output(state) if config.get("tie_word_embeddings", True) else state


def sparse_layers(n_layers: int, n_sparse: int) -> list[int]:
    """The layers SwitchTransformersStack makes sparse: every (n_layers // n_sparse)-th, from layer 1."""
    if n_sparse <= 0:
        return []
    step = n_layers // n_sparse
    return [i for i in range(n_layers) if i % step == 1 or step == 1]


def feed_forward(prefix: str, f) -> dict:
    """A dense FFN, or the router and each of lab's stacked experts ([E, H, D] in, [E, D, H] out) by number."""
    if not isinstance(f, MixtureOfExperts):
        return t5.dense(prefix, f)
    s = {prefix + "router.classifier.weight": f.router.weight}
    for e, (w_in, w_out) in enumerate(zip(f.experts.w_in, f.experts.w_out)):
        s[f"{prefix}experts.expert_{e}.wi.weight"], s[f"{prefix}experts.expert_{e}.wo.weight"] = w_in, w_out
    return s
