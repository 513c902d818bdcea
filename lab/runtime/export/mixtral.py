"""lab GPT in the Llama layout with a mixture of experts in every layer -> transformers' MixtralForCausalLM."""
from __future__ import annotations

from lab.runtime.export import llama

LAYOUT = ("the Llama layout + model.moe in every layer (softmax token-choice top-k, renormalised gates, dropless "
          "at inference, no shared experts, no selection bias), no biases")


def check(model) -> list[str]:
    cfg = model.cfg
    if cfg.moe is None:
        return ["model.moe (a mixture of experts in every layer)"]
    missing = [m for m in llama.check(model) if not m.startswith("model.moe")]
    if cfg.bias:
        missing.append("model.bias=false")
    layers = [b.ffn for b in model.decoder.layers]
    if not all(hasattr(f, "router") for f in layers):
        return [*missing, "model.moe.every_n=1"]
    moe = layers[0].moe
    wanted = {"router": "token_choice", "gate": "softmax", "capacity_factor_eval": None, "num_shared": 0,
              "bias_update_rate": 0.0}
    missing += [f"model.moe.{k}={'null' if v is None else v}" for k, v in wanted.items() if getattr(moe, k) != v]
    if not layers[0].renormalize:
        missing.append("model.moe.renormalize=true")  # Mixtral always renormalises the chosen gates
    return missing


def convert(model, meta: dict) -> tuple[dict, dict]:
    s = llama.backbone(model)
    for i, block in enumerate(model.decoder.layers):
        p, moe = f"model.layers.{i}.mlp.", block.ffn
        s[p + "gate.weight"] = moe.router.weight  # [E, D]
        # lab's experts are stacked nn.Linear weights [E, out, in], gate and up fused in that order: Mixtral's
        # gate_up_proj [E, 2I, D] and down_proj [E, D, I] exactly
        s[p + "experts.gate_up_proj"], s[p + "experts.down_proj"] = moe.experts.w_in, moe.experts.w_out
    moe = model.decoder.layers[0].ffn
    config = {**llama.backbone_config(model), "model_type": "mixtral",
              "num_local_experts": moe.experts.num_experts, "num_experts_per_tok": moe.moe.top_k,
              "intermediate_size": moe.experts.w_out.shape[-1], "output_router_logits": False,
              "router_aux_loss_coef": moe.moe.load_balance_weight, "router_jitter_noise": 0.0, "sliding_window": None}
    del config["attention_bias"]
    return config, s
