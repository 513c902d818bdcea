"""MuonAdamW (lab/tasks/optim.py): Muon on the blocks' hidden matrices and experts, AdamW on the rest, against an
SVD and against torch.optim.Muon one matrix at a time; its state (also one written by torch.optim.Muon), FSDP2 and
the fused AdamW part. Exact resume with Muon is in tests/runtime/trainer/test_resume.py."""
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
from lab.tasks import optim
from lab.tasks.optim import BatchedMuon, MuonAdamW


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


def test_muon_experts_false_gives_the_expert_stacks_to_adamw_as_the_task_configures_it(compose, caplog):
    """task.optimizer.muon_experts=false (the MoE ablation's AdamW side): the experts' stacks leave Muon for AdamW's
    decayed group, and their step is torch.optim.AdamW's with the task's lr and weight decay; the router stays in
    Muon. Catches the switch being ignored (experts still orthogonalised) or dropping the router with the experts."""
    cfg = compose(["task=language_model", "+task/optimizer=muon", "task.optimizer.muon_experts=false",
                   "task.optimizer.weight_decay=0.1"])
    torch.manual_seed(0)
    model = GPT(11, tie_embeddings=False, moe=dict(num_experts=4, top_k=2, every_n=2), **TINY)
    names = {id(p): n for n, p in model.named_parameters()}
    with caplog.at_level(logging.INFO, logger="lab"):
        opt = instantiate(cfg.task.optimizer)(*task_groups(model))
    experts = [f"decoder.layers.1.ffn.experts.{w}" for w in ("w_in", "w_out")]
    muon = {names[id(p)] for g in opt.muon.param_groups for p in g["params"]}
    assert "decoder.layers.1.ffn.router.weight" in muon and not muon & set(experts)
    (decayed,) = [g for g in opt.adamw.param_groups if g["weight_decay"] == 0.1]
    assert set(experts) <= {names[id(p)] for p in decayed["params"]}
    assert any("2 expert stacks" in r.getMessage() and "muon_experts=false" in r.getMessage() for r in caplog.records)
    stacks = [p for p in model.parameters() if names[id(p)] in experts]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in stacks]
    ref_opt = torch.optim.AdamW(ref, lr=cfg.task.optimizer.lr, betas=tuple(cfg.task.optimizer.betas),
                                eps=cfg.task.optimizer.eps, weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        x = torch.randint(0, 11, (2, 8), generator=gen)
        F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
        for p, r in zip(stacks, ref, strict=True):
            r.grad = p.grad.clone()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        for p, r in zip(stacks, ref, strict=True):
            torch.testing.assert_close(p.detach(), r.detach(), rtol=0, atol=1e-7)


# ---- batched Newton-Schulz against torch.optim.Muon, one matrix at a time ----------------------------------------

def float32_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's _zeropower_via_newtonschulz with float32 instead of bfloat16 (the reference's rounding
    would otherwise swamp the comparison)."""
    a, b, c = ns_coefficients
    x = grad.float()
    x = x.T if grad.size(0) > grad.size(1) else x
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


@pytest.fixture
def per_matrix_muon(monkeypatch):
    """MuonAdamW as it was: torch.optim.Muon inside (float32 Newton-Schulz), one matrix at a time."""
    monkeypatch.setattr(torch.optim._muon, "_zeropower_via_newtonschulz", float32_newton_schulz)

    def build(model, **kw):
        with monkeypatch.context() as m:
            m.setattr(optim, "BatchedMuon", lambda *a, ns_dtype, bucket_mb, **k: torch.optim.Muon(*a, **k))
            return MuonAdamW(*task_groups(model), **kw)
    return build


def train_steps(model, opt, steps: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 11, (2, 8), generator=g)
        F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("settings", [dict(), dict(nesterov=False, adjust_lr_fn="match_rms_adamw", muon_weight_decay=0.1)],
                         ids=["default", "plain-momentum-rms-decay"])
def test_batched_muon_equals_per_matrix_torch_muon_over_steps(per_matrix_muon, settings):
    """A GPT with four matrix shapes (qkv [24, 8], out [8, 8], up [16, 8], down [8, 16]: tall, square, wide, two
    matrices of each per stack): four steps of MuonAdamW equal four of torch.optim.Muon matrix by matrix (both in
    float32). Stacking two shapes into one call, a wrong orientation, another lr adjustment, momentum or weight
    decay rule fails it."""
    kw = dict(lr=1e-2, muon_lr=0.05, weight_decay=0.1, **settings)
    torch.manual_seed(0)
    model = GPT(11, **TINY)
    ref_model = GPT(11, **TINY)
    ref_model.load_state_dict(model.state_dict())
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    got = train_steps(model, MuonAdamW(*task_groups(model), ns_dtype="float32", **kw), 4)
    want = train_steps(ref_model, per_matrix_muon(ref_model, **kw), 4)
    assert (got - start).abs().max() > 1e-2  # the steps moved the weights
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_each_expert_and_each_shape_is_orthogonalised_on_its_own():
    """A stack of 3 experts [3, 6, 4] beside a [6, 4] and a [4, 6] matrix (one stack call holds the experts and the
    [6, 4]): each expert's step equals torch.optim.Muon's on that expert alone (float32), with the lr adjusted by
    the expert's [6, 4] (sqrt(1.5)), not the stack's [3, 6]. Orthogonalising the experts jointly (as one [18, 4]
    or [6, 12] matrix) or mixing the shapes fails it."""
    import torch.optim._muon as torch_muon
    gen = torch.Generator().manual_seed(0)
    experts, tall, wide = (torch.randn(*s, generator=gen) for s in ((3, 6, 4), (6, 4), (4, 6)))
    grads = [[torch.randn(t.shape, generator=gen) for t in (experts, tall, wide)] for _ in range(3)]
    params = [torch.nn.Parameter(t.clone()) for t in (experts, tall, wide)]
    opt = BatchedMuon(params, lr=0.1, weight_decay=0.05, ns_dtype=torch.float32)
    # the reference: every matrix its own parameter, torch.optim.Muon (float32 Newton-Schulz)
    ref = [torch.nn.Parameter(m.clone()) for m in (*experts, tall, wide)]
    original = torch_muon._zeropower_via_newtonschulz
    torch_muon._zeropower_via_newtonschulz = float32_newton_schulz
    try:
        ref_opt = torch.optim.Muon(ref, lr=0.1, weight_decay=0.05)
        for g in grads:
            for p, gp in zip(params, g, strict=True):
                p.grad = gp.clone()
            for p, gp in zip(ref, [*g[0], g[1], g[2]], strict=True):
                p.grad = gp.clone()
            opt.step()
            ref_opt.step()
    finally:
        torch_muon._zeropower_via_newtonschulz = original
    torch.testing.assert_close(params[0].detach(), torch.stack([p.detach() for p in ref[:3]]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close([p.detach() for p in params[1:]], [p.detach() for p in ref[3:]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ns_dtype", ["float32", "bfloat16"])
def test_each_experts_step_is_its_own_orthogonalised_gradient(ns_dtype):
    """Against an SVD: from zero momentum each expert's step is ~U V^T of its own gradient (U^T step V diagonal,
    entries in Muon's band), in either compute dtype."""
    torch.manual_seed(0)
    w, bias = torch.nn.Parameter(torch.randn(3, 12, 6)), torch.nn.Parameter(torch.zeros(3))
    opt = MuonAdamW([{"params": [w, bias]}], {w: Role.EXPERT, bias: Role.VECTOR}, muon_lr=0.1, momentum=0.0, nesterov=False, ns_dtype=ns_dtype)
    g = torch.randn(3, 12, 6)
    before = w.detach().clone()
    w.grad = g.clone()
    opt.step()
    for e in range(3):
        step = (before[e] - w.detach()[e]) / (0.1 * math.sqrt(2))
        U, _, Vh = torch.linalg.svd(g[e], full_matrices=False)
        m = U.T @ step @ Vh.T
        assert (m - torch.diag(m.diag())).abs().max() < 0.05, (e, m)
        assert ((m.diag() > 0.6) & (m.diag() < 1.25)).all(), (e, m.diag())


def test_a_state_written_by_torch_muon_resumes_in_the_batched_one(per_matrix_muon):
    """A checkpoint of the per-matrix MuonAdamW (torch.optim.Muon inside): the same state dict layout (group keys,
    momentum_buffer per matrix), and two steps after loading it continue the per-matrix run's four (float32)."""
    kw = dict(lr=1e-2, muon_lr=0.05, weight_decay=0.1)
    torch.manual_seed(0)
    model = GPT(11, **TINY)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    old = per_matrix_muon(model, **kw)
    train_steps(model, old, 2)
    state = old.state_dict()
    new = MuonAdamW(*task_groups(model), ns_dtype="float32", **kw)
    assert [sorted(g) for g in new.state_dict()["param_groups"]] == [sorted(g) for g in state["param_groups"]]
    new.load_state_dict(state)
    assert set(new.state_dict()["state"][0]) == {"momentum_buffer"}
    got = train_steps(model, new, 2, seed=1)
    model.load_state_dict(start)
    old = per_matrix_muon(model, **kw)
    train_steps(model, old, 2)
    want = train_steps(model, old, 2, seed=1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_an_unknown_newton_schulz_dtype_is_one_clear_error():
    w = torch.nn.Parameter(torch.zeros(3, 3))
    with pytest.raises(LabError, match=r"task.optimizer.ns_dtype must be one of bfloat16, float32, got float16"):
        MuonAdamW([w], {w: Role.HIDDEN}, ns_dtype="float16")


# ---- FSDP2 ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_muon_under_fsdp2_matches_one_process_and_resumes_from_its_sharded_checkpoint(tmp_path):
    """BatchedMuon on FSDP2's DTensor shards: each matrix is gathered whole once and orthogonalised, and each rank
    keeps its shard of the result, so 2 processes x 6 reach the 1-process val/loss (orthogonalising each shard on
    its own would be another update), also with distributed Muon's buckets capped below one matrix (its pipelined
    all-to-alls, a bucket per matrix), and a run resumed from the sharded checkpoint (Muon's momentum in it) ends
    where the uninterrupted one does."""
    from conftest import TINY_LM, metric_by_step, read_metrics, run_dirs, train

    args = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
        "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false", "callbacks.progress=null",
        "task.samples=null", "+task/optimizer=muon"]
    # buckets capped below one matrix's size: every matrix its own bucket, so the pipelined all-to-alls run end to end
    sharded = [*args, "trainer=fsdp_cpu", "callbacks.checkpoint.save_top_k=-1", "task.optimizer.muon_bucket_mb=0.01"]
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


# Two gloo processes: FSDP2-sharded matrices (uneven rows, a 1-row one), expert stacks (one with a single expert), and
# the same parameters unsharded, stepped with the same gradients, once with one bucket and once with buckets capped at
# 76 bytes. Writes, from rank 0, for each: the process group's collectives per step, the largest difference to the
# unsharded BatchedMuon, and the matrices each rank orthogonalised.
DISTRIBUTED_MUON = """
import copy, json, os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from lab.tasks import optim

SHAPES = [(6, 4), (4, 6), (5, 3), (1, 4), (6, 4), (3, 6, 4), (1, 6, 4)]

def trial(bucket_mb):
    torch.manual_seed(0)
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(*s)) for s in SHAPES])
    reference = copy.deepcopy(model)
    fully_shard(model)
    settings = dict(lr=0.05, weight_decay=0.1, ns_dtype=torch.float32)
    opt = optim.BatchedMuon(model.parameters(), bucket_mb=bucket_mb, **settings)
    ref_opt = optim.BatchedMuon(reference.parameters(), **settings)
    newton_schulz, done = optim.newton_schulz, []
    def counted(x, *args):
        done.append(x.size(0))
        return newton_schulz(x, *args)
    g, counts = torch.Generator().manual_seed(1), []
    for _ in range(3):
        for p, q in zip(model, reference):
            q.grad = torch.randn(q.shape, generator=g)
            p.grad = distribute_tensor(q.grad, p.device_mesh, p.placements, src_data_rank=None)
        optim.newton_schulz, done[:] = counted, []
        with CommDebugMode() as comms:
            opt.step()
        optim.newton_schulz = newton_schulz
        counts.append({str(k): v for k, v in comms.get_comm_counts().items()})
        ref_opt.step()
    diff = max((p.full_tensor() - q).abs().max().item() for p, q in zip(model, reference))
    matrices = [None, None]
    dist.all_gather_object(matrices, sum(done))
    return {"counts": counts, "diff": diff, "matrices": matrices}

def run(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    results = [trial(bucket_mb) for bucket_mb in (None, 76 / 2**20)]
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1], sys.argv[2]), nprocs=2)
"""


@pytest.mark.slow
def test_distributed_muon_splits_the_matrices_over_ranks_with_two_collectives_per_bucket(tmp_path):
    """Under FSDP2 each matrix is orthogonalised once, by one rank: the ranks' Newton-Schulz matrices add up to the
    model's 9 (5 matrices, 3 + 1 experts) and each rank does part of them (every rank orthogonalising everything, or
    rank 0 owning all, fails); the process group sees two all-to-alls per step for the one bucket, not a collective
    per matrix (gathering each matrix whole: 7 all-gathers) nor per Newton-Schulz matmul; and the parameters after 3
    steps equal the unsharded BatchedMuon's (float32 Newton-Schulz: shards orthogonalised on their own, or rows
    returned to the wrong rank, move them by O(lr)). With buckets capped at 76 bytes, by hand: the sharded matrices
    are 96, 96, 60, 16 and 96 bytes in float32, so the buckets are [96] [96] [60 16] [96], 8 all-to-alls per step;
    the same parameters, and each rank owns the same matrices as with one bucket (owners planned bucket by bucket
    would give rank 0 four of the five)."""
    import json
    import socket
    import subprocess
    import sys

    from conftest import ROOT

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "worker.py").write_text(DISTRIBUTED_MUON)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(port), str(tmp_path / "out.json")],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    one, capped = json.loads((tmp_path / "out.json").read_text())
    assert one["counts"] == [{"c10d.alltoall_base_": 2}] * 3
    assert capped["counts"] == [{"c10d.alltoall_base_": 8}] * 3
    assert sum(one["matrices"]) == 9 and min(one["matrices"]) >= 3, one["matrices"]
    assert capped["matrices"] == one["matrices"]
    assert one["diff"] < 1e-6 and capped["diff"] < 1e-6


def test_buckets_hold_whole_matrices_up_to_the_cap_in_parameter_order():
    """By hand: a run that reaches the cap exactly stays one bucket, one byte more starts the next, a matrix over the
    cap is a bucket alone, no cap is one bucket; MuonAdamW's muon_bucket_mb reaches BatchedMuon in MiB."""
    assert optim.buckets([96, 96, 60, 16, 96], 76) == [[0], [1], [2, 3], [4]]
    assert optim.buckets([96, 96, 60, 16, 96], 75) == [[0], [1], [2], [3], [4]]
    assert optim.buckets([10, 200, 10, 10], 100) == [[0], [1], [2, 3]]
    assert optim.buckets([96, 96, 60], None) == [[0, 1, 2]]
    w, bias = torch.nn.Parameter(torch.zeros(3, 3)), torch.nn.Parameter(torch.zeros(3))
    assert MuonAdamW([w, bias], {w: Role.HIDDEN, bias: Role.VECTOR}, muon_bucket_mb=0.5).muon.bucket_bytes == 2**19


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
