"""The speedrun recipe's pieces (Muon + AdamW, warmup-stable-decay, QK-norm, ReLU^2, logit soft-cap, zero-init
projections), each against an independent reference: an SVD, a schedule written out by hand, naive attention
loops, hand-computed values. Exact resume with Muon is in tests/test_resume.py."""
from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from lab.errors import LabError
from lab.models.gpt import GPT
from lab.nn import ConfigError, MultiHeadAttention, SoftCap, TransformerConfig, hidden_matrices
from lab.nn.ffn import ACTIVATIONS
from lab.nn.norms import RMSNorm
from lab.tasks.optim import MuonAdamW, warmup_stable_decay

TINY = dict(d_model=16, n_layers=2, n_heads=2, max_seq_len=16)


def task_groups(model: torch.nn.Module) -> list[dict]:
    """What lab.tasks.base.Task.configure_optimizers hands the optimizer: the marks, then two decay groups."""
    for p in hidden_matrices(model):
        p.hidden_matrix = True
    params = list(model.parameters())
    return [{"params": [p for p in params if p.dim() >= 2]},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


# ---- Muon + AdamW -------------------------------------------------------------------------------------------

def test_muon_gets_exactly_the_block_matrices_and_adamw_the_rest(caplog):
    model = GPT(11, tie_embeddings=False, **TINY)
    names = {id(p): n for n, p in model.named_parameters()}
    with caplog.at_level(logging.INFO, logger="lab"):
        opt = MuonAdamW(task_groups(model), lr=1e-3, weight_decay=0.1, muon_lr=0.02)
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
    w.hidden_matrix = True
    bias = torch.nn.Parameter(torch.zeros(3))
    opt = MuonAdamW([{"params": [w, bias]}], lr=1e-3, muon_lr=0.1, momentum=0.0, nesterov=False)
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
        opt = MuonAdamW(task_groups(model), lr=1e-2, muon_lr=0.05)
        for i in range(4):
            if split and i == 2:
                state = opt.state_dict()
                opt = MuonAdamW(task_groups(model), lr=1e-2, muon_lr=0.05)
                opt.load_state_dict(state)
            F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
            opt.step()
            opt.zero_grad()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(run(split=False), run(split=True))


def test_a_model_without_blocks_gets_one_clear_error():
    with pytest.raises(LabError, match=r"drop \+task/optimizer=muon"):
        MuonAdamW([torch.nn.Parameter(torch.zeros(3, 3))])


@pytest.mark.parametrize("task", ["language_model", "classification", "mlm", "translation"])
def test_any_task_takes_the_muon_choice_and_keeps_its_adamw_settings(compose, task):
    cfg = compose([f"task={task}", "+task/optimizer=muon"])
    model = GPT(11, **TINY)
    opt = instantiate(cfg.task.optimizer)(task_groups(model))
    assert isinstance(opt, MuonAdamW)
    assert opt.adamw.param_groups[0]["lr"] == cfg.task.optimizer.lr and opt.muon.param_groups[0]["lr"] == 0.02
    assert opt.adamw.param_groups[0]["betas"] == tuple(cfg.task.optimizer.betas)


# ---- warmup-stable-decay ------------------------------------------------------------------------------------

def test_wsd_schedule_by_hand():
    """warmup 2, total 10, decay over the last 30% = 3 steps (7 -> 10), min_lr 0.1 of lr 1.0."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p]}, {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.5}], lr=1.0)
    sched = warmup_stable_decay(opt, warmup_steps=2, total_steps=10, min_lr=0.1, decay_fraction=0.3)
    lrs = []
    for _ in range(12):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    first = [0.5, 1, 1, 1, 1, 1, 1, 1, 0.7, 0.4, 0.1, 0.1]
    assert [a for a, _ in lrs] == pytest.approx(first)
    assert [b for _, b in lrs] == pytest.approx([0.5 * f for f in first])  # the same fraction of each group's lr


def test_wsd_resumed_with_another_length_says_so(caplog):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    old = warmup_stable_decay(opt, 2, 10, decay_fraction=0.5)
    for _ in range(6):
        opt.step()
        old.step()  # step 6: 1/5 into the decay of steps 5..10
    state = old.state_dict()
    new = warmup_stable_decay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 2, 20, decay_fraction=0.5)
    with caplog.at_level(logging.INFO, logger="lab"):
        new.load_state_dict(state)
    assert new.total_steps == 20 and new.factor(6) == 1.0 and new.factor(15) == pytest.approx(0.5)
    assert any("total_steps 10 -> 20 at step 6" in r.getMessage() and "0.8 -> 1" in r.getMessage()
               for r in caplog.records)


def test_wsd_refuses_an_empty_decay():
    with pytest.raises(LabError, match="decay_fraction=0.2"):
        warmup_stable_decay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 2, 10, decay_fraction=0)


# ---- QK-norm, ReLU^2, soft-cap, zero init -------------------------------------------------------------------

def test_qk_norm_attention_equals_a_naive_loop():
    """2 heads of size 2, 3 positions, causal, learned gains: every score is (q/rms(q)*gq) . (k/rms(k)*gk) / sqrt(2)."""
    torch.manual_seed(0)
    qk_norm = (RMSNorm(2), RMSNorm(2))
    with torch.no_grad():
        qk_norm[0].weight.copy_(torch.tensor([1.5, 0.5]))
        qk_norm[1].weight.copy_(torch.tensor([2.0, -1.0]))
    attn = MultiHeadAttention(4, 2, bias=True, qk_norm=qk_norm)
    x = torch.randn(1, 3, 4)
    out = attn(x, is_causal=True)[0]
    qkv = x[0] @ attn.qkv_proj.weight.detach().T + attn.qkv_proj.bias.detach()  # [3, 12]
    heads = []
    for h in range(2):
        q, k, v = (qkv[:, part * 4 + 2 * h: part * 4 + 2 * h + 2] for part in range(3))
        rms = lambda t: t / torch.sqrt((t * t).mean(-1, keepdim=True) + 1e-6)  # noqa: E731
        q, k = rms(q) * torch.tensor([1.5, 0.5]), rms(k) * torch.tensor([2.0, -1.0])
        rows = []
        for i in range(3):
            scores = torch.stack([(q[i] * k[j]).sum() / math.sqrt(2) for j in range(i + 1)])
            rows.append((scores.softmax(0)[:, None] * v[: i + 1]).sum(0))
        heads.append(torch.stack(rows))
    expected = torch.cat(heads, -1) @ attn.out_proj.weight.detach().T + attn.out_proj.bias.detach()
    assert torch.allclose(out, expected, atol=1e-5)


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys():
    torch.manual_seed(0)
    cfg = TransformerConfig(**TINY, qk_norm=True)
    model = GPT(11, **TINY, qk_norm=True)
    x = torch.randint(0, 11, (2, 8))
    before = model(x)
    with torch.no_grad():
        for block in model.decoder.layers:
            block.self_attn.qkv_proj.weight[: 2 * cfg.d_model] *= 7.0  # queries and keys, not values
            block.self_attn.qkv_proj.bias[: 2 * cfg.d_model] *= 7.0
    assert torch.allclose(model(x), before, atol=1e-4)


def test_relu_squared_by_hand():
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0])
    assert ACTIVATIONS["relu_squared"]()(x).tolist() == [0.0, 0.0, 0.0, 0.25, 9.0]
    assert TransformerConfig(**TINY, ffn="relu_squared").d_ff == 64  # 4 x d_model, as relu and gelu
    with pytest.raises(ConfigError, match="model.ffn=gelu"):
        TransformerConfig(**TINY, ffn="relu_squared", moe={"num_experts": 4})


def test_softcap_by_hand_and_on_the_gpt_logits():
    cap = SoftCap(2.0)
    out = cap(torch.tensor([0.0, 1.0, -1.0, 100.0]))
    assert out.tolist() == pytest.approx([0.0, 0.92423431452, -0.92423431452, 2.0])  # 2 tanh(1/2) = 0.9242...
    torch.manual_seed(0)
    capped = GPT(11, **TINY, logit_softcap=0.05)
    raw = GPT(11, **TINY)
    raw.load_state_dict(capped.state_dict())
    x = torch.randint(0, 11, (2, 8))
    assert torch.allclose(capped(x), 0.05 * torch.tanh(raw(x) / 0.05), atol=1e-7)
    assert capped(x).abs().max() < 0.05 < raw(x).abs().max()
    with pytest.raises(ConfigError, match="logit_softcap=null"):
        SoftCap(0.0)


def test_zero_init_projections_start_every_block_as_the_identity():
    torch.manual_seed(0)
    model = GPT(11, **TINY, zero_init_proj=True, tie_embeddings=False)
    for block in model.decoder.layers:
        assert not block.self_attn.out_proj.weight.any() and not block.ffn.down.weight.any()
        assert block.self_attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert not model.lm_head.weight.any()
    x = torch.randint(0, 11, (2, 8))
    loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
    assert loss.item() == pytest.approx(math.log(11), abs=1e-6)  # a zero head: the uniform prediction
    tied = GPT(11, **TINY, zero_init_proj=True)  # tied: the head is the embedding, which stays random
    assert tied.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.2) and not tied.decoder.layers[0].ffn.down.weight.any()


def test_the_new_options_are_refused_by_export_with_their_names():
    from lab.hf.exporting import pick_family
    from lab.hf.registry import families

    # QK-norm is kept (Apertus computes it), the soft-cap is named
    with pytest.raises(LabError, match=r"nearest: ApertusForCausalLM, which needs model.positions=rotary model.norm=rmsnorm "
                                       r"model.bias=false model.logit_softcap=null\. "):
        pick_family(GPT(11, **TINY, qk_norm=True, logit_softcap=30.0), families("lm"))
    assert pick_family(GPT(11, **TINY, zero_init_proj=True, tie_embeddings=False), families("lm")).hf_class == "GPT2LMHeadModel"


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
        w.hidden_matrix = True
        start = bias.detach().clone()
        opt = MuonAdamW([{"params": [w, bias]}], lr=1e-2, weight_decay=0.1, fused=fused)
        assert opt.adamw.defaults["fused"] is fused
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            w.grad, bias.grad = torch.randn(6, 4, generator=g), torch.randn(4, generator=g)
            opt.step()
        assert (bias.detach() - start).abs().min() > 1e-3  # AdamW moved every bias element
        results.append((w.detach().clone(), bias.detach().clone()))
    torch.testing.assert_close(results[0], results[1], rtol=1e-6, atol=1e-7)
