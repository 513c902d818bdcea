"""Parameter roles (lab.nn.roles, declared by each model) and the aux record a forward returns (lab.nn.routing):
hand-written tables, so a one-line slip in the rules or in how a record travels up fails here."""
from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from lab.models.encoder import EncoderClassifier, MaskedLM
from lab.models.gpt import GPT
from lab.models.seq2seq import EncoderDecoder
from lab.nn import Role, parameter_roles
from lab.tasks.language_model import LanguageModelTask
from lab.tasks.optim import MuonAdamW

H, E, V, B, R = Role.HIDDEN, Role.EXPERT, Role.VECTOR, Role.EMBEDDING, Role.ROUTER
ARCH = dict(d_model=8, n_heads=2, n_layers=2, d_ff=16, max_seq_len=8)
MOE = dict(num_experts=4, top_k=2, every_n=2)  # layer 1 routed, layer 0 dense


def block(prefix: str, moe: bool, cross: bool = False) -> dict[str, Role]:
    attn = {"self_attn.qkv_proj.weight": H, "self_attn.qkv_proj.bias": V, "self_attn.out_proj.weight": H,
            "self_attn.out_proj.bias": V}
    if cross:
        attn |= {"cross_attn.q_proj.weight": H, "cross_attn.q_proj.bias": V, "cross_attn.kv_proj.weight": H,
                 "cross_attn.kv_proj.bias": V, "cross_attn.out_proj.weight": H, "cross_attn.out_proj.bias": V}
    ffn = ({"ffn.router.weight": R, "ffn.experts.w_in": E, "ffn.experts.w_out": E, "ffn.experts.b_in": V,
            "ffn.experts.b_out": V} if moe else
           {"ffn.up.weight": H, "ffn.up.bias": V, "ffn.down.weight": H, "ffn.down.bias": V})
    norms = {f"{n}.{w}": V for n in ("norm_attn", *(["norm_cross"] if cross else []), "norm_ffn") for w in ("weight", "bias")}
    return {f"{prefix}.{k}": v for k, v in (attn | ffn | norms).items()}


def stack(prefix: str, cross: bool = False, moe: bool = True) -> dict[str, Role]:
    return {**block(f"{prefix}.layers.0", False, cross), **block(f"{prefix}.layers.1", moe, cross),
            f"{prefix}.final_norm.weight": V, f"{prefix}.final_norm.bias": V}


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_gpt_with_moe_roles_by_hand(tied):
    model = GPT(11, tie_embeddings=tied, moe=MOE, **ARCH)
    expected = {"embed.tokens.weight": B, "embed.positions.weight": B, **stack("decoder")}
    if not tied:  # tied: the head is the embedding's tensor, listed once under that name
        expected["lm_head.weight"] = Role.READOUT
    assert model.parameter_roles() == expected


def test_encoder_heads_roles_by_hand():
    cls = EncoderClassifier(11, 0, 3, pooling="bert", moe=MOE, **ARCH)
    embed = {"encoder.embed.tokens.weight": B, "encoder.embed.positions.weight": B}
    assert cls.parameter_roles() == {**embed, **stack("encoder.stack"), "pool.dense.weight": Role.HEAD,
                                     "pool.dense.bias": V, "classifier.weight": Role.READOUT, "classifier.bias": V}
    for tied in (True, False):
        mlm = MaskedLM(11, 0, 1, tie_embeddings=tied, **ARCH)
        head = {"mlm_head.dense.weight": Role.HEAD, "mlm_head.dense.bias": V, "mlm_head.norm.weight": V,
                "mlm_head.norm.bias": V, **({} if tied else {"mlm_head.decoder.weight": Role.READOUT}),
                "mlm_head.decoder.bias": V}
        assert mlm.parameter_roles() == {**embed, **stack("encoder.stack", moe=False), **head}


def test_translator_roles_by_hand():
    shared = EncoderDecoder(11, 0, 1, 2, moe=MOE, positions="relative", **ARCH)
    assert shared.parameter_roles() == {  # one embedding: source, target and (tied) output layer
        "src_embed.tokens.weight": B, "encoder.relative.weight": B, **stack("encoder"),
        "decoder.relative.weight": B, **stack("decoder", cross=True)}
    apart = EncoderDecoder(11, 0, 1, 2, share_embeddings=False, tie_embeddings=False, **ARCH)
    roles = apart.parameter_roles()
    assert roles["src_embed.tokens.weight"] is B and roles["tgt_embed.tokens.weight"] is B
    assert roles["lm_head.weight"] is Role.READOUT


def test_a_matrix_without_a_rule_is_refused():
    model = GPT(11, **ARCH)
    model.extra = torch.nn.Parameter(torch.zeros(2, 2))
    with pytest.raises(TypeError, match=r"extra \(2, 2\) has no role"):
        parameter_roles(model, readouts=(model.lm_head,))


def test_weight_decay_and_muon_follow_the_roles():
    """Muon: hidden matrices, routers and experts' stacks; AdamW: embeddings, head, vectors (experts' stacked biases
    too). Decay: all but vectors. The groups keep their order (Muon's first, each in the task's decay-then-no-decay
    order)."""
    model = GPT(11, tie_embeddings=False, moe=MOE, **ARCH)
    names = {id(p): n for n, p in model.named_parameters()}
    roles = model.parameter_roles()
    task = LanguageModelTask(model, functools.partial(MuonAdamW, lr=1e-3, weight_decay=0.1))
    opt = task.configure_optimizers()
    groups = [[names[id(p)] for p in g["params"]] for g in opt.param_groups]
    muon = [f"decoder.layers.{i}.{m}" for i in range(2) for m in (
        "self_attn.qkv_proj.weight", "self_attn.out_proj.weight",
        *(("ffn.router.weight", "ffn.experts.w_in", "ffn.experts.w_out") if i else ("ffn.up.weight", "ffn.down.weight")))]
    decayed = ["embed.tokens.weight", "embed.positions.weight", "lm_head.weight"]
    assert groups[:2] == [muon, decayed]
    assert groups[2] == [n for n in names.values() if roles[n] is V] and "decoder.layers.1.ffn.experts.b_in" in groups[2]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.1, 0.0]  # muon_weight_decay's default
    adamw = LanguageModelTask(model, functools.partial(torch.optim.AdamW, weight_decay=0.1)).configure_optimizers()
    assert [[names[id(p)] for p in g["params"]] for g in adamw.param_groups] == [
        [n for n in names.values() if roles[n] is not V], [n for n in names.values() if roles[n] is V]]


def test_residual_projections_start_at_zero_and_the_rest_does_not():
    model = GPT(11, zero_init_proj=True, moe=MOE, **ARCH)
    roles = model.parameter_roles()
    zero = {n for n, p in model.named_parameters() if roles[n] is not V and not p.any()}
    assert zero == {"decoder.layers.0.self_attn.out_proj.weight", "decoder.layers.0.ffn.down.weight",
                    "decoder.layers.1.self_attn.out_proj.weight", "decoder.layers.1.ffn.experts.w_out"}


def module_names(model: torch.nn.Module) -> list[str]:
    """The MoE layers' names as the metrics have always been named: the module path without layers./.ffn."""
    return [n.replace("layers.", "").removesuffix(".ffn") for n, m in model.named_modules() if hasattr(m, "router")]


@pytest.mark.parametrize("kind", ["gpt", "classifier", "mlm", "translator"])
def test_forward_returns_every_routed_layer_by_its_module_name(kind):
    torch.manual_seed(0)
    moe = dict(MOE, every_n=1, load_balance_weight=0.5, z_loss_weight=0.1)
    ids = torch.randint(3, 11, (2, 6))
    model, args = {
        "gpt": (GPT(11, moe=moe, **ARCH), (ids,)),
        "classifier": (EncoderClassifier(11, 0, 3, moe=moe, **ARCH), (ids,)),
        "mlm": (MaskedLM(11, 0, 1, moe=moe, **ARCH), (ids,)),
        "translator": (EncoderDecoder(11, 0, 1, 2, moe=moe, **ARCH), (ids, ids)),
    }[kind]
    model.eval()  # no dropout: two calls compute the same
    logits, aux = model(*args, return_aux=True)
    torch.testing.assert_close(model(*args), logits, rtol=0, atol=0)  # the plain call: the same logits alone
    assert list(aux.routing) == module_names(model) and len(aux.routing) == (4 if kind == "translator" else 2)
    by_hand = sum(v for r in aux.routing.values() for v in (r.losses["z_loss"], r.losses["load_balance"]))
    assert aux.loss().item() == pytest.approx(by_hand.item(), rel=1e-6) and aux.loss().item() > 0
    first = next(iter(aux.routing.values()))
    assert first.stats["expert_fraction"].sum().item() == pytest.approx(1.0)
    router = next(m for m in model.modules() if hasattr(m, "router")).router.weight
    assert torch.autograd.grad(aux.loss(), router)[0].abs().sum() > 0  # in the graph: it trains the router


def test_the_training_step_adds_the_returned_aux_loss(monkeypatch):
    torch.manual_seed(0)
    model = GPT(11, moe=dict(MOE, load_balance_weight=1.0), **ARCH)
    task = LanguageModelTask(model, torch.optim.AdamW)
    logged = {}
    monkeypatch.setattr(task, "log_train", lambda metrics, **kw: logged.update(metrics))  # the training step's metrics
    monkeypatch.setattr(task, "log_routing", lambda stage, aux: logged.setdefault("routing", list(aux.routing)))
    x = torch.randint(0, 11, (2, 8))
    total = task.training_step((x[:, :-1], x[:, 1:]), 0)
    logits, aux = model(x[:, :-1], return_aux=True)
    ce = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
    assert total.item() == pytest.approx((ce + aux.loss()).item(), rel=1e-6) and aux.loss().item() > 0.5
    assert logged["train/aux_loss"].item() == pytest.approx(aux.loss().item()) and logged["routing"] == ["decoder.1"]
