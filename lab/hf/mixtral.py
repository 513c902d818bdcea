"""lab GPT in the Llama layout with a mixture of experts in every layer -> transformers' MixtralForCausalLM."""
from __future__ import annotations

from lab.hf import llama
from lab.hf.family import setting
from lab.nn.moe import MixtureOfExperts


class Mixtral(llama.Llama):
    hf_class = "MixtralForCausalLM"
    layout = ("the Llama layout + model.moe in every layer (softmax token-choice top-k, renormalised gates, dropless "
              "at inference, no shared experts, no selection bias), no biases")

    def check(self, model) -> list[str]:
        cfg = model.cfg
        if cfg.moe is None:
            return ["model.moe (a mixture of experts in every layer)"]
        missing = [m for m in super().check(model) if not m.startswith("model.moe")]
        if cfg.bias:
            missing.append("model.bias=false")
        layers = [b.ffn for b in model.decoder.layers]
        if not all(isinstance(f, MixtureOfExperts) for f in layers):
            return [*missing, "model.moe.every_n=1"]
        moe = vars(layers[0].moe)
        wanted = {"router": "token_choice", "gate": "softmax", "capacity_factor_eval": None, "num_shared": 0,
                  "bias_update_rate": 0.0}
        missing += [f"model.moe.{k}={'null' if v is None else v}" for k, v in wanted.items() if moe[k] != v]
        if not layers[0].renormalize:
            missing.append("model.moe.renormalize=true")  # Mixtral always renormalises the chosen gates
        return missing

    def to_hf(self, model, meta: dict) -> tuple[dict, dict]:
        return to_hf(model)

    def config_from_hf(self, config: dict, state: dict, tok) -> dict:
        """MixtralForCausalLM's config.json -> lab.models.gpt.GPT's arguments: the Llama backbone, a dropless
        softmax top-k mixture of experts with renormalised gates in every layer."""
        setting(config, "router_jitter_noise", (0.0, 0), 0.0)
        moe = {"num_experts": config["num_local_experts"], "top_k": config["num_experts_per_tok"],
               "expert_hidden": config["intermediate_size"], "renormalize": True, "capacity_factor": None,
               "capacity_factor_eval": None, "load_balance_weight": float(config.get("router_aux_loss_coef", 0.01)),
               "gate": "softmax", "router": "token_choice", "num_shared": 0, "bias_update_rate": 0.0, "every_n": 1}
        return {**llama.backbone_arch(config), "bias": False, "moe": moe}


def to_hf(model) -> tuple[dict, dict]:
    s = llama.backbone(model)
    for i, block in enumerate(model.decoder.layers):
        p, moe = f"model.layers.{i}.block_sparse_moe.", block.ffn
        s[p + "gate.weight"] = moe.router.weight  # [E, D]
        # the layout Mixtral's checkpoints have on disk (transformers fuses it when loading, and writes it back
        # when saving; vLLM and llama.cpp read it): per expert w1 (gate) and w3 (up) [I, D], w2 (down) [D, I].
        # lab's stacked experts are nn.Linear-shaped, gate and up fused in that order: [E, 2I, D] and [E, D, I]
        for e, (w_in, w_out) in enumerate(zip(moe.experts.w_in, moe.experts.w_out)):
            gate, up = w_in.split(w_in.shape[0] // 2)
            s[f"{p}experts.{e}.w1.weight"], s[f"{p}experts.{e}.w3.weight"], s[f"{p}experts.{e}.w2.weight"] = gate, up, w_out
    moe = model.decoder.layers[0].ffn
    config = {**llama.backbone_config(model), "model_type": "mixtral",
              "num_local_experts": moe.experts.num_experts, "num_experts_per_tok": moe.moe.top_k,
              "intermediate_size": moe.experts.w_out.shape[-1], "output_router_logits": False,
              "router_aux_loss_coef": moe.moe.load_balance_weight, "router_jitter_noise": 0.0, "sliding_window": None}
    del config["attention_bias"]
    return config, s
