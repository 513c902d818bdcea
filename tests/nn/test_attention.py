"""The shared core's attention: masks, padding, KV cache, positions."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY_GPT as TINY

from lab.models.gpt import GPT
from lab.nn import KVCache, MultiHeadAttention, TransformerConfig, TransformerStack
from lab.nn.norms import RMSNorm
from lab.nn.positions import RelativePositionBias, RotaryEmbedding, relative_bucket, sinusoidal_table

POSITIONS = ["learned", "sinusoidal", "rotary", "relative", "none"]


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


@pytest.mark.parametrize(("bidirectional", "distances", "buckets"), [
    # 8 buckets, 4 per direction: distances 0 and 1 exact, then 2 + floor(ln(|d|/2) / ln(12/2) * 2), at most 3;
    # keys ahead (d > 0) 4 buckets further
    (True, [0, -1, 1, -2, -3, -5, -6, -12, -30, 5, 30], [0, 1, 5, 2, 2, 3, 3, 3, 3, 7, 7]),
    # causal, 8 buckets back: 0..3 exact, then 4 + floor(ln(|d|/4) / ln(12/4) * 4), at most 7; keys ahead: 0
    (False, [0, -3, -4, -5, -6, -7, -12, 3], [0, 3, 4, 4, 5, 6, 7, 0]),
], ids=["encoder", "decoder"])
def test_t5_relative_buckets_match_a_hand_computation(bidirectional, distances, buckets):
    got = relative_bucket(torch.tensor(distances), bidirectional, num_buckets=8, max_distance=12)
    assert got.tolist() == buckets


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_relative_bias_attention_equals_a_naive_loop(causal):
    """softmax(scale * q.k + bias[h, bucket(key - query)]) over allowed keys, one (row, head, query) at a time; the
    second row's last 3 keys are padding, the queries start at position 2 (a cache holds 2 earlier ones)."""
    from lab.nn.attention import MultiHeadAttention, causal_mask

    torch.manual_seed(0)
    H, hd, T, start = 2, 4, 5, 2
    attn = MultiHeadAttention(8, H, bias=False, scale=1.0).eval()
    rel = RelativePositionBias(H, num_buckets=8, max_distance=12, bidirectional=not causal)
    torch.nn.init.normal_(rel.weight, std=2.0)
    x, past = torch.randn(2, T, 8), torch.randn(2, start, 8)
    keep = torch.ones(2, start + T, dtype=torch.bool)
    keep[1, -3:] = False
    allowed = keep[:, None, None, :] & (causal_mask(T, start + T, "cpu") if causal else True)
    cache = KVCache(2, H, hd, 16, torch.float32, "cpu")
    attn(past, cache=cache)  # fill the first 2 positions
    got = attn(x, mask=rel(T, start, allowed), cache=cache)
    q, k, v = attn.qkv_proj(torch.cat([past, x], 1)).detach().split(H * hd, -1)
    weight, expected = rel.weight.detach(), torch.zeros(2, T, H * hd)
    for b in range(2):
        for h in range(H):
            for i in range(T):
                heads = slice(h * hd, (h + 1) * hd)
                scores = []
                for j in range(start + T):
                    bucket = relative_bucket(torch.tensor(j - (start + i)), not causal, 8, 12)
                    ok = bool(keep[b, j]) and (not causal or j <= start + i)
                    scores.append(q[b, start + i, heads] @ k[b, j, heads] + weight[bucket, h] if ok else -math.inf)
                expected[b, i, heads] = torch.softmax(torch.tensor(scores), 0) @ v[b, :, heads]
    torch.testing.assert_close(got, attn.out_proj(expected).detach(), atol=1e-5, rtol=1e-5)


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
    assert torch.allclose(stack(x)[0], stack(padded, padding_mask=mask)[0][:, :6], atol=1e-5)


def test_cross_attention_ignores_padded_memory():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_layers=2, n_heads=4, positions="learned")
    decoder = TransformerStack(cfg, causal=True, cross_attention=True).eval()
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    padded = torch.cat([memory, torch.randn(2, 3, 32) * 50], dim=1)
    mask = torch.tensor([[True] * 7 + [False] * 3] * 2)
    assert torch.allclose(decoder(x, memory=memory)[0], decoder(x, memory=padded, memory_padding_mask=mask)[0], atol=1e-5)


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


def naive_rotation(x: torch.Tensor, positions: list[int], inverse: bool = False) -> torch.Tensor:
    """[..., T, hd] in float64: each (even, odd) pair at position p turned by p / 10000^(2i/hd), one at a time."""
    hd, out = x.shape[-1], torch.empty_like(x, dtype=torch.float64)
    for t, p in enumerate(positions):
        for i in range(hd // 2):
            a = p / 10000 ** (2 * i / hd) * (-1 if inverse else 1)
            x1, x2 = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i], out[..., t, 2 * i + 1] = x1 * math.cos(a) - x2 * math.sin(a), x1 * math.sin(a) + x2 * math.cos(a)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["complex-product", "pair-swap"])
@pytest.mark.parametrize("seq_dim", [-2, -3], ids=["heads-first", "positions-first"])
def test_rotary_and_its_gradient_equal_a_pair_by_pair_rotation(seq_dim, dtype):
    """Forward: each pair rotated by its angle; backward: the gradient turned back (the inverse rotation), both in
    either layout ([B, H, T, hd] or [B, T, H, hd]), by both kernels: float32 takes the complex product, any other
    dtype (bfloat16 in practice; float64 here, to compare closely) the pair swap with _Rotation's backward.
    Catches pairs swapped the wrong way, a sign lost in a table or in the backward's inverse, and a table
    broadcast over the wrong dim."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(head_dim=8, max_len=16)
    x = torch.randn(2, 3, 5, 8, dtype=dtype, requires_grad=True)  # [B, H, T, hd]
    g = torch.randn(2, 3, 5, 8, dtype=dtype)
    moved = (lambda t: t) if seq_dim == -2 else (lambda t: t.transpose(1, 2))
    y = moved(rope(moved(x), start=4, seq_dim=seq_dim))
    (grad,) = torch.autograd.grad(y, x, g)
    positions = list(range(4, 9))
    torch.testing.assert_close(y.double(), naive_rotation(x.detach(), positions), atol=1e-6, rtol=0)
    torch.testing.assert_close(grad.double(), naive_rotation(g, positions, inverse=True), atol=1e-6, rtol=0)


def test_rotary_of_a_view_that_cannot_be_complex_takes_the_pair_swap():
    """float32 features at an odd offset (a slice one column into a wider tensor, every stride even) cannot be
    viewed as complex numbers in place: they take the pair swap and still equal the pair-by-pair rotation;
    treating them as complex raises (view_as_complex's rule)."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(head_dim=8, max_len=16)
    wide = torch.randn(2, 3, 5, 10)
    x = wide[..., 1:9]  # [B, H, T, hd], storage offset 1
    torch.testing.assert_close(rope(x, start=2).double(), naive_rotation(x, list(range(2, 7))), atol=1e-6, rtol=0)


def test_attention_with_qk_norm_and_rotary_equals_a_naive_computation_with_its_gradients():
    """The fast recipe's attention (qk_norm, rotary, grouped-query: queries and keys normalised and rotated as one
    tensor in the projection's layout) against float64 by hand: each head's RMS norm and its own gain, each pair
    rotated, a softmax per query; the output and the gradients of the input and of both gains. Catches the key
    gain applied to query heads (or the reverse), another epsilon, and heads split in the wrong place."""
    torch.manual_seed(0)
    D, H, KV, hd, T, eps = 32, 4, 2, 8, 6, 1e-6
    attn = MultiHeadAttention(D, H, bias=False, rotary=RotaryEmbedding(hd, 16), n_kv_heads=KV,
                              qk_norm=(RMSNorm(hd, eps), RMSNorm(hd, eps)))
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, T, D, requires_grad=True)
    g = torch.randn(2, T, D)
    y = attn(x, is_causal=True)
    ours = torch.autograd.grad(y, (x, attn.q_norm.weight, attn.k_norm.weight), g)

    params = [p.detach().double().requires_grad_() for p in (attn.qkv_proj.weight, attn.out_proj.weight,
                                                              attn.q_norm.weight, attn.k_norm.weight)]
    w_qkv, w_out, gain_q, gain_k = params
    xd = x.detach().double().requires_grad_()
    proj = xd @ w_qkv.T

    def head(i: int, gain: torch.Tensor | None) -> torch.Tensor:  # [B, T, hd], normalised and rotated if gain given
        h = proj[..., i * hd : (i + 1) * hd]
        if gain is None:
            return h
        h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * gain
        cos = torch.tensor([[math.cos(t / 10000 ** (2 * (j // 2) / hd)) for j in range(hd)] for t in range(T)], dtype=torch.float64)
        sin = torch.tensor([[math.sin(t / 10000 ** (2 * (j // 2) / hd)) for j in range(hd)] for t in range(T)], dtype=torch.float64)
        partner = torch.stack([-h[..., 1::2], h[..., 0::2]], -1).flatten(-2)  # (-x2, x1) per pair
        return h * cos + partner * sin

    keys = [head(H + j, gain_k) for j in range(KV)]
    values = [head(H + KV + j, None) for j in range(KV)]
    outs = []
    for i in range(H):
        q, k, v = head(i, gain_q), keys[i // (H // KV)], values[i // (H // KV)]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(scores, -1) @ v)
    expected = torch.cat(outs, -1) @ w_out.T
    reference = torch.autograd.grad(expected, (xd, gain_q, gain_k), g.double())
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=0)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a.double(), b, atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------------------------------- grouped-query attention


@pytest.mark.parametrize(("n_kv_heads", "hd"), [(2, 8), (1, 8), (2, 12)], ids=["gqa-2-of-4", "mqa", "head-dim-12"])
def test_grouped_query_attention_equals_a_naive_loop(n_kv_heads, hd):
    """Query head h reads key/value head h // (n_heads / n_kv_heads) (Llama's repeat_kv), under the causal mask and
    a padding mask; the reference is a loop over batch rows, heads and query positions. head-dim-12: heads wider
    than d_model / n_heads (Qwen3's head_dim), queries 4 x 12 = 48 wide, the output projected back to 32."""
    from lab.nn.attention import MultiHeadAttention

    torch.manual_seed(0)
    D, H, T = 32, 4, 7
    rope = RotaryEmbedding(hd, 16)
    attn = MultiHeadAttention(D, H, bias=True, rotary=rope, n_kv_heads=n_kv_heads, head_dim=hd).eval()
    assert attn.qkv_proj.weight.shape == (H * hd + 2 * n_kv_heads * hd, D)
    assert attn.out_proj.weight.shape == (D, H * hd)
    with torch.no_grad():
        attn.qkv_proj.bias.normal_()
    x = torch.randn(2, T, D)
    real = torch.tensor([[True] * T, [True] * 4 + [False] * 3])  # row 1: 3 padded keys at the end
    with torch.no_grad():
        ours = attn(x, mask=real[:, None, None, :], is_causal=True)
        proj = x @ attn.qkv_proj.weight.T + attn.qkv_proj.bias
        Q = H * hd
        q = proj[..., :Q].reshape(2, T, H, hd).transpose(1, 2)
        k = proj[..., Q : Q + n_kv_heads * hd].reshape(2, T, n_kv_heads, hd).transpose(1, 2)
        v = proj[..., Q + n_kv_heads * hd :].reshape(2, T, n_kv_heads, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        heads = torch.zeros(2, T, H, hd)
        for b in range(2):
            for h in range(H):
                kv = h // (H // n_kv_heads)
                for i in range(T):
                    keys = [j for j in range(i + 1) if real[b, j]]
                    w = torch.softmax(torch.stack([q[b, h, i] @ k[b, kv, j] for j in keys]) / math.sqrt(hd), 0)
                    heads[b, i, h] = sum(wj * v[b, kv, j] for wj, j in zip(w, keys))
        expected = heads.reshape(2, T, H * hd) @ attn.out_proj.weight.T + attn.out_proj.bias
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("head_dim", [None, 12], ids=["head-dim-8", "head-dim-12"])
def test_grouped_query_kv_cache_decoding_equals_recomputation(head_dim):
    """A GQA model (rotary, qk_norm) caches n_kv_heads heads per layer; cached steps, and greedy generation past
    the context window (the cache rebuilt), equal recomputing from scratch. head-dim-12: heads of model.head_dim,
    not d_model / n_heads = 8 (Qwen3), in the cache, rotary and qk_norm."""
    from lab.models.decoding import generate

    model = tiny_gpt(positions="rotary", qk_norm=True, n_kv_heads=2, head_dim=head_dim)
    caches = model.new_caches(3)
    assert caches[0].k.shape == (3, 2, 32, head_dim or 8)
    assert model.decoder.layers[0].self_attn.q_norm.weight.shape == (head_dim or 8,)
    ids = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        steps = [model(ids[:, :5], caches)] + [model(ids[:, t : t + 1], caches) for t in range(5, 20)]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(ids), atol=1e-5, rtol=0)
    prompt = ids[:, :4]
    cached = generate(model, prompt, 40, temperature=0.0)
    assert torch.equal(cached, generate(model, prompt, 40, temperature=0.0, use_cache=False))


def test_n_kv_heads_must_divide_n_heads():
    from lab.errors import ConfigError

    assert TransformerConfig(n_heads=4).n_kv_heads == 4  # null: one key/value head per query head
    with pytest.raises(ConfigError, match=r"model.n_kv_heads=3 does not divide model.n_heads=4; pick n_kv_heads "
                                          r"among \[1, 2, 4\]"):
        TransformerConfig(n_heads=4, n_kv_heads=3)


def test_head_dim_is_d_model_over_n_heads_unless_set():
    from lab.errors import ConfigError

    assert TransformerConfig(d_model=32, n_heads=4).head_dim == 8
    assert TransformerConfig(d_model=30, n_heads=4, head_dim=16).head_dim == 16  # then n_heads need not divide d_model
    with pytest.raises(ConfigError, match=r"model.head_dim=0 must be an integer >= 1 or null \(d_model // n_heads\)"):
        TransformerConfig(head_dim=0)
    with pytest.raises(ConfigError, match="rotary positions need an even head size, got model.head_dim=7"):
        TransformerConfig(head_dim=7, positions="rotary")


# ---- QK-norm ----------------------------------------------------------------------------------------------

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
