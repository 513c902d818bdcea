"""MoE compiles as one graph (torch.compile(fullgraph=True) raises on any graph break, e.g. a host read of
the per-expert counts) and the compiled layer and model compute what eager does, forward and backward.

The default tests use the aot_eager backend: Dynamo's capture and AOTAutograd's forward/backward graphs (with
the fake shapes of every op) are what can break; inductor's code generation adds minutes of C++ compilation
on CPU and is exercised by the slow test and benchmarks/moe.py --compile.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab.models.gpt import GPT
from lab.nn import TransformerConfig
from lab.nn.moe import make_moe

D = 16
# Compiled, dispatch=auto is grouped_mm; eager at 4 experts on a CPU it would be the per-expert loop, whose GEMMs
# sum in another order (gradients 1e-5 apart on an AMD host). Both sides run grouped_mm, so the tolerance can
# stay at float32 rounding; each path against the per-token reference is tests/nn/test_moe_reference.py.
GROUPED = dict(num_experts=4, top_k=2, dispatch="grouped_mm")
LAYERS = {  # id: (moe settings, causal)
    "token-choice-capacity-decoder": (dict(GROUPED, capacity_factor=0.75), True),
    "token-choice-capacity-encoder": (dict(GROUPED, capacity_factor=0.75), False),
    "token-choice-dropless-sigmoid-bias": (
        dict(GROUPED, capacity_factor=None, gate="sigmoid", bias_update_rate=0.01),
        True,
    ),
    "expert-choice": (dict(num_experts=4, top_k=2, router="expert_choice", capacity_factor=0.75), False),
}


def compiled_equals_eager(moe: dict, causal: bool, backend: str) -> None:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, n_heads=2, n_layers=1, d_ff=32, moe=moe)
    eager = make_moe(cfg, causal).train()
    with torch.no_grad():
        for p in eager.parameters():
            p.normal_(0.0, 0.5)
    compiled = make_moe(cfg, causal).train()
    compiled.load_state_dict(eager.state_dict())
    step = torch.compile(compiled, fullgraph=True, backend=backend)
    # inductor fuses and reorders float sums (~1e-5 relative); a wrong route or gate would differ by O(1)
    tol = dict(rtol=1e-5, atol=1e-6) if backend == "aot_eager" else dict(rtol=1e-3, atol=1e-5)
    x = torch.randn(2, 9, D)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False  # padding: the real capacity is data, not a shape
    for _ in range(2):  # the second call reuses the graph (and sees the bias the first one moved)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        (y_eager, r_eager), (y_compiled, r_compiled) = eager(xs[0], mask), step(xs[1], mask)
        ys = [y_eager, y_compiled]
        torch.testing.assert_close(ys[1], ys[0], **tol)
        aux = [sum(r.losses.values()) for r in (r_eager, r_compiled)]
        for y, a in zip(ys, aux):
            (y.square().sum() + a).backward()
        torch.testing.assert_close(xs[1].grad, xs[0].grad, **tol)
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **tol, msg=name)
        assert r_compiled.stats.keys() == r_eager.stats.keys() and r_eager.losses
        for key, value in r_eager.stats.items():
            torch.testing.assert_close(r_compiled.stats[key], value, **tol, msg=key)


@pytest.mark.parametrize("moe,causal", LAYERS.values(), ids=LAYERS.keys())
def test_moe_block_compiles_as_one_graph_forward_and_backward(moe, causal):
    compiled_equals_eager(moe, causal, backend="aot_eager")


def test_whole_moe_gpt_compiles_as_one_graph_forward_and_backward():
    torch.manual_seed(0)
    kw = dict(vocab_size=40, d_model=D, n_heads=2, n_layers=2, max_seq_len=12, moe=GROUPED)
    eager = GPT(**kw)
    compiled = GPT(**kw)
    compiled.load_state_dict(eager.state_dict())
    step = torch.compile(compiled, fullgraph=True, backend="aot_eager")
    ids = torch.randint(0, 40, (3, 12))
    losses = []
    for model in (eager, step):
        loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0])
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_moe_block_compiles_with_inductor():
    compiled_equals_eager(*LAYERS["token-choice-capacity-encoder"], backend="inductor")
