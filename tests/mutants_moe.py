"""One-line bugs in lab/nn/moe.py that the MoE tests must kill, for the mutation script (tests/mutants.py).

Each entry: name, file (relative to the repository root), a snippet occurring exactly once in that file,
its replacement, and the test files that must fail once it is applied.
"""
from __future__ import annotations

from typing import NamedTuple


class Mutant(NamedTuple):
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MOE = "lab/nn/moe.py"
REFERENCE = ("tests/nn/test_moe_reference.py",)

MUTANTS = [
    # the three issue 10 found surviving the whole suite
    Mutant(
        "moe: every expert uses expert 0's output weights",
        MOE,
        "lambda h: grouped_linear(h, cast(self.w_out), ends))",
        "lambda h: grouped_linear(h, cast(self.w_out[:1].expand_as(self.w_out)), ends))",
        REFERENCE,
    ),
    Mutant(
        "moe: experts' outputs applied in reverse order",
        MOE,
        "out = sum_rows_into(outputs.to(tokens.dtype), rows, tokens.shape[0])",
        "out = sum_rows_into(outputs.to(tokens.dtype), rows.flip(0), tokens.shape[0])",
        REFERENCE,
    ),
    Mutant(
        "moe: top-2 gates left un-renormalised",
        MOE,
        "gates = top_p / top_p.sum(-1, keepdim=True) if self.renormalize else top_p",
        "gates = top_p",
        REFERENCE,
    ),
    # more
    Mutant(
        "moe: decoders drop by router priority (a token's drop depends on later tokens)",
        MOE,
        "if capacity is None or self.causal:",
        "if capacity is None:",
        REFERENCE,
    ),
    Mutant(
        "moe: padding tokens are routed (and take capacity)",
        MOE,
        'top_e = top_e.masked_fill(~real[:, None], E)  # padding goes to "expert E", which never runs',
        "pass",
        REFERENCE,
    ),
    Mutant(
        "moe: capacity one larger than configured",
        MOE,
        "sorted_expert.masked_fill(rank_in_expert >= capacity, E)",
        "sorted_expert.masked_fill(rank_in_expert > capacity, E)",
        REFERENCE,
    ),
    Mutant(
        "moe: the per-expert loop uses expert 0's input weights",
        MOE,
        "self._gated_output(F.linear(chunk, w_in[e], b_in[e]), g,",
        "self._gated_output(F.linear(chunk, w_in[0], b_in[e]), g,",
        REFERENCE,
    ),
    Mutant(
        "moe: expert choice ignores the gate",
        MOE,
        "torch.where(taken, gate, 0.0)",
        "torch.where(taken, 1.0, 0.0)",
        REFERENCE,
    ),
    Mutant(
        "moe: dropped and padding rows keep their gate (grouped_mm runs them through the last expert)",
        MOE,
        "weight = torch.where(kept, gate[order], 0.0)",
        "weight = gate[order]",
        REFERENCE,
    ),
    Mutant(
        "moe: each token gets another token's output biases",
        MOE,
        "index_put_((rows, expert), weight, accumulate=True)",
        "index_put_((rows.flip(0), expert), weight, accumulate=True)",
        REFERENCE,
    ),
    Mutant(
        "moe: fine-grained experts (gate on the hidden rows) lose the gate",
        MOE,
        "return project(h * gate) if h.shape[-1]",
        "return project(h) if h.shape[-1]",
        REFERENCE,
    ),
    Mutant(
        "moe: dispatch=auto picks the per-expert loop under torch.compile (data-dependent shapes)",
        MOE,
        "return not few_on_cpu or torch.compiler.is_compiling()",
        "return not few_on_cpu",
        ("tests/nn/test_moe.py::test_auto_dispatch_runs_the_loop_only_eager_on_a_cpu_with_few_experts",),
    ),
    Mutant(
        "memory: only the trim threshold is raised (large blocks still mmapped anew)",
        "lab/runtime/trainer/memory.py",
        "M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3",
        "M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -1",
        ("tests/runtime/trainer/test_memory.py",),
    ),
    Mutant(
        "moe: gather_rows' backward sums the gradients into the wrong rows",
        MOE,
        "(_sum_rows_into(grad.contiguous(), ctx.saved_tensors[0], ctx.size), None)",
        "(_sum_rows_into(grad.contiguous(), ctx.saved_tensors[0].flip(0), ctx.size), None)",
        REFERENCE,
    ),
    Mutant(
        "moe: grouped_linear's weight gradient pairs each group's gradients with other rows",
        MOE,
        "grouped_mm(grad.t(), x, offs) if ctx.needs_input_grad[1]",
        "grouped_mm(grad.t(), x.flip(0), offs) if ctx.needs_input_grad[1]",
        REFERENCE,
    ),
    Mutant(
        "moe: z-loss not squared",
        MOE,
        "torch.logsumexp(logits, dim=-1).square()",
        "torch.logsumexp(logits, dim=-1)",
        REFERENCE,
    ),
    Mutant(
        "moe: the balancing bias also weighs the expert output",
        MOE,
        "top_p = scores.gather(1, top_e)",
        "top_p = biased.gather(1, top_e)",
        ("tests/nn/test_moe_balancing.py",),
    ),
    Mutant(
        "moe: the balancing bias pushes load towards the busy experts",
        MOE,
        "torch.sign(load.mean() - load)",
        "torch.sign(load - load.mean())",
        ("tests/nn/test_moe_balancing.py",),
    ),
]
