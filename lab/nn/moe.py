"""Mixture-of-experts feed-forward (Shazeer et al. 2017; GShard; Switch Transformer; DeepSeekMoE; expert choice).

A router scores every real token against `num_experts` experts; each token goes to its top-k experts
(token choice) or each expert takes its top-C tokens (expert choice, non-causal stacks only). Expert
outputs are weighted by the gate and summed back into the token's position; a token that no expert took
(over capacity) gets 0 from the routed experts and passes through the residual unchanged. Optional
shared experts see every token (DeepSeekMoE).

Dispatch (as torchtitan's and MegaBlocks' dropless MoE) has no loop over tokens or experts and no host
synchronisation, so the whole layer compiles as one graph: the (token, expert) assignments are sorted by
expert, assignments no expert computes (padding, over capacity) are moved to the end, and each projection
is one grouped matrix multiply (torch.nn.functional.grouped_mm) over the contiguous per-expert groups. Expert
choice has equal-sized groups and uses one batched matmul. The gate-weighted results are summed into their
tokens with one index_add, the output biases added per token as one matmul of the gates. Shapes are static:
padding and drops are masks, never a data-dependent slice. (Eager on a CPU with <= 8 experts, dispatch=auto
runs the per-expert loop instead: measured faster there.)

Auxiliary losses, returned by every forward in its Routing record (lab.nn.routing), already weighted:
- load_balance (Switch eq. 4): E * sum_i f_i * P_i, f_i = share of the token->expert assignments that chose
  expert i (before capacity), P_i = mean router probability of expert i, both over real tokens only.
  It equals exactly 1.0 when routing is perfectly uniform (f_i = 1/E) and reaches E when every token
  goes to one expert. Not used by expert choice (balanced by construction). With load_balance_scope=global,
  f is counted over the global batch (all-reduced over data-parallel ranks).
- z_loss (ST-MoE eq. 5): mean over real tokens of logsumexp(router logits)^2; keeps logits small.
Auxiliary-loss-free balancing (DeepSeek-V3): with bias_update_rate > 0 a per-expert bias, added to the
scores for the top-k choice only (never to the gate), moves by the rate towards balance after every training
forward: down for experts above the mean load, up for those below.
The record's `stats` hold the unweighted values plus router entropy (nats, at most ln E), the dropped share,
the per-expert token shares and the balancing bias, for logging (lab.tasks.base.Task.log_routing).
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lab.errors import ConfigError
from lab.nn.config import FFN_KINDS, MoEConfig, TransformerConfig
from lab.nn.ffn import make_ffn
from lab.nn.routing import RoutedFFN, Routing, StackedExperts

LOOP_MAX_EXPERTS_CPU = 8  # dispatch=auto in eager mode on a CPU: the per-expert loop up to this many experts


def grouped_mm_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Can torch.nn.functional.grouped_mm (forward and backward) run on this device in this dtype?"""
    if device.type == "cpu":
        return dtype in (torch.float32, torch.bfloat16, torch.float16)
    if device.type == "cuda":
        return dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) >= (8, 0)
    return False


@torch.library.custom_op("lab::grouped_mm", mutates_args=())
def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm as an opaque op with its own shape function: on CPU the kernel takes float32, but the
    op's built-in fake implementation (what torch.compile traces with) accepts only bfloat16.
    a [N, K] x b [E, K, M] -> [N, M] (row groups end at offs); a [K, N] x b [N, M] -> [E, K, M] (the weight
    gradient: groups along N)."""
    return torch._grouped_mm(a, b, offs=offs)


@grouped_mm.register_fake
def _(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    if b.dim() == 3:
        return a.new_empty(a.shape[0], b.shape[-1])
    return a.new_empty(offs.shape[0], a.shape[0], b.shape[1])


@torch.library.custom_op("lab::grouped_linear", mutates_args=())
def grouped_linear_cpu(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x [N, in] x weight [E, out, in] (nn.Linear's layout) -> [N, out], row groups ending at offs. Its backward
    gives the weight's gradient in the weight's own layout, grad^T x per group: the gradient of a transposed view
    would come back transposed and autograd would copy it (two [E, out, in] copies per step, measured)."""
    return torch._grouped_mm(x, weight.transpose(1, 2), offs=offs)


@grouped_linear_cpu.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[1])


def _grouped_linear_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _grouped_linear_backward(ctx, grad: torch.Tensor):
    x, weight, offs = ctx.saved_tensors
    grad = grad.contiguous()
    grad_x = grouped_mm(grad, weight, offs) if ctx.needs_input_grad[0] else None  # [N, out] x [E, out, in]
    grad_w = grouped_mm(grad.t(), x, offs) if ctx.needs_input_grad[1] else None  # [out, N] x [N, in] -> [E, out, in]
    return grad_x, grad_w, None


grouped_linear_cpu.register_autograd(_grouped_linear_backward, setup_context=_grouped_linear_setup)


def gather_rows(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """src.index_select(0, index) -> [len(index), ...]. On a CPU as an opaque op whose backward is an ATen
    index_add: the built-in backward, and index_add itself, compile to atomic adds there, and inductor's kernels
    for the MoE layer's gathers and scatters ran 3-5x slower than ATen's (64 experts, 2 threads: the compiled
    layer 1.6x slower than eager). On a GPU inductor's own kernels (what experiments/gpu measured)."""
    return _gather_rows(src, index) if src.device.type == "cpu" else src.index_select(0, index)


def sum_rows_into(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """[size, ...] zeros with every row src[i] added into row index[i] (index_add); on a CPU an opaque op (see
    gather_rows)."""
    if src.device.type == "cpu":
        return _sum_rows_into(src, index, size)
    return src.new_zeros(size, *src.shape[1:]).index_add_(0, index, src)


@torch.library.custom_op("lab::gather_rows", mutates_args=())
def _gather_rows(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return src.index_select(0, index)


@torch.library.custom_op("lab::sum_rows_into", mutates_args=())
def _sum_rows_into(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    return src.new_zeros(size, *src.shape[1:]).index_add_(0, index, src)


@_gather_rows.register_fake
def _(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return src.new_empty(index.shape[0], *src.shape[1:])


@_sum_rows_into.register_fake
def _(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    return src.new_empty(size, *src.shape[1:])


def _keep_index(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[1])
    ctx.size = inputs[0].shape[0]


_gather_rows.register_autograd(
    lambda ctx, grad: (_sum_rows_into(grad.contiguous(), ctx.saved_tensors[0], ctx.size), None),
    setup_context=_keep_index)
_sum_rows_into.register_autograd(
    lambda ctx, grad: (_gather_rows(grad, ctx.saved_tensors[0]), None, None), setup_context=_keep_index)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """x: [N, in], rows grouped by expert, group e ending at row ends[e] (ends[-1] = N: rows past it would come
    back undefined); weight: [E, out, in] -> [N, out], no bias."""
    out_features = weight.shape[1]
    align = 16 // x.element_size()  # the kernels want every row to be a whole number of 16-byte units
    pad_in, pad_out = -x.shape[1] % align, -out_features % align
    if pad_in or pad_out:  # zero columns add nothing to the products
        x, weight = F.pad(x, (0, pad_in)), F.pad(weight, (0, pad_in, 0, pad_out))
    # CUDA's native op compiles as it is
    y = F.grouped_mm(x, weight.transpose(1, 2), offs=ends) if x.is_cuda else grouped_linear_cpu(x, weight, ends)
    return y[:, :out_features] if pad_out else y


class Experts(StackedExperts):
    """num_experts FFNs of one kind, their weights stacked into single tensors ([E, out, in], nn.Linear's
    layout, so expert e computes exactly what nn.Linear with weight[e] would). One tensor per matrix means an
    expert that gets no tokens in a step still belongs to a parameter that gets a gradient: DDP needs no
    find_unused_parameters."""

    def __init__(self, num_experts: int, dim: int, hidden: int, kind: str, bias: bool, dropout: float = 0.0,
                 dispatch: str = "auto"):
        super().__init__()
        if kind not in FFN_KINDS:
            raise ConfigError(f"model.ffn={kind!r} is not supported; choose one of {', '.join(FFN_KINDS)}")
        self.kind, self.dropout, self.dispatch = kind, dropout, dispatch
        width_in = 2 * hidden if kind == "swiglu" else hidden  # swiglu: gate and up fused, as in lab.nn.ffn
        self.w_in = nn.Parameter(torch.empty(num_experts, width_in, dim))
        self.w_out = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.b_in = nn.Parameter(torch.zeros(num_experts, width_in)) if bias else None
        self.b_out = nn.Parameter(torch.zeros(num_experts, dim)) if bias else None
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

    def uses_grouped_mm(self, x: torch.Tensor) -> bool:
        if self.dispatch != "auto":
            return self.dispatch == "grouped_mm"
        if not grouped_mm_supported(x.device, compute_dtype(x)[0]):
            return False
        # eager on a CPU with a few wide experts the loop measured faster (its matmuls take the bias; reading the
        # group sizes costs nothing without a device); compiled: grouped_mm, whose shapes are static
        few_on_cpu = x.device.type == "cpu" and self.num_experts <= LOOP_MAX_EXPERTS_CPU
        return not few_on_cpu or torch.compiler.is_compiling()

    def forward(self, x: torch.Tensor, expert: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """x: [N, D] rows sorted by expert; expert: [N] each row's expert, or E for a row no expert is meant to
        compute (padding, over capacity), all of those at the end; gate: [N] each row's weight (0 for those rows)
        -> [N, D] the rows' gate-weighted outputs *without* the output bias (output_bias adds it per token, one
        small matmul instead of a bias row per assignment). grouped_mm runs the unrouted rows through the last
        expert (rows past its groups would come back undefined, in the output and in the input's gradient;
        masking them costs two passes over [N, D], the few extra rows less) and their gate 0 zeroes them; the
        loop returns 0 for them."""
        if not self.uses_grouped_mm(x):
            return self._loop(x, expert, gate)
        E, N = self.num_experts, x.shape[0]
        last = torch.full((1,), N, dtype=torch.int32, device=x.device)
        ends = torch.cat([torch.searchsorted(expert, torch.arange(1, E, device=x.device)).to(torch.int32), last])
        dtype, autocast = compute_dtype(x)
        cast = (lambda t: t.to(dtype) if t is not None else None) if autocast else (lambda t: t)
        h = grouped_linear(cast(x), cast(self.w_in), ends)
        if self.b_in is not None:
            h = h + gather_rows(cast(self.b_in), expert.clamp(max=E - 1))
        return self._gated_output(h, gate, lambda h: grouped_linear(h, cast(self.w_out), ends))

    def _gated_output(self, h: torch.Tensor, gate: torch.Tensor, project) -> torch.Tensor:
        """Activation, dropout, the output projection `project` and the gate [..] on the hidden rows h [.., H]. The
        projection is linear, so gate * (h W) = (gate * h) W: the gate multiplies the narrower of the hidden and
        the output rows (fine-grained experts: H < D)."""
        h = self._hidden(h)
        gate = gate.unsqueeze(-1).to(h.dtype)
        return project(h * gate) if h.shape[-1] <= self.w_out.shape[1] else project(h) * gate

    def output_bias(self, weights: torch.Tensor) -> torch.Tensor | None:
        """weights: [T, E] each token's gate on each expert (0 where not routed) -> [T, D] the gate-weighted sum
        of the experts' output biases (None without biases)."""
        return weights.to(self.b_out.dtype) @ self.b_out if self.b_out is not None else None

    def _loop(self, x: torch.Tensor, expert: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """One matmul pair per expert on its slice; the slice sizes are read to the host (data-dependent shapes
        under torch.compile)."""
        counts = torch.bincount(expert, minlength=self.num_experts + 1)[: self.num_experts].tolist()
        computed = sum(counts)
        # unbind once: its backward stacks the per-expert grads into one tensor (zeros for idle experts)
        w_in, w_out = self.w_in.unbind(0), self.w_out.unbind(0)
        b_in = self.b_in.unbind(0) if self.b_in is not None else [None] * len(counts)
        outputs = [  # idle experts too (empty slices), so every parameter is in the graph
            self._gated_output(F.linear(chunk, w_in[e], b_in[e]), g, lambda h, e=e: F.linear(h, w_out[e]))
            for e, (chunk, g) in enumerate(zip(x[:computed].split(counts), gate[:computed].split(counts)))
        ]
        return torch.cat([*outputs, x.new_zeros(x.shape[0] - computed, x.shape[1])])

    def forward_batched(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """x: [E, C, D], C tokens per expert; gate: [E, C] -> [E, C, D] gate-weighted outputs without the output
        bias (as forward), with one batched matmul per projection."""
        h = torch.bmm(x, self.w_in.transpose(1, 2))  # [E, C, H]
        if self.b_in is not None:
            h = h + self.b_in[:, None, :]
        return self._gated_output(h, gate, lambda h: torch.bmm(h, self.w_out.transpose(1, 2)))  # [E, C, D]


def compute_dtype(x: torch.Tensor) -> tuple[torch.dtype, bool]:
    """The dtype matmuls on x run in: autocast's where it is on (grouped_mm is not an autocast op), else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type), True
    return x.dtype, False


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the data-parallel ranks (a no-op on one process)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = t.clone()
        dist.all_reduce(t)
    return t


class MixtureOfExperts(RoutedFFN):
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
        if moe.bias_update_rate:  # saved with the model: it decides the routing
            self.register_buffer("expert_bias", torch.zeros(experts.num_experts))

    def inactive_parameters(self) -> int:
        """Routed-expert parameters a token does not pass through: all experts but its top_k."""
        return (self.experts.num_experts - self.moe.top_k) * self.experts.params_per_expert()

    def capacity(self, tokens: int | torch.Tensor) -> int | torch.Tensor | None:
        """Per-expert capacity for `tokens` real tokens (an int, or a tensor when padding makes it data)."""
        factor = self.moe.capacity_factor if self.training else self.moe.capacity_factor_eval
        if factor is None:
            return None
        k, E = self.moe.top_k, self.experts.num_experts
        if isinstance(tokens, int):
            return min(tokens, math.ceil(factor * k * tokens / E))
        return torch.minimum(tokens, torch.ceil(factor * k * tokens.double() / E).long())  # as above, on device

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Routing]:
        """x: [B, T, D]; token_mask: [B, T] True on real tokens (padding is neither routed nor counted).
        -> output [B, T, D] and this forward's aux losses and routing statistics."""
        B, T, D = x.shape
        tokens = x.reshape(B * T, D)
        real = token_mask.reshape(B * T) if token_mask is not None else None  # [N]
        route = self._expert_choice if self.moe.router == "expert_choice" else self._token_choice
        out, routing = route(tokens, real)
        out = out.view(B, T, D)  # tokens no expert took stay 0 (pass through the residual)
        return (out + self.shared(x) if self.shared is not None else out), routing

    def _router_scores(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[N, D] -> logits and scores [N, E], at least float32 (routing decisions are precision-sensitive)."""
        if self.moe.jitter and self.training:
            tokens = tokens * torch.empty_like(tokens).uniform_(1.0 - self.moe.jitter, 1.0 + self.moe.jitter)
        logits = self.router(tokens)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return logits, logits.sigmoid() if self.moe.gate == "sigmoid" else logits.softmax(dim=-1)

    def _token_choice(self, tokens: torch.Tensor, real: torch.Tensor | None) -> tuple[torch.Tensor, Routing]:
        N, E, k = tokens.shape[0], self.experts.num_experts, self.moe.top_k
        device = tokens.device
        logits, scores = self._router_scores(tokens)  # [N, E]
        biased = scores + self.expert_bias if self.moe.bias_update_rate else scores  # the bias picks, never weighs
        top_e = biased.topk(k, dim=-1).indices  # [N, k]
        top_p = scores.gather(1, top_e)
        gates = top_p / top_p.sum(-1, keepdim=True) if self.renormalize else top_p
        if real is not None:
            top_e = top_e.masked_fill(~real[:, None], E)  # padding goes to "expert E", which never runs
        n_real = real.sum() if real is not None else N
        capacity = self.capacity(n_real)
        if capacity is None or self.causal:
            # among assignments to one expert, earlier tokens come first, so in a decoder no token's drop depends
            # on a later token of its sequence
            expert, gate = top_e.reshape(-1), gates.reshape(-1)  # [N*k]
            row = torch.arange(N, device=device).repeat_interleave(k)
            order = torch.argsort(expert, stable=True)
        else:
            # router priority (batch-prioritised routing, Riquelme et al. 2021): all first choices before any
            # second choice, and within a choice rank the more confident assignment first
            expert, gate = top_e.t().reshape(-1), gates.t().reshape(-1)  # [k*N], choice-major
            row = torch.arange(N, device=device).repeat(k)
            choice = torch.arange(k, device=device).repeat_interleave(N)
            order = torch.argsort(-top_p.t().reshape(-1), stable=True)
            order = order[torch.argsort((expert * k + choice)[order], stable=True)]
        counts = torch.zeros(E + 1, dtype=torch.long, device=device).scatter_add_(0, expert, torch.ones_like(expert))
        sorted_expert = expert[order]  # [N*k] ascending; E (padding) last
        if capacity is not None:
            rank_in_expert = torch.arange(N * k, device=device) - (counts.cumsum(0) - counts)[sorted_expert]
            sorted_expert = sorted_expert.masked_fill(rank_in_expert >= capacity, E)  # over capacity: not run
        kept = sorted_expert < E  # [N*k]; not: padding, over capacity
        weight = torch.where(kept, gate[order], 0.0)
        if capacity is not None:
            regroup = torch.argsort(sorted_expert, stable=True)  # the dropped join the padding at the end
            order, sorted_expert, weight = order[regroup], sorted_expert[regroup], weight[regroup]
        rows = row[order]  # [N*k] the token of each sorted assignment
        outputs = self.experts(gather_rows(tokens, rows), sorted_expert, weight)  # [N*k, D] weighted, by expert
        out = self._combine(tokens, rows, sorted_expert, outputs, weight)

        counts = counts[:E]
        if self.training and self.moe.bias_update_rate:
            self._update_bias(counts)
        assignments = n_real * k
        kept = kept.sum()
        return out, self._record(logits, scores, real, counts, dropped=(assignments - kept) / max_one(assignments))

    def _combine(self, tokens: torch.Tensor, rows: torch.Tensor, expert: torch.Tensor, outputs: torch.Tensor,
                 weight: torch.Tensor) -> torch.Tensor:
        """Sum every token's gate-weighted expert outputs: outputs [A, D] of A assignments, rows [A] their tokens,
        expert [A] their experts (E: none), weight [A] their gates (0: none) -> [N, D], with the experts' output
        biases added as one [N, E] x [E, D] matmul of each token's gates."""
        out = sum_rows_into(outputs.to(tokens.dtype), rows, tokens.shape[0])
        if self.experts.b_out is None:
            return out
        E = self.experts.num_experts
        # accumulate: a token meets an expert once, but its unrun assignments (gate 0) all land in column E
        weights = weight.new_zeros(tokens.shape[0], E + 1).index_put_((rows, expert), weight, accumulate=True)
        return out + self.experts.output_bias(weights[:, :E]).to(out.dtype)

    @torch.no_grad()
    def _update_bias(self, counts: torch.Tensor) -> None:
        """DeepSeek-V3's update: overloaded experts' bias down by the rate, underloaded ones' up (global load)."""
        load = all_reduce_sum(counts.float())
        self.expert_bias += self.moe.bias_update_rate * torch.sign(load.mean() - load)

    def _expert_choice(self, tokens: torch.Tensor, real: torch.Tensor | None) -> tuple[torch.Tensor, Routing]:
        N = tokens.shape[0]
        logits, scores = self._router_scores(tokens)  # [N, E]
        capacity = self.capacity(N)  # the static size; with padding the real capacity (a tensor) masks it
        ranking = scores.masked_fill(~real[:, None], -1.0) if real is not None else scores  # padding last
        gate, rows = ranking.t().topk(capacity, dim=-1)  # [E, C]: each expert's C best tokens
        taken = torch.ones_like(gate, dtype=torch.bool)  # [E, C]
        if real is not None:
            taken = taken & (torch.arange(capacity, device=tokens.device) < self.capacity(real.sum()))
        weight = torch.where(taken, gate, 0.0)  # [E, C]
        outputs = self.experts.forward_batched(gather_rows(tokens, rows.reshape(-1)).view(*rows.shape, -1), weight)
        expert = torch.arange(rows.shape[0], device=tokens.device).repeat_interleave(capacity)  # [E*C]
        out = self._combine(tokens, rows.reshape(-1), expert, outputs.reshape(-1, tokens.shape[1]), weight.reshape(-1))

        experts_per_token = torch.zeros(N, device=tokens.device).index_add_(0, rows.reshape(-1), taken.reshape(-1).float())
        untaken = experts_per_token == 0
        n_real = N
        if real is not None:
            untaken, n_real = untaken & real, real.sum()
        return out, self._record(logits, scores, real, counts=taken.sum(-1), dropped=untaken.sum() / max_one(n_real))

    def _record(self, logits: torch.Tensor, scores: torch.Tensor, real: torch.Tensor | None, counts: torch.Tensor,
                dropped: torch.Tensor) -> Routing:
        """Aux losses (weighted, in the graph) and routing statistics (detached) of this forward, over real
        tokens. counts: [E] assignments per expert (token choice: before capacity)."""
        probs = scores if self.moe.gate == "softmax" else scores / scores.sum(-1, keepdim=True)  # [N, E]

        def mean_over_real(v: torch.Tensor) -> torch.Tensor:  # [N, ...] -> [...]; where, not *: padding may be inf
            if real is None:
                return v.mean(0)
            mask = real.view(-1, *[1] * (v.dim() - 1))
            return torch.where(mask, v, 0.0).sum(0) / max_one(real.sum())

        z_loss = mean_over_real(torch.logsumexp(logits, dim=-1).square())
        losses = {"z_loss": (z_loss, self.moe.z_loss_weight)}
        fraction = counts.float() / max_one(counts.sum())
        if self.moe.router == "token_choice":
            if self.moe.load_balance_scope == "global":
                global_counts = all_reduce_sum(counts.float())
                fraction = global_counts / max_one(global_counts.sum())
            load_balance = self.experts.num_experts * (fraction * mean_over_real(probs)).sum()
            losses["load_balance"] = (load_balance, self.moe.load_balance_weight)
        weighted = {name: weight * value for name, (value, weight) in losses.items() if weight}
        with torch.no_grad():
            entropy = mean_over_real(-(probs * probs.clamp(min=1e-30).log()).sum(-1))
            stats = {
                **{name: value.detach() for name, (value, _) in losses.items()},
                "entropy": entropy,
                "dropped": torch.as_tensor(dropped, dtype=torch.float32).detach(),
                "expert_fraction": fraction.detach(),
            }
            if self.moe.bias_update_rate:
                stats["bias"] = self.expert_bias.clone()
        return Routing(weighted, stats)


def max_one(n: int | torch.Tensor) -> int | torch.Tensor:
    """A count as a denominator: at least 1 (a batch of padding only has no real token)."""
    return n.clamp(min=1) if isinstance(n, torch.Tensor) else max(n, 1)


def make_moe(cfg: TransformerConfig, causal: bool) -> MixtureOfExperts:
    moe = cfg.moe
    hidden = moe.expert_hidden or cfg.d_ff
    shared = make_ffn(cfg.ffn, cfg.d_model, moe.num_shared * hidden, cfg.bias, cfg.dropout) if moe.num_shared else None
    return MixtureOfExperts(
        router=nn.Linear(cfg.d_model, moe.num_experts, bias=False),
        experts=Experts(moe.num_experts, cfg.d_model, hidden, cfg.ffn, cfg.bias, cfg.dropout, moe.dispatch),
        moe=moe,
        causal=causal,
        shared=shared,  # n shared experts = one FFN n times as wide (the sum of their outputs, fused)
    )
