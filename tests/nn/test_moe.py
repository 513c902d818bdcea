"""Mixture-of-experts feed-forward: exactness against the dense FFN, routing losses, capacity, padding,
order invariance, gradients, config errors, and training through the CLI (one process and DDP)."""
from __future__ import annotations

import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_LM, read_metrics, run_dirs, train

from lab.errors import ConfigError
from lab.models.gpt import GPT
from lab.nn import TransformerConfig, TransformerStack
from lab.nn.ffn import make_ffn
from lab.nn.moe import LOOP_MAX_EXPERTS_CPU, Experts, make_moe
from lab.nn.params import count_parameters
from lab.tasks.language_model import LanguageModelTask

D = 16


def moe_layer(causal: bool = False, ffn: str = "gelu", **moe):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, n_heads=2, n_layers=1, d_ff=32, ffn=ffn, moe=moe)
    return make_moe(cfg, causal)


def route_to(layer, preferences: torch.Tensor) -> torch.Tensor:
    """Make the router's logits equal `preferences` [M, E] for inputs that are rows of the identity."""
    M, _E = preferences.shape
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:, :M] = preferences.t()  # [E, D]: input e_m gives logits preferences[m]
    return torch.eye(M, D)[None]  # [1, M, D], needs M <= D


@pytest.mark.parametrize("ffn", ["relu", "gelu", "swiglu"])
def test_one_expert_top1_dropless_with_copied_weights_is_the_dense_ffn_exactly(ffn):
    layer = moe_layer(ffn=ffn, num_experts=1, top_k=1, capacity_factor=None, capacity_factor_eval=None)
    dense = make_ffn(ffn, D, 32)
    first = dense.gate_up if ffn == "swiglu" else dense.up
    with torch.no_grad():
        layer.experts.w_in[0].copy_(first.weight)
        layer.experts.b_in[0].copy_(first.bias)
        layer.experts.w_out[0].copy_(dense.down.weight)
        layer.experts.b_out[0].copy_(dense.down.bias)
    x = torch.randn(3, 7, D)
    assert torch.equal(layer(x)[0], dense(x))


@pytest.mark.parametrize("top_k", [1, 2], ids=["top1", "top2"])
def test_load_balance_loss_is_one_for_uniform_routing_and_grows_under_collapse(top_k):
    E = 4
    layer = moe_layer(num_experts=E, top_k=top_k, capacity_factor=None)
    # token m prefers expert m % E, then (m + 1) % E: every expert gets the same share of assignments
    prefs = torch.zeros(8, E)
    prefs[torch.arange(8), torch.arange(8) % E] = 4.0
    prefs[torch.arange(8), (torch.arange(8) + 1) % E] = 2.0
    stats = layer(route_to(layer, prefs))[1].stats
    uniform = stats["load_balance"].item()
    assert torch.allclose(stats["expert_fraction"], torch.full((E,), 1 / E))
    assert uniform == pytest.approx(1.0, abs=1e-6)

    collapsed = torch.zeros(8, E)
    collapsed[:, 0], collapsed[:, 1] = 8.0, 4.0  # everyone picks expert 0 (and 1)
    stats = layer(route_to(layer, collapsed))[1].stats
    assert stats["load_balance"].item() > 1.5 * uniform
    assert stats["entropy"].item() < math.log(E) / 2


@pytest.mark.parametrize("causal", [False, True], ids=["encoder-router-priority", "decoder-token-order"])
def test_capacity_drops_exactly_the_overflow_by_priority(causal):
    E, M = 4, 10
    layer = moe_layer(causal=causal, num_experts=E, top_k=1, capacity_factor=1.0)
    prefs = torch.zeros(M, E)
    prefs[:, 0] = torch.linspace(1.0, 5.0, M)  # all want expert 0; later tokens are more confident
    out, routing = layer(route_to(layer, prefs))
    out = out[0]  # [M, D]
    capacity = math.ceil(1.0 * M / E)  # 3
    assert routing.stats["dropped"].item() == pytest.approx((M - capacity) / M)
    processed = out.abs().sum(-1) > 0
    assert processed.sum().item() == capacity
    # a decoder keeps the earliest tokens (no token's fate depends on a later one); an encoder the most confident
    expected = torch.arange(capacity) if causal else torch.arange(M - capacity, M)
    assert processed.nonzero().squeeze(1).tolist() == expected.tolist()


@pytest.mark.parametrize(
    "top_k,renormalize",
    [(1, None), (2, None), (2, False)],
    ids=["top1-raw-gate", "top2-renormalised", "top2-raw-gates"],
)
def test_task_loss_gradient_reaches_the_router(top_k, renormalize):
    torch.manual_seed(0)
    moe = dict(num_experts=4, top_k=top_k, renormalize=renormalize, load_balance_weight=0.0, z_loss_weight=0.0)
    model = GPT(vocab_size=30, d_model=D, n_heads=2, n_layers=2, max_seq_len=8, moe=moe)
    ids = torch.randint(0, 30, (2, 8))
    F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()  # task loss only
    grads = [layer.ffn.router.weight.grad for layer in model.decoder.layers]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


ROUTERS = {
    "token-choice-capacity": dict(num_experts=4, top_k=2, capacity_factor=1.0),
    "token-choice-dropless": dict(num_experts=4, top_k=2, capacity_factor=None),
    "expert-choice": dict(num_experts=4, top_k=2, router="expert_choice", capacity_factor=1.0),
}


@pytest.mark.parametrize("moe", ROUTERS.values(), ids=ROUTERS.keys())
def test_padding_changes_neither_routing_statistics_nor_real_outputs(moe):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, n_heads=2, n_layers=2, moe=moe)
    stack = TransformerStack(cfg, causal=False).train()  # training capacity: drops happen
    x = torch.randn(2, 6, D)
    short, routing = stack(x)
    assert sorted(routing) == [0, 1]  # every layer is a MoE layer and returns its record
    padded_x = torch.cat([x, 100 * torch.randn(2, 4, D)], dim=1)  # loud garbage in the padding
    mask = torch.arange(10)[None, :].expand(2, -1) < 6
    padded, padded_routing = stack(padded_x, padding_mask=mask)
    for i, before in routing.items():
        for key, value in before.stats.items():
            torch.testing.assert_close(padded_routing[i].stats[key], value, msg=key)
    torch.testing.assert_close(padded[:, :6], short)


@pytest.mark.parametrize("moe", [ROUTERS["token-choice-dropless"], ROUTERS["token-choice-capacity"]],
                         ids=["dropless", "capacity-router-priority"])
def test_output_does_not_depend_on_token_order(moe):
    layer = moe_layer(**moe).train()
    x = torch.randn(1, 24, D)
    perm = torch.randperm(24)
    torch.testing.assert_close(layer(x[:, perm])[0], layer(x)[0][:, perm], rtol=0, atol=1e-6)


def test_parameter_counts_report_active_experts_only():
    dense = GPT(vocab_size=50, d_model=32, n_heads=2, n_layers=2, d_ff=128)
    moe = GPT(vocab_size=50, d_model=32, n_heads=2, n_layers=2, d_ff=128,
              moe=dict(num_experts=8, top_k=2, expert_hidden=64))
    per_expert = 2 * 32 * 64 + 64 + 32
    d, m = count_parameters(dense), count_parameters(moe)
    assert m["total"] - m["active"] == 2 * (8 - 2) * per_expert
    # top-2 of width 64 = one FFN of width 128, plus per layer the router and the second expert's output bias
    assert m["active"] - d["active"] == 2 * (8 * 32 + 32)


def test_stacked_expert_biases_get_no_weight_decay():
    model = GPT(vocab_size=50, d_model=32, n_heads=2, n_layers=1, moe=dict(num_experts=4))
    task = LanguageModelTask(model, functools.partial(torch.optim.AdamW, weight_decay=0.1))
    decayed, plain = task.configure_optimizers().param_groups
    experts = model.decoder.layers[0].ffn.experts
    assert any(p is experts.b_in for p in plain["params"]) and any(p is experts.w_in for p in decayed["params"])


@pytest.mark.parametrize("moe,message", [
    (dict(router="expert_choice"), "cannot be used in a causal decoder"),
    (dict(num_experts=4, top_k=5), r"model\.moe\.top_k=5: must be between 1 and num_experts=4"),
    (dict(expert_count=4), "unknown model.moe field.*expert_count"),
    (dict(every_n=9), "every_n=9: must be between 1 and model.n_layers=2"),
    (dict(router="expert_choice", capacity_factor=None), "needs a capacity"),
    (dict(gate="tanh"), r"model\.moe\.gate='tanh': choose one of softmax, sigmoid"),
    (dict(router="expert_choice", bias_update_rate=0.001), "bias_update_rate=0.001: balances token-choice"),
    (dict(dispatch="fast"), "dispatch='fast': choose one of auto, grouped_mm, loop"),
], ids=["expert-choice-in-decoder", "top-k-above-experts", "unknown-field", "every-n-beyond-depth", "ec-dropless",
        "unknown-gate", "bias-with-expert-choice", "unknown-dispatch"])
def test_bad_moe_settings_are_clear_errors(moe, message):
    with pytest.raises(ConfigError, match=message):
        GPT(vocab_size=10, d_model=D, n_heads=2, n_layers=2, moe=moe)


def test_auto_dispatch_runs_the_loop_only_eager_on_a_cpu_with_few_experts(monkeypatch):
    x = torch.randn(5, 16)
    few, many = (Experts(n, 16, 32, "gelu", bias=True) for n in (LOOP_MAX_EXPERTS_CPU, LOOP_MAX_EXPERTS_CPU + 1))
    assert not few.uses_grouped_mm(x) and many.uses_grouped_mm(x)
    assert not many.uses_grouped_mm(x.double())  # grouped_mm has no float64: the loop
    assert not Experts(64, 16, 32, "gelu", bias=True, dispatch="loop").uses_grouped_mm(x)  # as configured
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert few.uses_grouped_mm(x)  # compiled: grouped_mm's static shapes, whatever the count


def test_every_n_puts_moe_on_every_nth_layer_only():
    model = GPT(vocab_size=10, d_model=D, n_heads=2, n_layers=4, moe=dict(num_experts=2, every_n=2))
    assert [hasattr(layer.ffn, "router") for layer in model.decoder.layers] == [False, True, False, True]


TINY_MOE = TINY_LM + [
    "model.moe={num_experts:4,top_k:2,every_n:2}", "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false",
]


def test_moe_gpt_trains_through_the_cli_and_logs_routing_per_layer(tmp_path):
    train(TINY_MOE, tmp_path)
    (run,) = run_dirs(tmp_path)
    rows = read_metrics(run)
    train_rows = [r for r in rows if r.get("train/moe/decoder.1/expert_0")]
    assert train_rows and "train/moe/decoder.0/expert_0" not in rows[0]  # layer 0 is dense (every_n=2)
    for layer in ("decoder.1", "decoder.3"):
        for stage in ("train", "val"):
            row = next(r for r in rows if r.get(f"{stage}/moe/{layer}/expert_0"))
            shares = [float(row[f"{stage}/moe/{layer}/expert_{i}"]) for i in range(4)]
            assert sum(shares) == pytest.approx(1.0, abs=1e-5)
            assert float(row[f"{stage}/moe/{layer}/load_balance"]) >= 1.0 - 1e-4  # 1 is its minimum here
            assert 0.0 <= float(row[f"{stage}/moe/{layer}/dropped"]) < 1.0
    val = [float(r["val/loss"]) for r in rows if r.get("val/loss")]
    assert val[-1] < math.log(65)  # beats a uniform guess over the ~65 characters
    header = re.search(r"parameters: ([\d,]+) total, ([\d,]+) active", (run / "train.log").read_text())
    total, active = (int(g.replace(",", "")) for g in header.groups())
    assert active < total


def test_balancing_options_train_through_the_cli_and_log_the_bias(tmp_path):
    args = [a for a in TINY_MOE if not a.startswith(("model.moe", "trainer.max_steps", "trainer.val"))]
    train([*args, "model.moe={num_experts:4,top_k:2,gate:sigmoid,bias_update_rate:0.01,load_balance_scope:global}",
           "trainer.max_steps=4", "trainer.val_check_interval=4"], tmp_path)
    rows = read_metrics(run_dirs(tmp_path)[0])
    biases = [[float(r[f"train/moe/decoder.0/bias_{i}"]) for i in range(4)]
              for r in rows if r.get("train/moe/decoder.0/bias_0")]
    assert len(biases) == 4
    # every step moves each bias by the rate, up or down (or not at all at exactly the mean load), from 0
    steps = [[abs(a - b) for a, b in zip(x, y)] for x, y in zip([[0.0] * 4, *biases], biases)]
    assert all(min(d, abs(d - 0.01)) < 1e-6 for step in steps for d in step)
    assert any(d > 0 for step in steps for d in step)


QUICK = ["logger.wandb.mode=disabled", "callbacks.progress=null", "trainer.log_every_n_steps=1", "test=false"]


def test_moe_encoder_classifier_trains_with_expert_choice_through_the_cli(tmp_path):
    train(["+experiment=encoder_classifier_moe", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
           "model.max_seq_len=32", "data.batch_size=16", "data.eval_batches=3", "trainer.max_steps=6",
           "trainer.val_check_interval=3", *QUICK], tmp_path)
    rows = read_metrics(run_dirs(tmp_path)[-1])
    row = next(r for r in rows if r.get("train/moe/encoder.stack.1/expert_0"))
    # one column per expert of the MoE layer (every other layer: stack.0 is dense); the shares' values are
    # checked against a hand count in test_moe_reference.py
    assert all(row.get(f"train/moe/encoder.stack.1/expert_{i}") for i in range(8))
    assert "train/moe/encoder.stack.0/expert_0" not in row
    assert any(r.get("val/acc") for r in rows) and any(r.get("val/moe/encoder.stack.1/dropped") for r in rows)


def test_moe_translator_trains_through_the_cli_with_moe_in_both_stacks(tmp_path):
    train(["+experiment=translator_small_moe", "model.d_model=32", "model.n_heads=2", "model.max_seq_len=32",
           "data.max_tokens=24", "data.batch_size=16", "data.eval_batch_size=16", "task.val_decoding.max_len_offset=2",
           "trainer.max_steps=4", "trainer.val_check_interval=2", "+trainer.limit_val_batches=2", *QUICK], tmp_path)
    columns = set(read_metrics(run_dirs(tmp_path)[-1])[0])
    for stack in ("encoder", "decoder"):
        assert any(c.startswith(f"train/moe/{stack}.") and c.endswith("/load_balance") for c in columns), stack


@pytest.mark.slow
def test_ddp_with_experts_that_get_no_tokens_completes(tmp_path):
    # 8 tokens per process, 16 experts, top-1: at least 8 experts are idle on every step of every rank
    args = [a for a in TINY_MOE if not a.startswith("model.moe")] + [
        "trainer=ddp_cpu", "model.max_seq_len=8", "data.batch_size=2",
        "model.moe={num_experts:16,top_k:1,capacity_factor:null}",
    ]
    train(args, tmp_path, timeout=600)
    (run,) = run_dirs(tmp_path)
    row = next(r for r in read_metrics(run) if r.get("train/moe/decoder.1/expert_0"))
    # the logged shares are the 16 tokens' of both ranks (docs/scale_out.md), each rank's 8 leaving 8 experts idle
    shares = [float(row[f"train/moe/decoder.1/expert_{i}"]) * 16 for i in range(16)]
    assert sum(shares) == pytest.approx(16) and all(s == pytest.approx(round(s)) for s in shares), shares
