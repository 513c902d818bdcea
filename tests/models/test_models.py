"""Model variants, init and generation."""
from __future__ import annotations

import itertools
import math
import re

import pytest
import torch

from lab.errors import ConfigError
from lab.models.decoding import generate, sample_next
from lab.models.gpt import GPT
from lab.nn import Role, TransformerConfig
from lab.nn.params import count_parameters

VARIANTS = list(itertools.product(["pre", "post"], ["learned", "sinusoidal", "rotary"], ["relu", "gelu", "swiglu"], ["layernorm", "rmsnorm"]))


@pytest.mark.parametrize("placement,positions,ffn,norm", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_every_variant_runs_forward_and_backward(placement, positions, ffn, norm):
    torch.manual_seed(0)
    model = GPT(vocab_size=40, d_model=32, n_layers=2, n_heads=4, max_seq_len=16,
                norm_placement=placement, positions=positions, ffn=ffn, norm=norm)
    ids = torch.randint(0, 40, (2, 16))
    logits = model(ids)
    assert logits.shape == (2, 16, 40)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"parameters without a finite gradient: {missing}"


def test_seed_and_gpt2_layouts_are_expressible():
    vaswani = GPT(vocab_size=40, d_model=32, n_heads=4, n_layers=2, norm_placement="post", positions="sinusoidal",
                  ffn="relu", scale_embeddings=True, tie_embeddings=False)
    gpt2 = GPT(vocab_size=40, d_model=32, n_heads=4, n_layers=2)
    assert not any(n.startswith("embed.positions") for n, _ in vaswani.named_parameters())  # fixed table
    assert isinstance(vaswani.decoder.final_norm, torch.nn.Identity)  # post-norm: no final norm
    assert gpt2.lm_head.weight is gpt2.embed.tokens.weight  # tied
    assert vaswani.lm_head.weight is not vaswani.embed.tokens.weight


def test_gpt2_init_scales_residual_projections_by_depth():
    torch.manual_seed(0)
    model = GPT(vocab_size=100, d_model=256, n_heads=4, n_layers=8)
    block = model.decoder.layers[0]
    assert math.isclose(block.self_attn.qkv_proj.weight.std().item(), 0.02, rel_tol=0.05)
    assert math.isclose(block.self_attn.out_proj.weight.std().item(), 0.02 / math.sqrt(16), rel_tol=0.05)
    assert math.isclose(block.ffn.down.weight.std().item(), 0.02 / math.sqrt(16), rel_tol=0.05)


def test_swiglu_default_hidden_keeps_parameter_count():
    gelu = count_parameters(GPT(vocab_size=10, d_model=192, n_heads=4, n_layers=1, ffn="gelu", bias=False))["total"]
    swiglu = count_parameters(GPT(vocab_size=10, d_model=192, n_heads=4, n_layers=1, ffn="swiglu", bias=False))["total"]
    assert abs(gelu - swiglu) / gelu < 0.02


@pytest.mark.parametrize("positions,tied", [("learned", True), ("rotary", False), ("rotary", True), ("relative", True)],
                         ids=["learned-tied", "rotary-untied", "rotary-tied", "relative-tied"])
def test_flops_count_the_parameters_of_matrix_products_not_the_lookup_tables(positions, tied):
    from lab.runtime.callbacks.throughput import flops_per_token

    V, D, T, L = 50, 32, 16, 2
    model = GPT(vocab_size=V, d_model=D, n_heads=4, n_layers=L, max_seq_len=T, positions=positions,
                tie_embeddings=tied, bias=True, ffn="gelu")
    per_block = (D * 3 * D + 3 * D) + (D * D + D) + (D * 4 * D + 4 * D) + (4 * D * D + D) + 2 * 2 * D  # by hand
    head = V * D  # the output layer's matrix (the tied embedding's too)
    table = {"learned": T * D, "relative": 32 * 4}.get(positions, 0)  # positions' lookup table: T x D, buckets x heads
    total = L * per_block + 2 * D + head + (0 if tied else V * D) + table
    counts = count_parameters(model)
    assert counts["total"] == counts["active"] == total
    assert counts["matmul"] == L * per_block + 2 * D + head  # no token lookup, no position table
    assert flops_per_token(model.cfg, counts, T) == 6 * counts["matmul"] + 12 * L * D * T


@pytest.mark.parametrize("field,value,message", [
    ("norm", "batchnorm", "model.norm='batchnorm' is not supported"),
    ("n_heads", 6, "not divisible by model.n_heads=6"),
    ("positions", "alibi", "choose one of learned, sinusoidal, rotary, relative, none"),
    ("relative_buckets", 2, "relative positions need model.relative_buckets >= 4"),
    ("relative_max_distance", 16, "model.relative_max_distance > relative_buckets / 2, got 32 and 16"),
    ("attention_scale", 0.0, "model.attention_scale=0.0 must be a number in (0, inf), or null for 1/sqrt"),
    ("dropout", 1.5, "model.dropout=1.5 must be a probability in [0, 1)"),
    ("d_ff", 0, "model.d_ff=0 must be an integer >= 1 or null (4 * d_model)"),
    ("init_std", -1.0, "model.init_std=-1.0 must be a number in (0, inf)"),
    ("rope_scaling", {"factor": 8}, "model.rope_scaling={'factor': 8} needs the numbers factor, low_freq_factor"),
])
def test_bad_architecture_values_name_the_field(field, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TransformerConfig.from_kwargs(**{"d_model": 40, "n_heads": 4, "positions": "relative", field: value})


@pytest.mark.parametrize("kind", ["gpt", "translator"])
def test_output_scale_multiplies_the_last_hidden_state_by_d_model_to_the_minus_half(kind):
    """T5's output scale, against the same weights without it: logits x 64^-0.5 = / 8 exactly (a power of two); the
    token embeddings start at embed_init_std (1.0), every other matrix at init_std."""
    from lab.models.seq2seq import EncoderDecoder

    def build(scale: bool):
        torch.manual_seed(0)
        arch = dict(d_model=64, n_heads=4, n_layers=1, output_scale=scale, embed_init_std=1.0, init_std=0.02)
        return (GPT(vocab_size=40, **arch) if kind == "gpt" else EncoderDecoder(40, 0, 1, 2, **arch)).eval()

    plain, scaled = build(False), build(True)
    ids = torch.randint(3, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    inputs = (ids,) if kind == "gpt" else (ids, ids)
    with torch.no_grad():
        torch.testing.assert_close(scaled(*inputs), plain(*inputs) / 8, atol=0, rtol=0)
    embed = (scaled.embed if kind == "gpt" else scaled.src_embed).tokens.weight
    assert 0.9 < embed.std() < 1.1 and max(p.std() for n, p in scaled.named_parameters()
                                           if scaled.parameter_roles()[n] is Role.HIDDEN) < 0.03


def test_an_encoder_refuses_the_output_scale():
    from lab.models.encoder import EncoderClassifier

    with pytest.raises(ConfigError, match="the encoders do not have it: set model.output_scale=false"):
        EncoderClassifier(vocab_size=20, pad_id=0, num_labels=2, d_model=16, n_heads=2, n_layers=1, output_scale=True)


def test_unknown_model_field_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="unknown model field.*n_layer.*known fields"):
        TransformerConfig.from_kwargs(n_layer=3)


def test_input_longer_than_context_is_a_clear_error():
    model = GPT(vocab_size=10, d_model=16, n_heads=2, n_layers=1, max_seq_len=8)
    with pytest.raises(ConfigError, match="longer than model.max_seq_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_top_k_and_top_p_keep_exactly_the_allowed_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    draws = lambda **kw: {int(sample_next(logits, 1.0, generator=torch.Generator().manual_seed(s), **kw)) for s in range(300)}  # noqa: E731
    assert draws(top_k=2) == {0, 1}
    assert draws(top_p=0.7) == {0, 1}  # 0.5 < 0.7 <= 0.8: the nucleus is the first two
    assert draws(top_p=0.5) == {0}
    assert int(sample_next(logits, temperature=0)) == 0


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_cached_generation_equals_recomputation_past_the_window(positions):
    """Past the context window both modes slide the same way, so greedy tokens are identical."""
    torch.manual_seed(0)
    model = GPT(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_seq_len=16, positions=positions).eval()
    prompt = torch.randint(0, 30, (2, 5))
    cached = generate(model, prompt, 40, temperature=0, use_cache=True)
    full = generate(model, prompt, 40, temperature=0, use_cache=False)
    assert cached.shape == (2, 45)
    assert torch.equal(cached, full)


def test_generation_stops_rows_at_eos():
    torch.manual_seed(0)
    model = GPT(vocab_size=5, d_model=16, n_heads=2, n_layers=1, max_seq_len=32).eval()
    out = generate(model, torch.zeros(3, 1, dtype=torch.long), 20, temperature=1.0, eos_id=4,
                   generator=torch.Generator().manual_seed(0))
    for row in out.tolist():
        if 4 in row:
            assert all(t == 4 for t in row[row.index(4):]), "tokens after EOS must stay EOS"
