"""Multi-head attention on F.scaled_dot_product_attention, with masks and a KV cache.

Mask convention everywhere in lab.nn: boolean, True = "may attend" (SDPA's convention).
A key padding mask is [B, S] with True on real tokens; attention broadcasts it to [B, 1, 1, S].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lab.nn.norms import RMSNorm, rms_norm
from lab.nn.positions import RotaryEmbedding
from lab.nn.roles import ResidualProjection


class KVCache:
    """Keys and values of one attention layer, preallocated to max_len so decoding appends in place.

    Self-attention appends one step at a time; cross-attention stores the projected encoder memory once.
    """

    def __init__(self, batch: int, n_heads: int, head_dim: int, max_len: int, dtype: torch.dtype, device):
        self.k = torch.empty(batch, n_heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: [B, H, T, hd] -> all keys/values so far, [B, H, length, hd], in k's dtype."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"KV cache overflow: {end} positions > capacity {self.capacity}")
        if k.dtype != self.k.dtype:
            # the layer computes in another dtype than its stored parameters (FSDP2's param_dtype, autocast):
            # keep what it computes, or attention would meet queries and keys of two dtypes
            self.k, self.v = self.k.to(k.dtype), self.v.to(k.dtype)
        # narrow().copy_() rather than slice assignment: decoding is bound by per-call overhead
        self.k.narrow(2, start, end - start).copy_(k)
        self.v.narrow(2, start, end - start).copy_(v)
        self.length = end
        return self.view()

    def view(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k.narrow(2, 0, self.length), self.v.narrow(2, 0, self.length)

    def reorder(self, index: torch.Tensor) -> None:
        """Select batch rows (beam search keeps the surviving beams' histories)."""
        self.k = self.k.index_select(0, index)
        self.v = self.v.index_select(0, index)


def causal_mask(q_len: int, k_len: int, device) -> torch.Tensor:
    """[q_len, k_len] bool; query i (the last q_len of k_len positions) sees keys <= its own position."""
    offset = k_len - q_len
    return torch.arange(q_len, device=device)[:, None] + offset >= torch.arange(k_len, device=device)[None, :]


class MultiHeadAttention(nn.Module):
    """Self-attention (queries, keys, values from x) or cross-attention (keys, values from memory)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
        cross: bool = False,
        qk_norm: tuple[RMSNorm, RMSNorm] | None = None,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
    ):
        """qk_norm: (query norm, key norm) over head_dim, applied per head before rotary, with one epsilon; None: none.
        n_kv_heads: key/value heads (grouped-query attention), each shared by n_heads / n_kv_heads consecutive
        query heads (key head j serves query heads j*g .. j*g+g-1, as Llama's repeat_kv); None: n_heads.
        head_dim: each head's width (Qwen3: not d_model / n_heads); None: d_model // n_heads.
        scale: the factor on q.k (T5: 1.0); None: 1/sqrt(head_dim)."""
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim or d_model // n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        q_dim, kv_dim = n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(d_model, q_dim, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * kv_dim, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, q_dim + 2 * kv_dim, bias=bias)  # one matmul for q, k, v
        self.out_proj = ResidualProjection(q_dim, d_model, bias=bias)
        self.rotary = None if cross else rotary  # source and target positions are unrelated
        self.q_norm, self.k_norm = qk_norm if qk_norm is not None else (None, None)
        self.dropout, self.scale = dropout, scale

    def _heads(self, x: torch.Tensor, *counts: int) -> tuple[torch.Tensor, ...]:
        B, T, _ = x.shape  # [B, T, sum(counts) * hd] -> [B, n, T, hd] for each n of counts
        return x.view(B, T, -1, self.head_dim).transpose(1, 2).split(counts, dim=1)

    @staticmethod
    def _norm(x: torch.Tensor, norm: nn.Module | None) -> torch.Tensor:  # [B, H, T, hd], over hd
        return x if norm is None else norm(x)

    def _qk_norm(self, qk: torch.Tensor) -> torch.Tensor:
        """[B, T, H + KV, hd]: queries' and keys' RMS norm over hd in one call, then each head's gain (the query
        norm's or the key norm's): the same floats as the two RMSNorm modules, whose F.rms_norm scales by the
        gain after normalising."""
        gains = torch.cat((self.q_norm.weight.expand(self.n_heads, -1), self.k_norm.weight.expand(self.n_kv_heads, -1)))
        return rms_norm(qk, gains, self.q_norm.eps)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x: [B, T, D]; memory: [B, S, D] (cross only); mask broadcastable to [B, H, T, S]: bool (True = may
        attend), or float, added to the logits (a relative position bias with -inf where not allowed; the caller
        has applied causality then)."""
        B, T, _ = x.shape
        if self.cross:
            (q,) = self._heads(self.q_proj(x), self.n_heads)
            q = self._norm(q, self.q_norm)
            if cache is not None and cache.length:
                k, v = cache.view()  # encoder memory projected (and normalised) once per source sentence
            else:
                k, v = self._heads(self.kv_proj(memory), self.n_kv_heads, self.n_kv_heads)
                k = self._norm(k, self.k_norm)
                if cache is not None:
                    k, v = cache.append(k, v)
        else:
            # queries and keys stay in the projection's [B, T, heads, hd] layout and go through the norm and the
            # rotation together, as one tensor: half the kernels, and no transposed copies
            H, KV = self.n_heads, self.n_kv_heads
            qk, v = self.qkv_proj(x).view(B, T, H + 2 * KV, self.head_dim).split((H + KV, KV), dim=2)
            if self.q_norm is not None:  # cached keys are stored normalised
                qk = self._qk_norm(qk)
            start = cache.length if cache is not None else 0
            if self.rotary is not None:
                qk = self.rotary(qk, start, seq_dim=-3)
            q, k = qk.transpose(1, 2).split((H, KV), dim=1)
            v = v.transpose(1, 2)
            if cache is not None:
                k, v = cache.append(k, v)

        use_is_causal = False
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)  # SDPA takes an additive mask in the queries' dtype (autocast, bf16 parameters)
        elif is_causal and T > 1:  # a single new query may see every cached key: no mask needed
            if mask is None and k.shape[2] == T:
                use_is_causal = True
            else:
                causal = causal_mask(T, k.shape[2], x.device)
                mask = causal if mask is None else mask & causal
        # k, v: [B, n_kv_heads, S, hd]; SDPA's enable_gqa shares each among its group of query heads without
        # copying them (the cache stays small); a kernel without it computes the same on its math path
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=use_is_causal,
            enable_gqa=self.n_kv_heads != self.n_heads, scale=self.scale,
        )  # [B, H, T, hd]
        return self.out_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))
