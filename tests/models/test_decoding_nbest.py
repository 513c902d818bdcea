"""n-best beam search against exhaustive search, and the no-repeat-ngram constraint (greedy and beam)."""
from __future__ import annotations

import itertools

import pytest
import torch

from lab.errors import LabError
from lab.models.decoding import beam_hypotheses, beam_search, greedy_translate, translate_ids
from lab.models.seq2seq import EncoderDecoder

PAD, BOS, EOS = 0, 1, 2


def model_over(vocab: int, seed: int) -> EncoderDecoder:
    torch.manual_seed(seed)
    return EncoderDecoder(vocab, PAD, BOS, EOS, d_model=16, n_layers=1, n_heads=2, max_seq_len=16).eval()


def sequence_logp(model, src: torch.Tensor, ids: list[int]) -> float:
    """Teacher-forced sum of log p(ids + eos | src). A hypothesis that reaches the length limit is scored the
    same way: eos is the only token allowed there, at the model's real eos log-probability (fairseq), not free."""
    tgt = torch.tensor([[BOS, *ids]])
    with torch.no_grad():
        logp = model(src, tgt).float().log_softmax(-1)[0]  # [len + 1, V]
    return sum(float(logp[t, y]) for t, y in enumerate([*ids, EOS]))


def has_repeat(ids: list[int], n: int) -> bool:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("no_repeat_ngram", [0, 1, 2], ids=["free", "no-repeat-1", "no-repeat-2"])
@pytest.mark.parametrize("length_penalty", [1.0, 0.0, 2.0], ids=["lp1", "lp0", "lp2"])
def test_n_best_equals_exhaustive_search_on_a_tiny_vocabulary(length_penalty, no_repeat_ngram):
    """Vocabulary of 4 (pad, bos, eos, one word), at most 3 tokens + eos: 1 + 3 + 9 + 27 = 40 hypotheses.
    A beam of 40 prunes none of them, so its n-best must be the exhaustive top n, scores included."""
    model, src = model_over(4, seed=3), torch.tensor([[3, 3, EOS]])
    limit = 4  # tokens incl. eos: max_len_ratio 0, offset 4
    words = [t for t in range(4) if t != EOS]
    scored = []
    for k in range(limit):
        for ids in itertools.product(words, repeat=k):
            ids = list(ids)
            if no_repeat_ngram and has_repeat(ids, no_repeat_ngram):
                continue
            scored.append((ids, sequence_logp(model, src, ids) / (k + 1) ** length_penalty))
    scored.sort(key=lambda h: h[1], reverse=True)
    (found,) = beam_hypotheses(model, src, beam_size=40, length_penalty=length_penalty, max_len_ratio=0.0,
                               max_len_offset=limit, no_repeat_ngram=no_repeat_ngram)
    assert [ids for ids, _ in found[:5]] == [ids for ids, _ in scored[:5]]
    assert [s for _, s in found[:5]] == pytest.approx([s for _, s in scored[:5]], abs=1e-4)
    (n_best,) = translate_ids(model, src, beam_size=40, n_best=5, length_penalty=length_penalty, max_len_ratio=0.0,
                              max_len_offset=limit, no_repeat_ngram=no_repeat_ngram)
    assert n_best == found[:5]


@pytest.mark.parametrize("length_penalty", [1.0, 0.6], ids=["lp1", "lp0.6"])
def test_n_best_of_a_small_beam_are_rescored_exactly_best_first_and_led_by_beam_search(length_penalty):
    model = model_over(30, seed=1)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 30, (3, 6), generator=g)
    src[:, -1], src[1, 3:] = EOS, PAD
    src[1, 2] = EOS
    settings = dict(length_penalty=length_penalty, max_len_ratio=1.0, max_len_offset=3)
    found = translate_ids(model, src, beam_size=4, n_best=3, **settings)
    assert [hyps[0][0] for hyps in found] == beam_search(model, src, 4, **settings)
    for row, hyps in enumerate(found):
        assert len(hyps) == 3 and len({tuple(ids) for ids, _ in hyps}) == 3
        assert [s for _, s in hyps] == sorted((s for _, s in hyps), reverse=True)
        real = src[row : row + 1, : int((src[row] != PAD).sum())]
        for ids, score in hyps:
            expected = sequence_logp(model, real, ids) / (len(ids) + 1) ** length_penalty
            assert score == pytest.approx(expected, abs=1e-4)


def test_n_best_larger_than_the_beam_is_refused():
    with pytest.raises(LabError, match="n_best=6 needs 1 <= n_best <= beam_size"):
        translate_ids(model_over(10, 0), torch.tensor([[3, EOS]]), beam_size=5, n_best=6)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("decoder", ["greedy", "beam4"])
def test_no_repeat_ngram_leaves_no_repeat_and_changes_only_outputs_that_had_one(decoder, n):
    """A random tiny model loops (the same token again and again); with the constraint no output repeats an
    n-gram. Greedy outputs without a repeat are unchanged (the argmax was never banned)."""
    model = model_over(12, seed=5)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 12, (16, 5), generator=g)
    src[:, -1] = EOS

    def decode(k: int) -> list[list[int]]:
        settings = dict(max_len_ratio=2.0, max_len_offset=4, no_repeat_ngram=k)
        return greedy_translate(model, src, **settings) if decoder == "greedy" else beam_search(model, src, 4, **settings)

    free, constrained = decode(0), decode(n)
    assert any(has_repeat(ids, n) for ids in free)  # the constraint has work to do
    assert not any(has_repeat(ids, n) for ids in constrained)
    if decoder == "greedy":
        for before, after in zip(free, constrained):
            if not has_repeat(before, n):
                assert after == before
    assert sum(a != b for a, b in zip(free, constrained)) >= 1


@pytest.mark.parametrize("decoder", ["greedy", "beam3"])
def test_no_repeat_ngram_with_and_without_cache_agree(decoder):
    model = model_over(12, seed=6)
    src = torch.tensor([[4, 5, 6, EOS], [7, EOS, PAD, PAD]])
    run = (lambda c: greedy_translate(model, src, use_cache=c, no_repeat_ngram=2)) if decoder == "greedy" else \
        (lambda c: beam_search(model, src, 3, use_cache=c, no_repeat_ngram=2))
    assert run(True) == run(False)
