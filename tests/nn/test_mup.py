"""model.parametrization=mup (lab.nn.mup): equal to sp at the base shape, the mup package's rules away from it, the
coordinate check of Tensor Programs V's Appendix D, and the refusals."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lab.errors import ConfigError, LabError
from lab.hf.exporting import export
from lab.models.encoder import EncoderClassifier, EncoderClassifierConfig, MaskedLM
from lab.models.gpt import GPT, GPTConfig
from lab.models.seq2seq import EncoderDecoder
from lab.nn import Role
from lab.nn.mup import Scale
from lab.tasks.language_model import LanguageModelTask
from lab.tasks.optim import MuonAdamW

V = 32
ARCH = dict(n_heads=2, n_layers=2, max_seq_len=12)
MOE = dict(num_experts=4, top_k=2, every_n=2)
IDS = torch.randint(1, V, (3, 10), generator=torch.Generator().manual_seed(0))


def build(kind: str, d_model: int, parametrization: str = "sp", base: int | None = None, **kw):
    torch.manual_seed(0)
    arch = dict(ARCH, d_model=d_model, parametrization=parametrization, mup_base_width=base, **kw)
    if kind == "gpt":
        return GPT(V, **arch)
    if kind == "gpt_moe_untied":
        return GPT(V, moe=MOE, tie_embeddings=False, **arch)
    if kind == "classifier":
        return EncoderClassifier(V, pad_id=0, num_labels=3, pooling="bert", classifier_dropout=0.0, **arch)
    if kind == "mlm":
        return MaskedLM(V, pad_id=0, mask_id=1, **arch)
    return EncoderDecoder(V, pad_id=0, bos_id=1, eos_id=2, **arch)


def logits(model) -> torch.Tensor:
    return model(IDS, IDS) if isinstance(model, EncoderDecoder) else model(IDS)


def steps(model, optimizer, n: int = 2) -> list[torch.Tensor]:
    """n optimizer steps through the task's optimizer wiring (its parameter groups, lab.nn.mup's lrs)."""
    opt = LanguageModelTask(model, optimizer).configure_optimizers()
    for _ in range(n):
        logits(model).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


KINDS = ["gpt", "gpt_moe_untied", "classifier", "mlm", "seq2seq"]
ADAMW = functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
MUON = functools.partial(MuonAdamW, lr=1e-2, weight_decay=0.1, muon_lr=0.02, muon_weight_decay=0.1, ns_dtype="float32")


@pytest.mark.parametrize("kind", KINDS)
def test_mup_at_its_base_width_is_sp_exactly(kind):
    """Catches any rule that is not exactly 1 at the base (an attention scale computed as 1/head_dim x sqrt(base)
    in another order, an output multiplier applied whatever the width, a group split that reorders parameters)."""
    sp, mu = build(kind, 16), build(kind, 16, "mup", base=16)
    assert torch.equal(logits(sp), logits(mu))
    for optimizer in (ADAMW, MUON):
        sp, mu = build(kind, 16), build(kind, 16, "mup", base=16)
        assert all(torch.equal(a, b) for a, b in zip(steps(sp, optimizer), steps(mu, optimizer), strict=True))


@pytest.mark.parametrize("width", [128, 256, 512])
def test_init_and_adam_lrs_are_the_mup_packages(width):
    """Against mup 1.0 (set_base_shapes' InfShape, MuAdamW's groups) on the same shapes, tied GPT: every parameter's
    Adam lr and weight decay, and its init = sp's same draw x width_mult^-1/2 for the matrix-like (mup.init's
    rule). Catches a hidden lr of base/d_model^2 or 1, the init's exponent, decay left unscaled, a vector or
    embedding scaled."""
    mup = pytest.importorskip("mup", reason="the reference implementation: make setup installs it (pip install --no-deps mup)")
    model, sp = build("gpt", width, "mup", base=64, n_heads=4), build("gpt", width, n_heads=4)
    mup.set_base_shapes(model, build("gpt", 64, n_heads=4), rescale_params=False, do_assert=False)  # tied head: an Embedding
    roles = model.parameter_roles()
    named = dict(model.named_parameters())
    decayed = [p for n, p in named.items() if roles[n] is not Role.VECTOR]
    reference = mup.MuAdamW([{"params": decayed}, {"params": [p for p in named.values() if not any(p is d for d in decayed)],
                                                   "weight_decay": 0.0}], lr=1e-2, weight_decay=0.1)
    ours = LanguageModelTask(model, ADAMW).configure_optimizers()

    def per_param(opt) -> list[float]:  # lr, weight decay of every parameter, in the model's order
        of = {id(p): (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
        return [x for p in named.values() for x in of[id(p)]]

    assert per_param(ours) == pytest.approx(per_param(reference))
    assert ours.param_groups[0]["lr"] == 1e-2  # the unscaled part first: the schedules' min_lr is the first group's
    for (name, p), q in zip(named.items(), dict(sp.named_parameters()).values(), strict=True):
        factor = p.infshape.width_mult() ** -0.5 if p.infshape.ninf() == 2 else 1.0
        torch.testing.assert_close(p, q * factor, msg=name)
    assert model.output_scale == 64 / width  # mup.MuSharedReadout's output_mult / width_mult


def test_readouts_routers_heads_and_ties_by_hand():
    """The rules the mup package leaves to its MuReadout, as the module docstring of lab.nn.mup gives them, at
    width_mult 4: an untied readout and a router fold the 1/width_mult multiplier into init and lr; a tied head
    keeps the embedding's rules and multiplies the logits; experts and a pooler's dense layer are hidden
    matrices. Catches a readout treated as hidden (init x 1/2), a router left at sp, a tied head without the
    multiplier."""
    def scales(model):
        return model.parameter_scales()

    moe = build("gpt_moe_untied", 64, "mup", base=16)
    s = scales(moe)
    assert s["lm_head.weight"] == s["decoder.layers.1.ffn.router.weight"] == Scale(init=0.25, lr=0.25)
    assert s["decoder.layers.1.ffn.experts.w_in"] == s["decoder.layers.1.ffn.experts.w_out"] == Scale(0.5, 0.25)
    assert s["decoder.layers.1.ffn.experts.b_in"] == s["embed.tokens.weight"] == Scale()
    assert moe.output_scale is None
    cls = scales(build("classifier", 64, "mup", base=16))
    assert cls["classifier.weight"] == Scale(0.25, 0.25) and cls["pool.dense.weight"] == Scale(0.5, 0.25)
    mlm = build("mlm", 64, "mup", base=16)
    assert mlm.mlm_head.output_scale == 0.25 and scales(mlm)["mlm_head.dense.weight"] == Scale(0.5, 0.25)
    s2s = build("seq2seq", 64, "mup", base=16)
    assert s2s.output_scale == 0.25 and scales(s2s)["decoder.layers.0.cross_attn.kv_proj.weight"] == Scale(0.5, 0.25)
    t5 = build("seq2seq", 64, "mup", base=16, output_scale=True, scale_embeddings=True)
    assert t5.output_scale == 16 ** -0.5 * 0.25 and t5.src_embed.scale == 4.0  # sp's constants at the base width


def test_attention_scale_is_one_over_head_dim_relative_to_the_base():
    """head_dim 32 at base 8: 1/sqrt(8) x 8/32; T5's 1.0 becomes 8/32. Catches 1/sqrt(head_dim) kept under mup."""
    for attention_scale, want in ((None, 8 ** -0.5 / 4), (1.0, 0.25)):
        model = GPT(V, d_model=64, n_heads=2, n_layers=1, parametrization="mup", mup_base_width=16,
                    attention_scale=attention_scale)
        assert model.cfg.mup_base_head_dim == 8 and model.decoder.layers[0].self_attn.scale == pytest.approx(want)


def test_muons_part_keeps_its_lr_and_adamws_part_follows_mup():
    """MuonAdamW under mup at width_mult 4: Muon's groups keep muon_lr and muon_weight_decay (lab.nn.mup says
    why); the untied readout in AdamW's gets lr / 4 and weight decay x 4, the embeddings the base's."""
    model = build("gpt_moe_untied", 64, "mup", base=16)
    opt = LanguageModelTask(model, MUON).configure_optimizers()
    names = {id(p): n for n, p in model.named_parameters()}
    lr = {names[id(p)]: (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
    muon = [n for n, r in model.parameter_roles().items() if r in (Role.HIDDEN, Role.ROUTER, Role.EXPERT)]
    assert {lr[n] for n in muon} == {(0.02, 0.1)}
    assert lr["lm_head.weight"] == pytest.approx((1e-2 / 4, 0.4)) and lr["embed.tokens.weight"] == (1e-2, 0.1)


def coordinate_check(parametrization: str, widths=(64, 128, 256, 512), n_steps: int = 3) -> dict[str, np.ndarray]:
    """Appendix D: RMS of each block's output and of the logits after 0..n_steps Adam steps on one batch, per
    width -> {quantity: slopes of log2 RMS against log2 width, one per step}."""
    rms: dict[str, list[list[float]]] = {}
    for width in widths:
        torch.manual_seed(0)
        model = GPT(64, d_model=width, n_heads=4, n_layers=2, max_seq_len=16, parametrization=parametrization,
                    mup_base_width=64)
        opt = LanguageModelTask(model, functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.0)).configure_optimizers()
        ids = torch.randint(0, 64, (8, 17), generator=torch.Generator().manual_seed(1))
        seen: dict[str, float] = {}
        watched = {f"block{i}": layer for i, layer in enumerate(model.decoder.layers)} | {"logits": model.lm_head}
        for key, module in watched.items():
            module.register_forward_hook(lambda m, i, o, key=key, seen=seen: seen.__setitem__(
                key, (o[0] if isinstance(o, tuple) else o).detach().pow(2).mean().sqrt().item()))
        for _ in range(n_steps + 1):
            F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
            for key, value in seen.items():
                rms.setdefault(key, []).append(value)
            opt.step()
            opt.zero_grad()
    x = np.log2(widths)
    return {key: np.array([np.polyfit(x, np.log2(np.array(v).reshape(len(widths), -1)[:, s]), 1)[0]
                           for s in range(n_steps + 1)]) for key, v in rms.items()}


def test_coordinate_check_flat_under_mup_growing_under_sp():
    """Widths 64..512: under mup every watched activation's RMS after 0-3 steps has a log-log slope within 0.4 of
    flat; under sp the blocks' outputs grow at least as width^0.5 after one step (measured: ~1-2). Catches the
    hidden lr or init left at sp (slopes ~1), the readout multiplier dropped (logits' slope ~+0.5), the Adam lr
    scaled by 1/width^2 (slopes ~-1)."""
    mu, sp = coordinate_check("mup"), coordinate_check("sp")
    assert all(np.abs(s).max() < 0.4 for s in mu.values()), mu
    assert min(sp["block0"][1:].min(), sp["block1"][1:].min()) > 0.5, sp


def test_refusals():
    with pytest.raises(ConfigError, match="init_from=hf/gpt2 loads sp weights"):
        GPTConfig(init_from="hf/gpt2", parametrization="mup")
    with pytest.raises(ConfigError, match="init_from=x loads sp weights"):
        EncoderClassifierConfig(init_from="x", parametrization="mup")
    with pytest.raises(ConfigError, match="parametrization='mu' is not supported"):
        GPTConfig(parametrization="mu")
    with pytest.raises(ConfigError, match=r"d_ff=100 x mup_base_width 16 / d_model 24 is not a whole number"):
        GPTConfig(d_model=24, n_heads=2, d_ff=100, parametrization="mup", mup_base_width=16, mup_base_head_dim=8)
    with pytest.raises(LabError, match="away from its base shape"):
        export(build("gpt", 32, "mup", base=16), None, {}, None)
    assert GPTConfig(d_model=64, n_heads=4, parametrization="mup", mup_base_width=16).mup_base_d_ff == 64
