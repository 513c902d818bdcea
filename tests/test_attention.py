"""The shared core's attention: masks, padding, KV cache, positions."""
from __future__ import annotations

import math

import pytest
import torch

from lab.models.gpt import GPT
from lab.nn import KVCache, TransformerConfig, TransformerStack
from lab.nn.positions import RotaryEmbedding, sinusoidal_table

POSITIONS = ["learned", "sinusoidal", "rotary", "none"]


def tiny_gpt(**over) -> GPT:
    torch.manual_seed(0)
    arch = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=32, **over)
    return GPT(**arch).eval()


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_causal_mask_hides_the_future(positions, norm_placement):
    model = tiny_gpt(positions=positions, norm_placement=norm_placement)
    ids = torch.randint(0, 50, (2, 16))
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 7) % 50  # perturb positions 10..15
    a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6), "a past position saw a future token"
    assert not torch.allclose(a[:, 10:], b[:, 10:]), "the perturbation had no effect at all"


@pytest.mark.parametrize("positions", POSITIONS)
def test_kv_cache_decoding_equals_full_recomputation(positions):
    model = tiny_gpt(positions=positions)
    ids = torch.randint(0, 50, (3, 20))
    full = model(ids)  # [B, T, V]
    caches = model.new_caches(3)
    steps = [model(ids[:, :5], caches)]  # prefill a 5-token prompt, then one token at a time
    steps += [model(ids[:, t : t + 1], caches) for t in range(5, 20)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_kv_cache_chunked_prefill_masks_within_the_chunk():
    model = tiny_gpt(positions="rotary")
    ids = torch.randint(0, 50, (1, 12))
    caches = model.new_caches(1)
    out = torch.cat([model(ids[:, :4], caches), model(ids[:, 4:12], caches)], dim=1)
    assert torch.allclose(out, model(ids), atol=1e-5)


def test_kv_cache_refuses_overflow():
    cache = KVCache(1, 2, 4, max_len=3, dtype=torch.float32, device="cpu")
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="overflow"):
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_key_padding_does_not_change_real_tokens(norm_placement):
    """An encoder stack: appending padded positions leaves the real positions' outputs unchanged."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_layers=2, n_heads=4, positions="none", norm_placement=norm_placement)
    stack = TransformerStack(cfg, causal=False).eval()
    x = torch.randn(2, 6, 32)
    padded = torch.cat([x, torch.randn(2, 4, 32) * 100], dim=1)  # garbage in the pad slots
    mask = torch.tensor([[True] * 6 + [False] * 4] * 2)
    assert torch.allclose(stack(x), stack(padded, padding_mask=mask)[:, :6], atol=1e-5)


def test_cross_attention_ignores_padded_memory():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_layers=2, n_heads=4, positions="learned")
    decoder = TransformerStack(cfg, causal=True, cross_attention=True).eval()
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    padded = torch.cat([memory, torch.randn(2, 3, 32) * 50], dim=1)
    mask = torch.tensor([[True] * 7 + [False] * 3] * 2)
    assert torch.allclose(decoder(x, memory=memory), decoder(x, memory=padded, memory_padding_mask=mask), atol=1e-5)


def test_sinusoidal_table_matches_the_paper_formula():
    table = sinusoidal_table(50, 16)
    pos, i = 37, 3
    assert math.isclose(table[pos, 2 * i], math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-5)
    assert math.isclose(table[pos, 2 * i + 1], math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-5)


def test_rotary_scores_depend_only_on_relative_offset():
    rope = RotaryEmbedding(head_dim=8, max_len=64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    score = lambda m, n: (rope(q, m) * rope(k, n)).sum()  # noqa: E731
    assert torch.allclose(score(5, 2), score(40, 37), atol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 4), atol=1e-3)
