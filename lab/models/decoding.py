"""Autoregressive sampling shared by every model that decodes (GPT, the translator's decoder)."""
from __future__ import annotations

from typing import Callable

import torch


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


@torch.inference_mode()
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
) -> torch.Tensor:  # [B, T0 + n]
    """Sample from a causal LM (`model(ids, caches) -> logits`, `model.new_caches(B)`, `model.max_seq_len`).

    Past the context window the context slides forward by half a window: the cache is rebuilt from the
    last window/2 tokens, so every token still sees at least window/2 tokens of context and the rebuild
    cost is paid once per window/2 tokens, not every step. use_cache=False recomputes the same context
    from scratch each step, so both modes give the same tokens.
    """
    window = model.max_seq_len
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
        if eos_id is not None and bool(finished.all()):
            break
    return ids
