"""MuonAdamW (lab/tasks/optim.py): Muon on the blocks' hidden matrices, AdamW on the rest, against an SVD;
its state, FSDP2 and the fused AdamW part. Exact resume with Muon is in tests/runtime/trainer/test_resume.py."""
from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_GPT as TINY
from hydra.utils import instantiate

from lab.errors import LabError
from lab.models.gpt import GPT
from lab.nn import Role
from lab.tasks.optim import MuonAdamW


def task_groups(model: torch.nn.Module) -> tuple[list[dict], dict]:
    """What lab.tasks.base.Task.configure_optimizers hands MuonAdamW: two decay groups, and the roles."""
    roles, named = model.parameter_roles(), list(model.named_parameters())
    return ([{"params": [p for n, p in named if roles[n] is not Role.VECTOR]},
             {"params": [p for n, p in named if roles[n] is Role.VECTOR], "weight_decay": 0.0}],
            {p: roles[n] for n, p in named})


# ---- Muon + AdamW -------------------------------------------------------------------------------------------

def test_muon_gets_exactly_the_block_matrices_and_adamw_the_rest(caplog):
    model = GPT(11, tie_embeddings=False, **TINY)
    names = {id(p): n for n, p in model.named_parameters()}
    with caplog.at_level(logging.INFO, logger="lab"):
        opt = MuonAdamW(*task_groups(model), lr=1e-3, weight_decay=0.1, muon_lr=0.02)
    muon = sorted(names[id(p)] for g in opt.muon.param_groups for p in g["params"])
    assert muon == sorted(f"decoder.layers.{i}.{m}.weight" for i in range(2)
                          for m in ("self_attn.qkv_proj", "self_attn.out_proj", "ffn.up", "ffn.down"))
    adamw = {names[id(p)] for g in opt.adamw.param_groups for p in g["params"]}
    assert {"embed.tokens.weight", "lm_head.weight", "decoder.final_norm.weight", "decoder.layers.0.ffn.up.bias"} <= adamw
    assert len(muon) + len(adamw) == len(names)
    # the task's decay rule survives the split: the head decays, biases and gains do not
    decay = {names[id(p)]: g["weight_decay"] for g in opt.adamw.param_groups for p in g["params"]}
    assert decay["lm_head.weight"] == 0.1 and decay["decoder.final_norm.weight"] == 0.0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("optimizer: Muon")]
    assert "on 8 hidden matrices" in line and f"({sum(p.numel() for p in model.parameters()) - sum(p.numel() for g in opt.muon.param_groups for p in g['params'])} params" in line


@pytest.mark.parametrize("shape", [(12, 6), (6, 12)], ids=["tall", "wide"])
def test_a_muon_step_is_the_orthogonalised_gradient(shape):
    """One step from zero momentum moves W by -lr * sqrt(max(1, rows/cols)) * NS(g), and NS(g) is ~U V^T of g's
    SVD: U^T NS(g) V is diagonal, with entries in Muon's documented band (~0.7..1.2, not exactly 1: the
    quintic iteration trades exactness for speed). An AdamW step (elementwise) would fail the diagonality."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(*shape))
    bias = torch.nn.Parameter(torch.zeros(3))
    opt = MuonAdamW([{"params": [w, bias]}], {w: Role.HIDDEN, bias: Role.VECTOR}, lr=1e-3, muon_lr=0.1, momentum=0.0, nesterov=False)
    g = torch.randn(*shape)
    before = w.detach().clone()
    w.grad, bias.grad = g.clone(), torch.ones(3)
    opt.step()
    step = (before - w.detach()) / (0.1 * math.sqrt(max(1, shape[0] / shape[1])))
    U, _, Vh = torch.linalg.svd(g, full_matrices=False)
    m = U.T @ step @ Vh.T
    off = m - torch.diag(m.diag())
    assert off.abs().max() < 0.03, off
    assert ((m.diag() > 0.6) & (m.diag() < 1.25)).all(), m.diag()
    # and the bias took an AdamW step: lr * sign(grad) on the first step
    assert torch.allclose(bias.detach(), torch.full((3,), -1e-3), atol=1e-7)


def test_muon_adamw_state_round_trips_and_continues_identically():
    """Two steps, save, load into a fresh optimizer, two more steps == four steps uninterrupted (momentum
    buffers and AdamW moments travel in the one state dict)."""
    def run(split: bool) -> torch.Tensor:
        torch.manual_seed(0)
        model = GPT(11, **TINY)
        x = torch.randint(0, 11, (2, 8))
        opt = MuonAdamW(*task_groups(model), lr=1e-2, muon_lr=0.05)
        for i in range(4):
            if split and i == 2:
                state = opt.state_dict()
                opt = MuonAdamW(*task_groups(model), lr=1e-2, muon_lr=0.05)
                opt.load_state_dict(state)
            F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
            opt.step()
            opt.zero_grad()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(run(split=False), run(split=True))


def test_a_model_without_blocks_gets_one_clear_error():
    with pytest.raises(LabError, match=r"drop \+task/optimizer=muon"):
        head = torch.nn.Parameter(torch.zeros(3, 3))
        MuonAdamW([head], {head: Role.HEAD})


@pytest.mark.parametrize("task", ["language_model", "classification", "mlm", "translation"])
def test_any_task_takes_the_muon_choice_and_keeps_its_adamw_settings(compose, task):
    cfg = compose([f"task={task}", "+task/optimizer=muon"])
    model = GPT(11, **TINY)
    opt = instantiate(cfg.task.optimizer)(*task_groups(model))
    assert isinstance(opt, MuonAdamW)
    assert opt.adamw.param_groups[0]["lr"] == cfg.task.optimizer.lr and opt.muon.param_groups[0]["lr"] == 0.02
    assert opt.adamw.param_groups[0]["betas"] == tuple(cfg.task.optimizer.betas)


# ---- FSDP2 ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_muon_under_fsdp2_matches_one_process_and_resumes_from_its_sharded_checkpoint(tmp_path):
    """torch.optim.Muon on FSDP2's DTensor shards: Newton-Schulz runs on the DTensor, whose matmuls and norm
    gather what they need, so 2 processes x 6 reach the 1-process val/loss (measured: 1.4e-5 relative, bf16
    iterations summed in another order; orthogonalising each shard on its own would be another update), and a
    run resumed from the sharded checkpoint (Muon's momentum in it) ends where the uninterrupted one does."""
    from conftest import TINY_LM, metric_by_step, read_metrics, run_dirs, train

    args = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
        "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false", "callbacks.progress=null",
        "task.samples=null", "+task/optimizer=muon"]
    sharded = [*args, "trainer=fsdp_cpu", "callbacks.checkpoint.save_top_k=-1"]
    train(args, tmp_path / "one")
    train(sharded, tmp_path / "a")
    (one,), (run_a,) = run_dirs(tmp_path / "one"), run_dirs(tmp_path / "a")
    train([*sharded, f"ckpt_path={run_a / 'checkpoints' / 'best-step6.ckpt'}"], tmp_path / "b")
    (run_b,) = run_dirs(tmp_path / "b")
    single, a, b = (metric_by_step(read_metrics(r), "val/loss") for r in (one, run_a, run_b))
    assert sorted(a) == sorted(single) == [5, 11] and sorted(b) == [11]
    for step in single:
        assert a[step] == pytest.approx(single[step], rel=1e-4), (step, a[step], single[step])
    assert b[11] == pytest.approx(a[11], rel=1e-5)


def test_fused_reaches_the_adamw_part_and_steps_as_the_unfused_one():
    """task.optimizer.fused=true (issue 32's GPU recipe) is AdamW's fused kernel for the embeddings, heads, norms and
    biases (torch has one on CPU too); Muon's matrices are untouched by it. Three steps of both give the same
    parameters; a MuonAdamW that dropped the flag would fail the first assertion."""
    results = []
    for fused in (True, False):
        torch.manual_seed(0)
        w, bias = torch.nn.Parameter(torch.randn(6, 4)), torch.nn.Parameter(torch.randn(4))
        start = bias.detach().clone()
        opt = MuonAdamW([{"params": [w, bias]}], {w: Role.HIDDEN, bias: Role.VECTOR}, lr=1e-2, weight_decay=0.1, fused=fused)
        assert opt.adamw.defaults["fused"] is fused
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            w.grad, bias.grad = torch.randn(6, 4, generator=g), torch.randn(4, generator=g)
            opt.step()
        assert (bias.detach() - start).abs().min() > 1e-3  # AdamW moved every bias element
        results.append((w.detach().clone(), bias.detach().clone()))
    torch.testing.assert_close(results[0], results[1], rtol=1e-6, atol=1e-7)
