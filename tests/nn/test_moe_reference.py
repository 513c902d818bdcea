"""MixtureOfExperts against a plain per-token reference written here, independently of lab.nn.moe.

The reference loops over tokens and over each token's chosen experts and adds gate x expert FFN, applying
capacity drops in the documented order with a Python counter (decoders: token order; encoders: router
priority: all first choices before second choices, the more confident first). Outputs and gradients
(input, router, every expert's weights and biases, shared experts) must match for every routing variant,
FFN kind, bias setting and dispatch path. The auxiliary losses are checked by hand on a small example.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lab.nn import TransformerConfig
from lab.nn.moe import make_moe

E = 6  # experts; >= 4 and each one's weights drawn independently at a scale where outputs differ a lot


def build(d_model: int, ffn: str, bias: bool, causal: bool, dispatch: str = "auto", **moe):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=d_model, n_heads=2, n_layers=1, d_ff=2 * d_model, ffn=ffn, bias=bias,
                            moe={"num_experts": E, "dispatch": dispatch, **moe})
    layer = make_moe(cfg, causal).train()
    with torch.no_grad():  # far from the 0.02 init, so a wrong expert, gate or bias moves the output visibly
        for p in layer.parameters():
            p.normal_(0.0, 0.5)
        layer.router.weight.normal_(0.0, 1.0)
        if moe.get("bias_update_rate"):  # a balancing bias far from 0, so it changes which experts are chosen
            layer.expert_bias.normal_(0.0, 0.3)
    return layer


# --- the reference ---------------------------------------------------------------------------------------


def expert_ffn(layer, e: int, x: torch.Tensor) -> torch.Tensor:
    """Expert e on one token x [D]: down(act(up(x))) (swiglu: silu(gate) * up, gate the first half)."""
    ex = layer.experts
    h = ex.w_in[e] @ x + (ex.b_in[e] if ex.b_in is not None else 0.0)
    if ex.kind == "swiglu":
        half = h.shape[0] // 2
        h = F.silu(h[:half]) * h[half:]
    elif ex.kind == "relu":
        h = torch.relu(h)
    else:
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))  # GPT-2's gelu
    return ex.w_out[e] @ h + (ex.b_out[e] if ex.b_out is not None else 0.0)


def shared_ffn(layer, x: torch.Tensor) -> torch.Tensor:
    """The shared experts, summed, on one token (one dense FFN num_shared times as wide, lab.nn.ffn)."""
    s = layer.shared
    if hasattr(s, "gate_up"):
        gate, up = (s.gate_up.weight @ x + (s.gate_up.bias if s.gate_up.bias is not None else 0.0)).chunk(2)
        h = F.silu(gate) * up
    else:
        h = s.up.weight @ x + (s.up.bias if s.up.bias is not None else 0.0)
        h = torch.relu(h) if isinstance(s.act, torch.nn.ReLU) else F.gelu(h, approximate="tanh")
    return s.down.weight @ h + (s.down.bias if s.down.bias is not None else 0.0)


def reference(layer, x: torch.Tensor, mask: torch.Tensor | None, settings: dict, causal: bool):
    """Per-token MoE: returns the output [B, T, D] and what was routed (kept, dropped) for sanity checks."""
    B, T, _ = x.shape
    k = settings.get("top_k", 2)
    real = [(b, t) for b in range(B) for t in range(T) if mask is None or mask[b, t]]  # token order
    M = len(real)
    score = torch.sigmoid if settings.get("gate") == "sigmoid" else lambda v: torch.softmax(v, dim=0)
    probs = [score(layer.router.weight @ x[b, t]) for b, t in real]
    bias = layer.expert_bias.clone() if settings.get("bias_update_rate") else torch.zeros(E)  # picks, never weighs
    factor = settings.get("capacity_factor", 1.25) if layer.training else settings.get("capacity_factor_eval", 2.0)
    capacity = None if factor is None else min(M, math.ceil(factor * k * M / E))
    out = [[torch.zeros_like(x[0, 0]) for _ in range(T)] for _ in range(B)]
    kept = []  # (token, expert, gate)
    dropped = 0
    if settings.get("router", "token_choice") == "expert_choice":
        for e in range(E):
            ranked = sorted(range(M), key=lambda m: -probs[m][e].item())
            kept += [(m, e, probs[m][e]) for m in ranked[:capacity]]
        dropped = M - len({m for m, _, _ in kept})
    else:
        renormalize = settings.get("renormalize")
        renormalize = k > 1 if renormalize is None else renormalize
        assignments = []  # (token, choice, expert, probability, gate)
        for m, p in enumerate(probs):
            chosen = sorted(range(E), key=lambda e: -(p[e] + bias[e]).item())[:k]
            total = sum(p[e] for e in chosen)
            for j, e in enumerate(chosen):
                assignments.append((m, j, e, p[e], p[e] / total if renormalize else p[e]))
        if capacity is not None and not causal:  # router priority: choice, then confidence, then token
            assignments.sort(key=lambda a: (a[1], -a[3].item(), a[0]))
        load = [0] * E
        for m, _, e, _, gate in assignments:  # token order in a decoder (and when dropless)
            if capacity is None or load[e] < capacity:
                load[e] += 1
                kept.append((m, e, gate))
            else:
                dropped += 1
    for m, e, gate in kept:
        b, t = real[m]
        out[b][t] = out[b][t] + gate * expert_ffn(layer, e, x[b, t])
    if layer.shared is not None:
        out = [[out[b][t] + shared_ffn(layer, x[b, t]) for t in range(T)] for b in range(B)]
    return torch.stack([torch.stack(row) for row in out]), kept, dropped


# --- outputs and gradients -------------------------------------------------------------------------------

ROUTING = {  # id: (moe settings, causal, padded)
    "top1-raw-dropless": (dict(top_k=1, capacity_factor=None), False, False),
    "top2-renormalised-dropless": (dict(top_k=2, capacity_factor=None), False, False),
    "top2-raw-dropless": (dict(top_k=2, renormalize=False, capacity_factor=None), False, False),
    "top1-capacity-encoder-priority": (dict(top_k=1, capacity_factor=0.75), False, False),
    "top2-capacity-encoder-priority": (dict(top_k=2, capacity_factor=0.6), False, False),
    "top2-capacity-decoder-token-order": (dict(top_k=2, capacity_factor=0.6), True, False),
    "top2-sigmoid-capacity-encoder": (dict(top_k=2, gate="sigmoid", capacity_factor=0.6), False, False),
    "top1-sigmoid-raw-dropless": (dict(top_k=1, gate="sigmoid", capacity_factor=None), False, False),
    "top2-balancing-bias-capacity-decoder": (dict(top_k=2, bias_update_rate=0.01, capacity_factor=0.6), True, False),
    "top2-balancing-bias-sigmoid-encoder": (
        dict(top_k=2, gate="sigmoid", bias_update_rate=0.01, capacity_factor=0.6),
        False,
        False,
    ),
    # experts narrower than d_model: the gate multiplies the hidden rows, not the output rows
    "top2-fine-grained-capacity-encoder": (dict(top_k=2, expert_hidden=8, capacity_factor=0.6), False, False),
    "top2-fine-grained-padding-dropless-decoder": (dict(top_k=2, expert_hidden=8, capacity_factor=None), True, True),
    "top2-shared2-capacity": (dict(top_k=2, num_shared=2, capacity_factor=0.6), False, False),
    "top2-padding-capacity-encoder": (dict(top_k=2, capacity_factor=0.6), False, True),
    "top2-padding-capacity-decoder": (dict(top_k=2, capacity_factor=0.6), True, True),
    "top2-padding-dropless-decoder": (dict(top_k=2, capacity_factor=None), True, True),
    "expert-choice": (dict(top_k=2, router="expert_choice", capacity_factor=0.4), False, False),
    "expert-choice-fine-grained": (dict(top_k=2, router="expert_choice", capacity_factor=0.4, expert_hidden=8),
                                   False, False),
    "expert-choice-padding-shared": (dict(top_k=2, router="expert_choice", capacity_factor=0.4, num_shared=1),
                                     False, True),
}
DISPATCH = {  # id: (dispatch, d_model); expert choice always runs one batched matmul
    "grouped-mm": ("grouped_mm", 16),
    "grouped-mm-padded-width": ("grouped_mm", 10),  # rows not a whole number of 16 bytes: zero-padded
    "loop": ("loop", 16),
}


CASES = [  # expert choice has one dispatch (equal groups, one batched matmul): not crossed with loop
    pytest.param(case, dispatch, id=f"{case_id}-{dispatch_id}")
    for case_id, case in ROUTING.items()
    for dispatch_id, dispatch in DISPATCH.items()
    if not (case[0].get("router") == "expert_choice" and dispatch[0] == "loop")
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("ffn", ["relu", "gelu", "swiglu"])
@pytest.mark.parametrize("case,dispatch", CASES)
def test_moe_equals_the_per_token_reference_in_outputs_and_gradients(case, dispatch, ffn, bias):
    settings, causal, padded = case
    dispatch, d_model = dispatch
    layer = build(d_model, ffn, bias, causal, dispatch, **settings)
    B, T = 2, 11
    x = torch.randn(B, T, d_model, requires_grad=True)
    mask = None
    if padded:  # row 0 full, row 1 with 4 padding positions holding loud garbage
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[1, 7:] = False
        with torch.no_grad():
            x[1, 7:] *= 10
    expected, kept, dropped = reference(layer, x, mask, settings, causal)
    if settings.get("capacity_factor") is not None:
        assert dropped > 0 and kept, "the case must drop some assignments and keep others"
    got = (layer(x, mask) if mask is not None else layer(x))[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)

    params = dict(layer.named_parameters())
    weights = torch.randn_like(expected)  # a loss that weighs every output element differently
    grads = torch.autograd.grad((got * weights).sum(), [x, *params.values()])
    ref_grads = torch.autograd.grad((expected * weights).sum(), [x, *params.values()])
    for name, g, r in zip(["input", *params], grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"grad of {name}: {m}")
    assert params["router.weight"].ndim == 2 and grads[1 + list(params).index("router.weight")].abs().sum() > 0


def test_the_reference_cases_reach_every_expert_and_exercise_drops_by_priority():
    """The cases above are only worth something if experts differ, every expert gets work, and the two drop
    orders disagree on which assignments survive on the same input."""
    settings = dict(top_k=2, capacity_factor=0.6)
    x = torch.randn(2, 11, 16)
    encoder, decoder = build(16, "gelu", True, False, **settings), build(16, "gelu", True, True, **settings)
    _, kept_enc, _ = reference(encoder, x, None, settings, causal=False)
    _, kept_dec, _ = reference(decoder, x, None, settings, causal=True)
    assert {e for _, e, _ in kept_enc} == set(range(E))
    assert {(m, e) for m, e, _ in kept_enc} != {(m, e) for m, e, _ in kept_dec}
    w = encoder.experts.w_out
    assert all((w[i] - w[j]).abs().max() > 0.1 for i in range(E) for j in range(i))


# --- auxiliary losses by hand ----------------------------------------------------------------------------


def test_aux_losses_and_statistics_by_hand():
    """4 real tokens (+1 padding), 4 experts, top-2 with logits set through the router weights:
    load balance = E * sum_i f_i P_i over real tokens, z-loss = mean logsumexp^2, both weighted."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=1, d_ff=16, moe=dict(
        num_experts=4, top_k=2, capacity_factor=None, load_balance_weight=0.5, z_loss_weight=0.25))
    layer = make_moe(cfg, causal=False)
    logits = [[2.0, 1.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0], [1.0, 0.0, 2.0, 0.5], [2.0, 0.0, 0.0, 1.5]]
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:, :4] = torch.tensor(logits).t()  # token m = unit vector m gives logits[m]
    x = torch.eye(5, 8)[None]  # token 4 is padding (it would give logits 0 and pick experts 0, 1)
    routing = layer(x, torch.tensor([[True, True, True, True, False]]))[1]

    # top-2 per token: {0, 1}, {1, 2}, {2, 0}, {0, 3} -> shares of the 8 assignments
    f = [3 / 8, 2 / 8, 2 / 8, 1 / 8]
    probs = [[math.exp(v) / sum(math.exp(u) for u in row) for v in row] for row in logits]
    P = [sum(p[i] for p in probs) / 4 for i in range(4)]
    load_balance = 4 * sum(fi * pi for fi, pi in zip(f, P))
    z_loss = sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits) / 4
    entropy = -sum(p * math.log(p) for row in probs for p in row) / 4
    stats = routing.stats
    assert stats["expert_fraction"].tolist() == pytest.approx(f)
    assert stats["load_balance"].item() == pytest.approx(load_balance, rel=1e-6)
    assert stats["z_loss"].item() == pytest.approx(z_loss, rel=1e-6)
    assert stats["entropy"].item() == pytest.approx(entropy, rel=1e-6)
    assert stats["dropped"].item() == 0.0
    assert routing.losses["load_balance"].item() == pytest.approx(0.5 * load_balance, rel=1e-6)
    assert routing.losses["z_loss"].item() == pytest.approx(0.25 * z_loss, rel=1e-6)


def test_dropped_share_and_expert_choice_shares_by_hand():
    """Expert choice, 4 experts x capacity 1 over 4 tokens: experts 0 and 1 both take token 0, 2 takes
    token 1, 3 takes token 2: token 3 is taken by none (dropped 1/4) and the shares are counted, not assumed."""
    cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=1, d_ff=16, moe=dict(
        num_experts=4, top_k=1, router="expert_choice", capacity_factor=1.0))
    layer = make_moe(cfg, causal=False)
    logits = [[5.0, 5.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0], [0.0, 0.0, 0.0, 5.0], [1.0, 1.0, 1.0, 1.0]]
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:, :4] = torch.tensor(logits).t()
    routing = layer(torch.eye(4, 8)[None])[1]
    assert routing.stats["dropped"].item() == pytest.approx(0.25)
    assert routing.stats["expert_fraction"].tolist() == pytest.approx([0.25] * 4)
    assert "load_balance" not in routing.losses  # expert choice is balanced by construction
