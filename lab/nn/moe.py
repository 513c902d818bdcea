"""Mixture-of-experts feed-forward (Shazeer et al. 2017; GShard; Switch Transformer; DeepSeekMoE; expert choice).

A router scores every real token against `num_experts` experts; each token goes to its top-k experts
(token choice) or each expert takes its top-C tokens (expert choice, non-causal stacks only). Expert
outputs are weighted by the gate and summed back into the token's position; a token that no expert took
(over capacity) gets 0 from the routed experts and passes through the residual unchanged. Optional
shared experts see every token (DeepSeekMoE).

Dispatch never loops over tokens: the (token, expert) assignments are sorted by expert so every expert
runs one matmul on its contiguous slice (token choice) or one batched matmul over equal-sized groups
(expert choice), and the results are combined with one index_add weighted by the gate.

Auxiliary losses, set on `aux_losses` after every forward, already weighted:
- load_balance (Switch eq. 4): E * sum_i f_i * P_i, f_i = share of the token->expert assignments that chose
  expert i (before capacity), P_i = mean router probability of expert i, both over real tokens only.
  It equals exactly 1.0 when routing is perfectly uniform (f_i = 1/E) and reaches E when every token
  goes to one expert; its minimum under balanced assignments is 1.0. Not used by expert choice
  (balanced by construction).
- z_loss (ST-MoE eq. 5): mean over real tokens of logsumexp(router logits)^2; keeps logits small.
`routing_stats` holds the unweighted values plus router entropy (nats, at most ln E), the dropped share
and the per-expert token shares, for logging (lab.tasks.base.Task.aux_loss).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from lab.nn.config import FFN_KINDS, ConfigError, TransformerConfig
from lab.nn.ffn import make_ffn

ROUTERS = ("token_choice", "expert_choice")


@dataclass
class MoEConfig:
    """model.moe: every field optional; the defaults are a Switch/GShard-style top-2 layer."""

    num_experts: int = 8
    top_k: int = 2
    """Experts per token (token choice); for expert choice, the average experts per token the capacity buys."""
    expert_hidden: int | None = None
    """Hidden width of each expert; None: model.d_ff. Smaller = fine-grained experts (DeepSeekMoE)."""
    num_shared: int = 0
    """Always-on shared experts of width expert_hidden, run on every token (DeepSeekMoE)."""
    router: str = "token_choice"
    """token_choice | expert_choice (encoders only: an expert picking among all tokens sees the future)."""
    renormalize: bool | None = None
    """Rescale the chosen top-k gates to sum to 1. None: yes for top_k > 1; no for top_k = 1, where it would
    make every gate 1 and leave the router no gradient from the task loss (Switch keeps the raw probability)."""
    jitter: float = 0.0
    """Multiplicative uniform noise (1 +- jitter) on the router input while training (Switch)."""
    capacity_factor: float | None = 1.25
    """Training capacity per expert = ceil(capacity_factor * top_k * real tokens / num_experts); assignments
    over it are dropped. None: dropless (token choice only)."""
    capacity_factor_eval: float | None = 2.0
    """The same in eval mode (validation, test, generation); None: dropless."""
    load_balance_weight: float = 0.01
    z_loss_weight: float = 0.001
    every_n: int = 1
    """MoE on every n-th layer (layers n, 2n, ...; 2 = every other layer as in GShard/Switch), dense elsewhere."""

    @classmethod
    def from_model(cls, cfg: TransformerConfig) -> MoEConfig:
        """Parse and validate model.moe; a bad value raises ConfigError naming the field."""
        settings = dict(cfg.moe or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigError(f"unknown model.moe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        moe = cls(**settings)
        moe.validate(cfg.n_layers)
        return moe

    def validate(self, n_layers: int) -> None:
        def fail(field: str, why: str) -> None:
            raise ConfigError(f"model.moe.{field}={getattr(self, field)!r}: {why}")

        if self.num_experts < 1:
            fail("num_experts", "need at least one expert")
        if not 1 <= self.top_k <= self.num_experts:
            fail("top_k", f"must be between 1 and num_experts={self.num_experts}")
        if self.router not in ROUTERS:
            fail("router", f"choose one of {', '.join(ROUTERS)}")
        for name in ("capacity_factor", "capacity_factor_eval"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                fail(name, "must be positive, or null for dropless")
            if value is None and self.router == "expert_choice":
                fail(name, "expert-choice routing needs a capacity (experts pick a fixed number of tokens)")
        if self.expert_hidden is not None and self.expert_hidden < 1:
            fail("expert_hidden", "must be a positive width, or null for model.d_ff")
        if self.num_shared < 0:
            fail("num_shared", "must be 0 or more")
        if not 0.0 <= self.jitter < 1.0:
            fail("jitter", "must be in [0, 1)")
        for name in ("load_balance_weight", "z_loss_weight"):
            if getattr(self, name) < 0:
                fail(name, "must be >= 0")
        if not 1 <= self.every_n <= n_layers:
            fail("every_n", f"must be between 1 and model.n_layers={n_layers}, or no layer would be MoE")

    def applies_to(self, layer: int) -> bool:
        """Is layer `layer` (0-based) a MoE layer? Layers n-1, 2n-1, ... (every n-th, counting from 1)."""
        return (layer + 1) % self.every_n == 0


class Experts(nn.Module):
    """num_experts FFNs of one kind, their weights stacked into single tensors ([E, out, in], nn.Linear's
    layout, so expert e computes exactly what nn.Linear with weight[e] would). One tensor per matrix means an
    expert that gets no tokens in a step still belongs to a parameter that gets a gradient: DDP needs no
    find_unused_parameters."""

    def __init__(self, num_experts: int, dim: int, hidden: int, kind: str, bias: bool, dropout: float = 0.0):
        super().__init__()
        if kind not in FFN_KINDS:
            raise ConfigError(f"model.ffn={kind!r} is not supported; choose one of {', '.join(FFN_KINDS)}")
        self.kind, self.dropout = kind, dropout
        width_in = 2 * hidden if kind == "swiglu" else hidden  # swiglu: gate and up fused, as in lab.nn.ffn
        self.w_in = nn.Parameter(torch.empty(num_experts, width_in, dim))
        self.w_out = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.b_in = nn.Parameter(torch.zeros(num_experts, width_in)) if bias else None
        self.b_out = nn.Parameter(torch.zeros(num_experts, dim)) if bias else None
        for b in (self.b_in, self.b_out):
            if b is not None:
                b.no_weight_decay = True  # 2-D only because stacked: still a bias (lab.tasks.base)
        self.init_parameters(std=0.02, residual_std=0.02)

    def init_parameters(self, std: float, residual_std: float) -> None:
        """GPT-2 init as lab.nn.init_weights gives nn.Linear: the output projection is a residual one."""
        nn.init.normal_(self.w_in, std=std)
        nn.init.normal_(self.w_out, std=residual_std)
        for b in (self.b_in, self.b_out):
            if b is not None:
                nn.init.zeros_(b)

    @property
    def num_experts(self) -> int:
        return self.w_in.shape[0]

    def params_per_expert(self) -> int:
        return sum(p[0].numel() for p in self.parameters())

    def _hidden(self, h: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.relu(h) if self.kind == "relu" else F.gelu(h, approximate="tanh")  # as lab.nn.ffn
        return F.dropout(h, self.dropout) if self.dropout and self.training else h

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """x: [K, D] sorted by expert, counts[e] rows for expert e -> [K, D]. One matmul pair per expert."""
        # unbind once: its backward stacks the per-expert grads into one tensor (zeros for idle experts)
        w_in, w_out = self.w_in.unbind(0), self.w_out.unbind(0)
        b_in = self.b_in.unbind(0) if self.b_in is not None else [None] * len(counts)
        b_out = self.b_out.unbind(0) if self.b_out is not None else [None] * len(counts)
        outputs = [
            F.linear(self._hidden(F.linear(chunk, w_in[e], b_in[e])), w_out[e], b_out[e])
            for e, chunk in enumerate(x.split(counts))
            if counts[e]
        ]
        return torch.cat(outputs) if outputs else x.new_zeros(0, x.shape[-1])

    def forward_grouped(self, x: torch.Tensor) -> torch.Tensor:
        """x: [E, C, D], C tokens per expert -> [E, C, D] with one batched matmul per projection."""
        h = torch.bmm(x, self.w_in.transpose(1, 2))  # [E, C, H]
        if self.b_in is not None:
            h = h + self.b_in[:, None, :]
        y = torch.bmm(self._hidden(h), self.w_out.transpose(1, 2))  # [E, C, D]
        return y + self.b_out[:, None, :] if self.b_out is not None else y


class MixtureOfExperts(nn.Module):
    """Router + experts (+ shared experts). Receives its parts; `causal` says whether the stack is a decoder,
    which decides the drop priority and forbids expert choice."""

    def __init__(self, router: nn.Linear, experts: Experts, moe: MoEConfig, causal: bool,
                 shared: nn.Module | None = None):
        super().__init__()
        if moe.router == "expert_choice" and causal:
            raise ConfigError(
                "model.moe.router=expert_choice cannot be used in a causal decoder: each expert would choose "
                "among all positions, so a token's output would depend on later tokens; use token_choice there"
            )
        self.router, self.experts, self.shared = router, experts, shared
        self.moe, self.causal = moe, causal
        self.renormalize = moe.renormalize if moe.renormalize is not None else moe.top_k > 1
        self.aux_losses: dict[str, torch.Tensor] = {}
        self.routing_stats: dict[str, torch.Tensor] = {}

    def inactive_parameters(self) -> int:
        """Routed-expert parameters a token does not pass through: all experts but its top_k."""
        return (self.experts.num_experts - self.moe.top_k) * self.experts.params_per_expert()

    def capacity(self, tokens: int) -> int | None:
        factor = self.moe.capacity_factor if self.training else self.moe.capacity_factor_eval
        if factor is None:
            return None
        return min(tokens, math.ceil(factor * self.moe.top_k * tokens / self.experts.num_experts))

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, D]; token_mask: [B, T] True on real tokens (padding is neither routed nor counted)."""
        B, T, D = x.shape
        flat = x.reshape(B * T, D)
        real = token_mask.reshape(-1).nonzero().squeeze(1) if token_mask is not None else None  # [M]
        tokens = flat[real] if real is not None else flat  # [M, D]
        out = torch.zeros_like(flat)  # [B*T, D]; tokens no expert takes stay 0 (pass through the residual)
        if tokens.shape[0]:
            route = self._expert_choice if self.moe.router == "expert_choice" else self._token_choice
            rows, values = route(tokens)  # which token (index into `tokens`) gets which weighted expert output
            out.index_add_(0, real[rows] if real is not None else rows, values.to(out.dtype))
        else:  # no real token here: keep every parameter in the graph so DDP's gradient hooks still fire
            out = out + 0.0 * sum(p.sum() for p in (*self.router.parameters(), *self.experts.parameters()))
            self.aux_losses, self.routing_stats = {}, {}
        out = out.view(B, T, D)
        return out + self.shared(x) if self.shared is not None else out

    def _router_probs(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[M, D] -> logits and probabilities [M, E], in float32 (routing decisions are precision-sensitive)."""
        if self.moe.jitter and self.training:
            tokens = tokens * torch.empty_like(tokens).uniform_(1.0 - self.moe.jitter, 1.0 + self.moe.jitter)
        logits = self.router(tokens).float()
        return logits, logits.softmax(dim=-1)

    def _token_choice(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        M, E, k = tokens.shape[0], self.experts.num_experts, self.moe.top_k
        logits, probs = self._router_probs(tokens)  # [M, E]
        top_p, top_e = probs.topk(k, dim=-1)  # [M, k]
        gates = top_p / top_p.sum(-1, keepdim=True) if self.renormalize else top_p
        capacity = self.capacity(M)
        if capacity is None or self.causal:
            # token-major: among assignments to one expert, earlier tokens come first, so in a decoder no
            # token's drop depends on a later token of its sequence
            expert, gate = top_e.reshape(-1), gates.reshape(-1)  # [M*k]
            row = torch.arange(M, device=tokens.device).repeat_interleave(k)
            order = torch.argsort(expert, stable=True)
        else:
            # router priority (batch-prioritised routing, Riquelme et al. 2021): all first choices before any
            # second choice, and within a choice rank the more confident assignment first
            expert, gate = top_e.t().reshape(-1), gates.t().reshape(-1)  # [k*M], choice-major
            row = torch.arange(M, device=tokens.device).repeat(k)
            choice = torch.arange(k, device=tokens.device).repeat_interleave(M)
            order = torch.argsort(-top_p.t().reshape(-1), stable=True)
            order = order[torch.argsort((expert * k + choice)[order], stable=True)]
        counts = torch.bincount(expert, minlength=E)  # [E] assignments per expert, before capacity
        if capacity is not None:
            group_start = counts.cumsum(0) - counts
            rank_in_expert = torch.arange(M * k, device=tokens.device) - group_start[expert[order]]
            order = order[rank_in_expert < capacity]
            kept = counts.clamp(max=capacity)
        else:
            kept = counts
        outputs = self.experts(tokens[row[order]], kept.tolist())  # [K, D], grouped by expert
        fraction = counts.float() / (M * k)
        self._record(logits, probs, fraction, dropped=1.0 - kept.sum().float() / (M * k))
        return row[order], outputs * gate[order, None]

    def _expert_choice(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        M, E = tokens.shape[0], self.experts.num_experts
        logits, probs = self._router_probs(tokens)  # [M, E]
        gate, rows = probs.t().topk(self.capacity(M), dim=-1)  # [E, C]: each expert's C best tokens
        outputs = self.experts.forward_grouped(tokens[rows])  # [E, C, D]
        taken = torch.zeros(M, device=tokens.device).index_fill_(0, rows.reshape(-1), 1.0)
        fraction = torch.full((E,), 1.0 / E, device=tokens.device)
        self._record(logits, probs, fraction, dropped=1.0 - taken.mean())
        return rows.reshape(-1), (outputs * gate[..., None]).reshape(-1, tokens.shape[1])

    def _record(self, logits: torch.Tensor, probs: torch.Tensor, fraction: torch.Tensor, dropped) -> None:
        """Aux losses (weighted, in the graph) and routing statistics (detached) of this forward."""
        z_loss = torch.logsumexp(logits, dim=-1).square().mean()
        losses = {"z_loss": (z_loss, self.moe.z_loss_weight)}
        if self.moe.router == "token_choice":
            load_balance = self.experts.num_experts * (fraction * probs.mean(0)).sum()
            losses["load_balance"] = (load_balance, self.moe.load_balance_weight)
        self.aux_losses = {name: weight * value for name, (value, weight) in losses.items() if weight}
        with torch.no_grad():
            entropy = -(probs * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
            self.routing_stats = {
                **{name: value.detach() for name, (value, _) in losses.items()},
                "entropy": entropy,
                "dropped": torch.as_tensor(dropped).detach(),
                "expert_fraction": fraction.detach(),
            }


def make_moe(cfg: TransformerConfig, causal: bool) -> MixtureOfExperts:
    moe = MoEConfig.from_model(cfg)
    hidden = moe.expert_hidden or cfg.d_ff
    shared = make_ffn(cfg.ffn, cfg.d_model, moe.num_shared * hidden, cfg.bias, cfg.dropout) if moe.num_shared else None
    return MixtureOfExperts(
        router=nn.Linear(cfg.d_model, moe.num_experts, bias=False),
        experts=Experts(moe.num_experts, cfg.d_model, hidden, cfg.ffn, cfg.bias, cfg.dropout),
        moe=moe,
        causal=causal,
        shared=shared,  # n shared experts = one FFN n times as wide (the sum of their outputs, fused)
    )
