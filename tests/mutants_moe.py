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
REFERENCE = ("tests/test_moe_reference.py",)

MUTANTS = [
    # the three issue 10 found surviving the whole suite
    Mutant(
        "moe: every expert uses expert 0's output weights",
        MOE,
        "y = grouped_linear(h, cast(self.w_out), cast(self.b_out), expert, ends)",
        "y = grouped_linear(h, cast(self.w_out[:1].expand_as(self.w_out)), cast(self.b_out), expert, ends)",
        REFERENCE,
    ),
    Mutant(
        "moe: experts' outputs applied in reverse order",
        MOE,
        "out = torch.zeros_like(tokens).index_add_(0, rows, (outputs * gate[order, None]).to(tokens.dtype))",
        "out = torch.zeros_like(tokens).index_add_(0, rows.flip(0), (outputs * gate[order, None]).to(tokens.dtype))",
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
        "F.linear(self._hidden(F.linear(chunk, w_in[e], b_in[e])), w_out[e], b_out[e])",
        "F.linear(self._hidden(F.linear(chunk, w_in[0], b_in[e])), w_out[e], b_out[e])",
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
        ("tests/test_moe_balancing.py",),
    ),
    Mutant(
        "moe: the balancing bias pushes load towards the busy experts",
        MOE,
        "torch.sign(load.mean() - load)",
        "torch.sign(load - load.mean())",
        ("tests/test_moe_balancing.py",),
    ),
]
