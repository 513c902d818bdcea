"""Auxiliary-loss-free balancing (DeepSeek-V3's per-expert selection bias) and the global-batch load-balance
loss under data parallelism (two gloo processes on loopback)."""
from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab.nn import TransformerConfig
from lab.nn.moe import make_moe

D, E, M = 8, 4, 8


def layer_with_preferences(**moe):
    """Top-1 layer whose router gives token m (input = unit vector m) the logits 1 + 0.1 m for expert 0 and 0.02 e
    for the others: every token prefers expert 0, the later ones more firmly."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=D, n_heads=2, n_layers=1, d_ff=16, moe=dict(
        num_experts=E, top_k=1, capacity_factor=None, capacity_factor_eval=None, **moe))
    layer = make_moe(cfg, causal=True).train()
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[0, :M] = 1.0 + 0.1 * torch.arange(M)
        layer.router.weight[1:, :M] = 0.02 * torch.arange(1, E)[:, None]  # no ties among the others
    return layer, torch.eye(M, D)[None]


def test_balancing_bias_moves_load_off_an_overloaded_expert_and_never_weighs_the_output():
    rate = 0.05
    layer, x = layer_with_preferences(bias_update_rate=rate)
    assert layer(x)[1].stats["expert_fraction"].tolist() == [1.0, 0.0, 0.0, 0.0]  # collapsed on expert 0
    # one step of the rule: overloaded expert 0 down by the rate, the idle ones up by it
    assert layer.expert_bias.tolist() == pytest.approx([-rate, rate, rate, rate])
    for _ in range(9):
        stats = layer(x)[1].stats
    load = stats["expert_fraction"]
    assert load[0] <= 0.5 and (load[1:] > 0).any()  # the bias pushed tokens off expert 0
    assert stats["bias"].tolist() == layer.expert_bias.tolist()  # logged as it is

    # the bias chooses the expert, the unbiased probability weighs it (eval mode: no update)
    layer.eval()
    bias = layer.expert_bias.clone()
    out = layer(x)[0][0]
    assert torch.equal(layer.expert_bias, bias)
    probs = layer.router(x[0]).softmax(-1)
    chosen = (probs + bias).argmax(-1)
    assert (chosen != probs.argmax(-1)).any()  # some token's choice differs from its favourite expert
    ex = layer.experts
    for m in range(M):
        e = chosen[m]
        h = torch.nn.functional.gelu(ex.w_in[e] @ x[0, m] + ex.b_in[e], approximate="tanh")
        torch.testing.assert_close(out[m], probs[m, e] * (ex.w_out[e] @ h + ex.b_out[e]))


def test_without_the_bias_the_same_input_stays_collapsed():
    layer, x = layer_with_preferences()
    for _ in range(10):
        stats = layer(x)[1].stats
    assert stats["expert_fraction"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert not hasattr(layer, "expert_bias") and "bias" not in stats


def _rank(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    layer, x = layer_with_preferences(load_balance_scope="global", bias_update_rate=0.05)
    # rank 0 sends its tokens to expert 0 (as built); rank 1's tokens all prefer expert 3
    if rank == 1:
        with torch.no_grad():
            layer.router.weight[[0, 3]] = layer.router.weight[[3, 0]]
    stats = layer(x)[1].stats
    probs = layer.router(x[0]).softmax(-1).mean(0)
    results[rank] = (stats["expert_fraction"].clone(), stats["load_balance"].clone(),
                     probs.detach(), layer.expert_bias.clone())
    dist.destroy_process_group()


@pytest.mark.slow
def test_global_load_balance_and_bias_count_the_whole_data_parallel_batch():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_rank, args=(port, results), nprocs=2, join=True)
    global_f = torch.tensor([0.5, 0.0, 0.0, 0.5])  # 8 tokens on expert 0 (rank 0) + 8 on expert 3 (rank 1)
    for rank in (0, 1):
        fraction, load_balance, probs, bias = results[rank]
        torch.testing.assert_close(fraction, global_f)  # locally each rank is collapsed: f = one-hot
        torch.testing.assert_close(load_balance, E * (global_f * probs).sum())  # global f, local P
        torch.testing.assert_close(bias, torch.tensor([-0.05, 0.05, 0.05, -0.05]))  # global load: 8, 0, 0, 8
