"""Decoding and masking on models that say something: untied random weights at init_std 0.3, so the next-token
distribution changes from position to position and with the source (at the usual 0.02 init a model emits one
token over and over, and a cache, position or mask bug changes logits by less than the tolerance).

Every comparison is against an independent reference: full recomputation, a naive greedy loop, exhaustive
search over every hypothesis of a tiny vocabulary, masks perturbed where they must hide something.
"""
from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch

from lab.models.decoding import beam_search, generate, greedy_translate
from lab.models.gpt import GPT
from lab.models.seq2seq import EncoderDecoder
from lab.nn import TransformerConfig, TransformerStack, causal_mask

PAD, BOS, EOS = 0, 1, 2
LAYOUTS = {
    "modern": dict(norm_placement="pre", positions="rotary", ffn="swiglu"),
    "vanilla": dict(norm_placement="post", positions="sinusoidal", ffn="relu", scale_embeddings=True),
    # grouped-query attention: 4 query heads share 2 key/value heads, in self- and cross-attention and their caches
    "modern-gqa": dict(norm_placement="pre", positions="rotary", ffn="swiglu", n_kv_heads=2),
    # T5's (translator_small_moe's): the relative position bias with few buckets, so the 10 positions here reach
    # its logarithmic buckets, and unscaled attention
    "t5": dict(norm_placement="pre", norm="rmsnorm", positions="relative", relative_buckets=8, relative_max_distance=12,
               attention_scale=1.0, ffn="relu", bias=False),
}
LIVELY = dict(init_std=0.3, tie_embeddings=False)


def translator(layout: str, vocab: int = 12, seed: int = 0, eos_boost: float = 1.0) -> EncoderDecoder:
    """eos_boost scales eos's output row: how readily hypotheses end (rows that stop early vs hit the limit)."""
    torch.manual_seed(seed)
    model = EncoderDecoder(vocab, PAD, BOS, EOS, share_embeddings=False, d_model=32, n_layers=2, n_heads=4,
                           max_seq_len=32, **LAYOUTS[layout], **LIVELY).eval()
    with torch.no_grad():
        model.lm_head.weight[EOS] *= eos_boost
    return model


def gpt(positions: str, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(vocab_size=12, d_model=32, n_layers=2, n_heads=4, max_seq_len=24, positions=positions, **LIVELY, **kw).eval()


def sources(vocab: int = 12, seed: int = 0) -> torch.Tensor:
    """8 sentences of 2..7 tokens + eos, right-padded: [8, 8]."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((8, 8), PAD)
    for i, n in enumerate([7, 2, 5, 3, 7, 4, 6, 2]):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
        src[i, n] = EOS
    return src


# ---- the cache: logits at every step ----

@pytest.mark.parametrize("layout", LAYOUTS)
def test_translator_cached_steps_give_the_recomputed_logits(layout):
    """Decoder self-attention and cross-attention caches, one token at a time: each step's logits equal the
    teacher-forced logits of the whole prefix (positions, cache slots and memory masks all involved)."""
    model, src = translator(layout), sources()
    tgt = torch.cat([torch.full((8, 1), BOS), torch.randint(3, 12, (8, 9), generator=torch.Generator().manual_seed(1))], 1)
    full = model(src, tgt)  # [B, T, V]
    memory, mask = model.encode(src)
    caches, memory_caches = model.new_caches(8, src.shape[1], tgt.shape[1])
    steps = [model.decode(tgt[:, t : t + 1], memory, mask, caches, memory_caches) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)
    assert full.argmax(-1).unique().numel() > 3, "the model should say something"


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rotary", "relative", "none"])
def test_gpt_cached_steps_and_chunks_give_the_recomputed_logits(positions):
    model = gpt(positions)
    ids = torch.randint(0, 12, (3, 20), generator=torch.Generator().manual_seed(2))
    full = model(ids)
    caches = model.new_caches(3)
    chunks = [ids[:, :5], ids[:, 5:9], *[ids[:, t : t + 1] for t in range(9, 20)]]  # prefill, a chunk, then steps
    torch.testing.assert_close(torch.cat([model(c, caches) for c in chunks], 1), full, atol=1e-4, rtol=1e-4)


# ---- greedy and sampling against naive loops ----

def naive_greedy(model, src: torch.Tensor, max_len: int) -> list[list[int]]:
    """One sentence at a time, full recomputation each step, stop at eos or max_len tokens (eos included)."""
    out = []
    for row in src:
        row = row[row != PAD][None]
        tgt = [BOS]
        while len(tgt) - 1 < max_len:
            nxt = int(model(row, torch.tensor([tgt]))[0, -1].argmax()) if len(tgt) < max_len else EOS
            tgt.append(nxt)
            if nxt == EOS:
                break
        out.append([t for t in tgt[1:] if t != EOS])
    return out


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "recomputed"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_greedy_equals_a_naive_loop_and_some_rows_stop_at_eos(layout, use_cache):
    model, src = translator(layout, eos_boost=3), sources()
    out = greedy_translate(model, src, max_len_ratio=0, max_len_offset=7, use_cache=use_cache)
    assert out == naive_greedy(model, src, 7)
    lengths = [len(o) for o in out]
    assert min(lengths) < 6 and max(lengths) == 6, f"need rows that stop at eos and rows that hit the limit: {lengths}"


@pytest.mark.parametrize("positions", ["learned", "rotary", "relative"])
def test_gpt_generation_equals_a_naive_sliding_loop(positions):
    """Greedy past the context window: the documented rule (when the context would exceed the window, it
    restarts from the last window/2 tokens) written as a plain loop over full recomputations."""
    model = gpt(positions)
    prompt = torch.randint(0, 12, (2, 5), generator=torch.Generator().manual_seed(3))
    window, ids, start = model.max_seq_len, prompt, 0
    for _ in range(40):
        if ids.shape[1] - start > window:
            start = ids.shape[1] - window // 2
        ids = torch.cat([ids, model(ids[:, start:])[:, -1].argmax(-1, keepdim=True)], 1)
    for use_cache in (True, False):
        assert torch.equal(generate(model, prompt, 40, temperature=0, use_cache=use_cache), ids)
    assert ids[:, 5:].unique().numel() > 3, "the model should say something"


def test_gpt_generation_stops_each_row_at_its_own_eos():
    model = gpt("rotary")
    prompt = torch.randint(3, 12, (6, 3), generator=torch.Generator().manual_seed(4))
    free = generate(model, prompt, 12, temperature=0)
    eos = int(free[0, 5])  # a token row 0 emits mid-sequence: call it eos
    out = generate(model, prompt, 12, temperature=0, eos_id=eos)
    for row, ref in zip(out.tolist(), free.tolist()):
        gen, ref_gen = row[3:], ref[3:]
        cut = ref_gen.index(eos) + 1 if eos in ref_gen else len(ref_gen)
        assert gen[:cut] == ref_gen[:cut] and all(t == eos for t in gen[cut:])
    assert any(eos not in r[3:] for r in free.tolist()), "some rows should not end"


# ---- beam search against exhaustive search ----

@functools.cache
def scored_hypotheses(layout: str, row: int, max_len: int = 4) -> tuple[tuple[tuple[int, ...], float, int], ...]:
    """Every hypothesis for source row `row` of the vocabulary-5 translator: n-1 non-eos tokens then eos
    (n = 1..max_len; at max_len only eos may follow), as (body, sum log p, n), computed by teacher forcing
    each prefix. Cached: the scores do not depend on the length penalty, and several tests need them."""
    model, src_row = translator(layout, vocab=5, eos_boost=1.5), sources(vocab=5)[row]
    src = src_row[src_row != PAD][None]
    found = []
    with torch.no_grad():
        for n in range(1, max_len + 1):
            for body in itertools.product([v for v in range(model.vocab_size) if v != EOS], repeat=n - 1):
                logp = model(src, torch.tensor([[BOS, *body]]))[0].log_softmax(-1)  # [n, V]
                found.append((body, sum(float(logp[i, t]) for i, t in enumerate(body)) + float(logp[-1, EOS]), n))
    return tuple(found)


def exhaustive_best(layout: str, row: int, length_penalty: float) -> list[int]:
    """The hypothesis with the highest sum log p / n ** length_penalty (the first one on a tie)."""
    best, best_score = None, -math.inf
    for body, logp, n in scored_hypotheses(layout, row):
        if logp / n**length_penalty > best_score:
            best, best_score = list(body), logp / n**length_penalty
    return best


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_beam_as_wide_as_all_hypotheses_returns_the_exhaustive_best(layout, length_penalty):
    """Vocabulary of 5 (4 non-eos tokens), at most 4 tokens: 1 + 4 + 16 + 64 = 85 hypotheses; a beam of 85
    keeps all of them, so it must return the best under the length penalty."""
    model, src = translator(layout, vocab=5, eos_boost=1.5), sources(vocab=5)[:4]
    expected = [exhaustive_best(layout, row, length_penalty) for row in range(4)]
    for use_cache in (True, False):
        assert beam_search(model, src, beam_size=85, length_penalty=length_penalty, max_len_ratio=0,
                           max_len_offset=4, use_cache=use_cache) == expected


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_length_penalty_changes_which_hypothesis_wins(layout):
    """The case above tests the normalisation only if lengths compete: here the best hypothesis by total
    log p is shorter than the best by log p / length^2 in some rows."""
    best = {lp: [exhaustive_best(layout, row, lp) for row in range(4)] for lp in (0.0, 1.0, 2.0)}
    assert any(len(a) < len(b) for a, b in zip(best[0.0], best[2.0])), best


def test_length_penalty_by_hand():
    """A model with fixed probabilities: p(a) = 0.6, p(eos) = 0.4 at every step, at most 3 tokens. Hypotheses:
    [eos] log .4 / 1, [a eos] (log .6 + log .4) / 2^lp, [a a eos] (2 log .6 + log .4) / 3^lp."""

    class Fixed(torch.nn.Module):
        bos_id, eos_id, max_seq_len, vocab_size = BOS, EOS, 16, 3

        def encode(self, src):
            return torch.zeros(src.shape[0], 1, 1), torch.ones(src.shape[0], 1, dtype=torch.bool)

        def new_caches(self, *a):
            return None, None

        def decode(self, tgt, memory, mask, caches=None, memory_caches=None):
            logp = torch.log(torch.tensor([1e-9, 1e-9, 0.4]))
            logp[0] = math.log(0.6 - 2e-9)  # token 0 ("a"); bos never
            return logp.expand(tgt.shape[0], tgt.shape[1], 3)

    def best(lp: float) -> list[int]:
        scores = {(): math.log(0.4), (0,): (math.log(0.6) + math.log(0.4)) / 2**lp, (0, 0): (2 * math.log(0.6) + math.log(0.4)) / 3**lp}
        return list(max(scores, key=scores.get))

    src = torch.ones(1, 1, dtype=torch.long)
    for lp in (0.0, 0.5, 1.0, 2.0):
        got = beam_search(Fixed(), src, beam_size=4, length_penalty=lp, max_len_ratio=0, max_len_offset=3, use_cache=False)
        assert got == [best(lp)], lp
    assert best(0.0) != best(2.0)


# ---- masks on every attention path: perturb what must not be seen ----

def test_causal_mask_by_hand():
    assert causal_mask(2, 4, "cpu").tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 3, "cpu").tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def lively_stack(causal: bool, cross: bool = False, norm_placement: str = "pre", positions: str = "rotary") -> TransformerStack:
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_layers=2, n_heads=4, positions=positions, norm_placement=norm_placement)
    stack = TransformerStack(cfg, causal=causal, cross_attention=cross).eval()
    with torch.no_grad():
        for p in stack.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    return stack


def perturbed(x: torch.Tensor, positions: slice) -> torch.Tensor:
    y = x.clone()
    y[:, positions] = torch.randn_like(y[:, positions]) * 3
    return y


def assert_unchanged_and_sensitive(a: torch.Tensor, b: torch.Tensor, hidden: slice, seen: slice):
    """Outputs at `hidden` identical; at `seen` changed (the perturbation reached what may see it)."""
    torch.testing.assert_close(a[:, hidden], b[:, hidden], atol=1e-5, rtol=1e-5)
    assert (a[:, seen] - b[:, seen]).abs().max() > 1e-2


@pytest.mark.parametrize("path", ["is_causal", "explicit_mask", "chunked_prefill", "cached_steps"])
def test_causal_attention_hides_the_future_on_every_path(path):
    """is_causal: SDPA's flag (no mask); explicit_mask: causal & padding mask combined; chunked_prefill: a chunk
    after cached positions (causal_mask with an offset); cached_steps: one query over the cache."""
    stack = lively_stack(causal=True)
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(0))
    y = perturbed(x, slice(6, 10))

    def run(inp):
        if path == "is_causal":
            return stack(inp)[0]
        if path == "explicit_mask":
            return stack(inp, padding_mask=torch.ones(2, 10, dtype=torch.bool))[0]
        caches = stack.new_caches(2, 10)
        if path == "chunked_prefill":
            return torch.cat([stack(inp[:, :3], caches=caches)[0], stack(inp[:, 3:], caches=caches)[0]], 1)
        return torch.cat([stack(inp[:, t : t + 1], caches=caches)[0] for t in range(10)], 1)

    assert_unchanged_and_sensitive(run(x), run(y), slice(0, 6), slice(6, 10))


def test_causal_and_padding_mask_together_hide_padding_and_the_future():
    """Left-padded rows (pads first) in a causal stack: neither the pads' content nor the future reaches the real
    positions before the perturbed ones."""
    stack = lively_stack(causal=True)
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[:, :2] = False
    y = perturbed(perturbed(x, slice(0, 2)), slice(7, 10))
    assert_unchanged_and_sensitive(stack(x, padding_mask=mask)[0], stack(y, padding_mask=mask)[0], slice(2, 7), slice(7, 10))


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
@pytest.mark.parametrize("path", ["encoder", "cross_attention", "cached_cross_attention"])
def test_padding_is_invisible_on_every_path(path, norm_placement):
    """The contents of padded positions (source tokens in the encoder, memory rows in cross-attention, plain
    or cached) change nothing; the same perturbation without the mask changes the output by far more than
    the tolerance, so a dropped mask cannot hide inside it."""
    g = torch.Generator().manual_seed(2)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 5:], mask[1, 3:] = False, False
    if path == "encoder":
        stack = lively_stack(causal=False, norm_placement=norm_placement, positions="learned")
        x = torch.randn(2, 9, 32, generator=g)
        y = torch.where(mask[..., None], x, torch.randn(2, 9, 32, generator=g) * 3)

        def run(inp, m):
            return stack(inp, padding_mask=m)[0]
    else:
        stack = lively_stack(causal=True, cross=True, norm_placement=norm_placement)
        tgt = torch.randn(2, 4, 32, generator=g)
        x = torch.randn(2, 9, 32, generator=g)  # the memory
        y = torch.where(mask[..., None], x, torch.randn(2, 9, 32, generator=g) * 3)

        def run(memory, m):
            if path == "cross_attention":
                return stack(tgt, memory=memory, memory_padding_mask=m)[0]
            caches, memory_caches = stack.new_caches(2, 4), stack.new_caches(2, 9)
            steps = [stack(tgt[:, t : t + 1], caches=caches, memory=memory, memory_padding_mask=m,
                           memory_caches=memory_caches)[0] for t in range(4)]
            return torch.cat(steps, 1)

    real = mask[..., None] if path == "encoder" else torch.ones(2, 4, 1, dtype=torch.bool)
    a, b = run(x, mask), run(y, mask)
    torch.testing.assert_close(a * real, b * real, atol=1e-5, rtol=1e-5)
    leak = (run(x, None) - run(y, None)) * real
    assert leak.abs().max() > 1e-1, "without the mask the perturbation must show"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_translator_source_padding_changes_nothing(layout):
    """A sentence alone or padded in a batch: the same logits (tolerance 1e-5, a leak moves them by > 1e-2)."""
    model = translator(layout)
    sentence = torch.tensor([[5, 9, 11, 7, EOS]])
    batch = torch.cat([torch.cat([sentence, torch.full((1, 6), PAD)], 1), torch.tensor([[4] * 10 + [EOS]])])
    tgt = torch.tensor([[BOS, 6, 8, 3]])
    alone, in_batch = model(sentence, tgt), model(batch, tgt.expand(2, -1))[:1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)
    memory, _ = model.encoder(model.src_embed(batch))  # the encoder without its mask: pads are attended
    leaked = model.decode(tgt.expand(2, -1), memory, batch != PAD)[:1]
    assert (leaked - alone).abs().max() > 1e-2
