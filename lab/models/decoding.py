"""Autoregressive sampling shared by every model that decodes (GPT, the translator's decoder)."""
from __future__ import annotations

from collections.abc import Callable

import torch

from lab.errors import LabError


def sample_next(
    logits: torch.Tensor,  # [B, V], last position
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # [B, 1]
    """temperature 0 is greedy; top_k keeps the k most likely tokens; top_p keeps the smallest set whose
    probability reaches p (nucleus sampling). Both filters may be combined."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0 < top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # tokens after the nucleus is complete; keeps the top one
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)


@torch.no_grad()  # not inference_mode: FSDP2-sharded models cannot run on inference tensors
def generate(
    model: Callable,
    ids: torch.Tensor,  # [B, T0] prompt
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    window: int | None = None,
    on_token: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor:  # [B, T0 + n]
    """Sample from a causal LM (`model(ids, caches) -> logits`, `model.new_caches(B)`, `model.max_seq_len`).

    Past the context window the context slides forward by half a window: the cache is rebuilt from the
    last window/2 tokens, so every token still sees at least window/2 tokens of context and the rebuild
    cost is paid once per window/2 tokens, not every step. use_cache=False recomputes the same context
    from scratch each step, so both modes give the same tokens. window: the context length (default the
    model's max_seq_len; inference passes the length it was trained on). on_token(next_ids [B, 1]) is called
    as each token is chosen (streaming).
    """
    window = window or model.max_seq_len
    ctx_start = max(0, ids.shape[1] - window)
    caches = None
    finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(max_new_tokens):
        if ids.shape[1] - ctx_start > window:  # slide
            ctx_start = ids.shape[1] - window // 2
            caches = None
        if not use_cache:
            logits = model(ids[:, ctx_start:])
        elif caches is None:
            caches = model.new_caches(ids.shape[0])
            logits = model(ids[:, ctx_start:], caches)
        else:
            logits = model(ids[:, -1:], caches)
        next_id = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
        if eos_id is not None:
            next_id = next_id.masked_fill(finished[:, None], eos_id)
            finished |= next_id[:, 0] == eos_id
        ids = torch.cat([ids, next_id], dim=1)
        if on_token is not None:
            on_token(next_id)
        if eos_id is not None and bool(finished.all()):
            break
    return ids


def _max_lengths(src_mask: torch.Tensor, max_len_ratio: float, max_len_offset: int, model_max: int) -> torch.Tensor:
    """Per sentence: tokens the decoder may produce (eos included), ratio * source length + offset, capped
    by the decoder's position table (bos takes one position)."""
    return (src_mask.sum(1) * max_len_ratio).long().add(max_len_offset).clamp(1, model_max - 1)


def ban_repeated_ngrams(scores: torch.Tensor, generated: torch.Tensor, n: int) -> None:
    """In place: -inf for every token that would complete an n-gram already in its row of `generated`
    (fairseq's --no-repeat-ngram-size). scores [N, V]; generated [N, t] tokens so far, without bos."""
    t = generated.shape[1]
    if n <= 0 or t < n - 1:
        return
    for r, row in enumerate(generated.tolist()):
        prefix = row[t - n + 1 :]  # the n - 1 last tokens: what a new token would extend
        banned = [row[i + n - 1] for i in range(t - n + 1) if row[i : i + n - 1] == prefix]
        if banned:
            scores[r, banned] = float("-inf")


def _strip(row: list[int], eos_id: int) -> list[int]:
    return row[: row.index(eos_id)] if eos_id in row else row


@torch.no_grad()
def greedy_translate(
    model, src: torch.Tensor, max_len_ratio: float = 1.5, max_len_offset: int = 10, use_cache: bool = True,
    max_positions: int | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[int]]:
    """Most likely next token each step, all sentences of the batch at once; -> token ids without bos/eos.
    no_repeat_ngram n > 0: a token that would repeat an n-gram already in the output is never chosen.

    model: `encode(src) -> (memory, src_mask)`, `decode(tgt, memory, src_mask, caches, memory_caches)`,
    `new_caches(batch, src_len, max_len)`, bos_id, eos_id, max_seq_len (lab.models.seq2seq.EncoderDecoder).
    max_positions: decoder positions to use at most (default max_seq_len; inference passes the trained length).
    """
    memory, src_mask = model.encode(src)  # once per sentence
    max_lens = _max_lengths(src_mask, max_len_ratio, max_len_offset, max_positions or model.max_seq_len)
    B = src.shape[0]
    tokens = torch.full((B, 1), model.bos_id, dtype=torch.long, device=src.device)
    caches, memory_caches = model.new_caches(B, src.shape[1], int(max_lens.max()) + 1) if use_cache else (None, None)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for step in range(1, int(max_lens.max()) + 1):
        inputs = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(inputs, memory, src_mask, caches, memory_caches)[:, -1]  # [B, V]
        ban_repeated_ngrams(logits, tokens[:, 1:], no_repeat_ngram)
        next_id = sample_next(logits, temperature=0)  # [B, 1]
        next_id = next_id.masked_fill((step >= max_lens)[:, None], model.eos_id)  # out of room: end here
        next_id = next_id.masked_fill(finished[:, None], model.eos_id)
        finished |= next_id[:, 0] == model.eos_id
        tokens = torch.cat([tokens, next_id], dim=1)
        if bool(finished.all()):
            break
    return [_strip(row[1:], model.eos_id) for row in tokens.tolist()]


@torch.no_grad()
def beam_search(
    model,
    src: torch.Tensor,  # [B, S]
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_ratio: float = 1.5,
    max_len_offset: int = 10,
    use_cache: bool = True,
    max_positions: int | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[int]]:
    """Batched beam search over every sentence of src at once; -> the best hypothesis per sentence (ids
    without bos/eos). Same model interface and max_positions as greedy_translate; the search is beam_hypotheses'."""
    found = beam_hypotheses(model, src, beam_size, length_penalty, max_len_ratio, max_len_offset, use_cache,
                            max_positions, no_repeat_ngram)
    return [hyps[0][0] if hyps else [] for hyps in found]


@torch.no_grad()
def beam_hypotheses(
    model,
    src: torch.Tensor,  # [B, S]
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_ratio: float = 1.5,
    max_len_offset: int = 10,
    use_cache: bool = True,
    max_positions: int | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[tuple[list[int], float]]]:
    """Batched beam search; -> per sentence its finished hypotheses (at most beam_size), best first, as
    (ids without bos/eos, score). The n-best list of fairseq's --nbest is the first n of them.

    Hypotheses are ranked by sum log p / length ** length_penalty (length counts eos; a hypothesis cut at its
    maximum length ends with eos at the model's eos probability, not a free one). Each step keeps the
    2k best expansions of a sentence: those ending in eos among the first k are finished, the best k others
    continue, so eos never crowds out live beams. A sentence stops when it has k finished hypotheses (early
    stop) or reaches its maximum length, and leaves the batch; the batch stops when every sentence has.
    The encoder runs once per sentence; the first step also runs once per sentence (every beam starts from
    the same bos), which fills the cross-attention caches, and only then are rows expanded to k beams.
    no_repeat_ngram n > 0: expansions that would repeat an n-gram of their hypothesis are excluded.
    """
    memory, src_mask = model.encode(src)
    B, S = src.shape
    eos, K = model.eos_id, beam_size
    max_lens = _max_lengths(src_mask, max_len_ratio, max_len_offset, max_positions or model.max_seq_len)
    caches, memory_caches = model.new_caches(B, S, int(max_lens.max()) + 1) if use_cache else (None, None)

    sentence = torch.arange(B, device=src.device)  # original index of each live sentence
    tokens = torch.full((B, 1), model.bos_id, dtype=torch.long, device=src.device)  # [N = live * beams, t]
    scores = torch.zeros(B, 1, device=src.device)  # [live, beams] cumulative log-probabilities
    finished: list[list[tuple[list[int], float]]] = [[] for _ in range(B)]  # per sentence: (ids, score)
    while True:
        beams = scores.shape[1]
        inputs = tokens[:, -1:] if use_cache else tokens
        logp = model.decode(inputs, memory, src_mask, caches, memory_caches)[:, -1].float().log_softmax(-1)  # [N, V]
        ban_repeated_ngrams(logp, tokens[:, 1:], no_repeat_ngram)
        V = logp.shape[-1]
        step = tokens.shape[1]  # tokens generated once this step's token is appended (eos included)
        at_limit = step >= max_lens  # [live]
        if bool(at_limit.any()):  # out of room: only eos may follow, at the model's own eos probability (fairseq)
            forced = at_limit.repeat_interleave(beams)
            logp[forced] = torch.where(torch.arange(V, device=src.device) == eos, logp[forced], float("-inf"))
        candidates = (scores[:, :, None] + logp.view(-1, beams, V)).view(-1, beams * V)  # [live, beams*V]
        top_scores, top_index = candidates.topk(min(2 * K, beams * V), dim=-1)  # [live, 2K]
        parent, token = top_index // V, top_index % V
        is_eos = token == eos

        for b, j in (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist():
            s = int(sentence[b])
            if len(finished[s]) < K:
                row = b * beams + int(parent[b, j])
                finished[s].append((tokens[row, 1:].tolist(), float(top_scores[b, j]) / step**length_penalty))
        live = ~at_limit & torch.tensor([len(finished[s]) < K for s in sentence.tolist()], device=src.device)
        if not bool(live.any()):
            break

        # the K best non-eos expansions of each live sentence continue
        rank = torch.where(is_eos, 2 * K, 0) + torch.arange(is_eos.shape[1], device=src.device)  # eos sorts last
        keep = rank.argsort(dim=-1)[:, :K]  # [live, K] positions among the 2K candidates
        rows = (torch.arange(len(sentence), device=src.device)[:, None] * beams + parent.gather(1, keep))[live].view(-1)
        tokens = torch.cat([tokens[rows], token.gather(1, keep)[live].view(-1, 1)], dim=1)
        # with fewer than K non-eos candidates (beams * V < 2K: a tiny vocabulary or a huge beam) eos ones fill
        # the rest: they continue dead (score -inf), never as a hypothesis with eos inside
        scores = top_scores.gather(1, keep).masked_fill(is_eos.gather(1, keep), float("-inf"))[live]
        if caches is not None:
            for c in caches:
                c.reorder(rows)  # each beam continues its parent's history
        if beams != K or not bool(live.all()):  # rows of a sentence share one memory: regroup only when rows change
            memory, src_mask = memory[rows], src_mask[rows]
            if memory_caches is not None:
                for c in memory_caches:
                    c.reorder(rows)
        sentence, max_lens = sentence[live], max_lens[live]
    return [sorted(hyps, key=lambda h: h[1], reverse=True) for hyps in finished]  # stable: ties keep finishing order


def translate_ids(model, src: torch.Tensor, beam_size: int = 5, n_best: int | None = None, **settings):
    """Greedy for beam_size 1, else beam search; settings as those functions take them (length_penalty,
    max_len_ratio, max_len_offset, use_cache, no_repeat_ngram). -> ids per sentence; with n_best: per
    sentence a list of its n best (ids, length-normalised score), best first (beam search, n_best <= beam_size;
    beam_size 1 is then the greedy hypothesis with its score)."""
    if n_best is not None:
        if not 1 <= n_best <= beam_size:
            raise LabError(f"n_best={n_best} needs 1 <= n_best <= beam_size (beam_size={beam_size}): beam search "
                           "keeps beam_size hypotheses; raise beam_size")
        return [hyps[:n_best] for hyps in beam_hypotheses(model, src, beam_size, **settings)]
    if beam_size == 1:
        settings.pop("length_penalty", None)  # greedy has no length normalisation
        return greedy_translate(model, src, **settings)
    return beam_search(model, src, beam_size, **settings)
