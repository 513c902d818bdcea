"""Position information: absolute tables added to embeddings, or rotary applied to queries/keys."""
from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(max_len: int, dim: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...)  (Vaswani et al. 3.5)."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq[: dim // 2])
    return table


class LearnedPositions(nn.Module):
    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, dim))

    def forward(self, start: int, length: int) -> torch.Tensor:  # [T, D]
        return self.weight[start : start + length]


class SinusoidalPositions(nn.Module):
    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, dim), persistent=False)

    def forward(self, start: int, length: int) -> torch.Tensor:  # [T, D]
        return self.table[start : start + length]


def llama3_scaled(inv_freq: torch.Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                  original_max_len: int) -> torch.Tensor:
    """Llama 3.1's rotary frequency scaling (Meta's reference; transformers' rope_type "llama3"): pairs whose
    wavelength exceeds original_max_len / low_freq_factor turn factor times slower, those shorter than
    original_max_len / high_freq_factor are kept, those between are interpolated. Same operations, same order as
    the reference, so the frequencies are the same floats."""
    low_freq_wavelen, high_freq_wavelen = original_max_len / low_freq_factor, original_max_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x cos + (x with each (even, odd) pair swapped) sin, sin being (-sin, sin) per pair: (x1, x2) ->
    (x1 cos - x2 sin, x2 cos + x1 sin), the same floats as those products computed pair by pair."""
    swapped = torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return (x * cos).add_(swapped.mul_(sin))


class _Rotation(torch.autograd.Function):
    """The rotation as one autograd node; its backward is the inverse rotation (sin negated), the same floats
    autograd computes through the pair-by-pair products, in four kernels instead of a graph of a dozen."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _rotate(g, cos, -sin), None, None


def _complex_view(x: torch.Tensor) -> bool:
    """Whether x's (even, odd) feature pairs can be viewed as complex numbers in place (torch.view_as_complex's
    rule: pairs adjacent, every other stride and the offset even)."""
    return x.stride(-1) == 1 and x.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in x.stride()[:-1])


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate each (even, odd) pair of q/k features by a position-dependent angle,
    so q·k depends only on the relative offset. Shared by every attention layer of a stack.
    scaling: llama3_scaled's settings (Llama 3.1), None: the plain frequencies."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0, scaling: dict | None = None):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        if scaling is not None:
            inv_freq = llama3_scaled(inv_freq, **scaling)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # [L, hd/2]
        # each pair's (cos, cos) and (-sin, sin), interleaved as the pairs are: the rotation is two products, of x
        # and of x with its pairs swapped, instead of strided halves gathered and scattered back in the backward
        cos, sin = angles.cos(), angles.sin()
        self.register_buffer("cos", torch.stack((cos, cos), dim=-1).flatten(-2), persistent=False)  # [L, hd]
        self.register_buffer("sin", torch.stack((-sin, sin), dim=-1).flatten(-2), persistent=False)
        # the same turns as complex numbers cos + i sin, stored as real pairs (a module cast to bfloat16 casts
        # them, where it would drop a complex buffer's imaginary part)
        self.register_buffer("turns", torch.stack((cos, sin), dim=-1), persistent=False)  # [L, hd/2, 2]

    def forward(self, x: torch.Tensor, start: int = 0, seq_dim: int = -2) -> torch.Tensor:
        """x: [..., T, ..., hd] with the positions along seq_dim ([B, H, T, hd]: -2; [B, T, H, hd]: -3) -> the
        same shape, rotated for positions start..start+T-1."""
        T = x.shape[seq_dim]
        tail = (1,) * (-2 - seq_dim)  # the dims between positions and features broadcast
        if x.dtype == torch.float32 and not torch.compiler.is_compiling() and _complex_view(x):
            # each pair as one complex number times its turn: one kernel each way (autograd's backward multiplies
            # by the conjugate), where the pair swap and the products take four; bfloat16 has no complex type,
            # and inductor fuses the real form into one kernel
            turns = torch.view_as_complex(self.turns[start : start + T].float()).view(T, *tail, -1)
            return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * turns).flatten(-2)
        cos = self.cos[start : start + T].to(x.dtype).view(T, *tail, -1)
        sin = self.sin[start : start + T].to(x.dtype).view(T, *tail, -1)
        return _Rotation.apply(x, cos, sin)


def relative_bucket(distance: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each key - query distance (Raffel et al. 2020, 2.1; Mesh TensorFlow's code, the same float
    operations as transformers'): a causal stack buckets only how far back a key is; a bidirectional one gives
    half its buckets to keys ahead. Of a direction's buckets, the first half are exact distances 0, 1, 2, ...,
    the rest logarithmically wider ranges up to max_distance, beyond which everything shares the last bucket."""
    bucket = torch.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (distance > 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = -distance.clamp(max=0)  # how far back; keys ahead are masked anyway
    exact = num_buckets // 2
    wide = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)).long()
    return bucket + torch.where(distance < exact, distance, wide.clamp(max=num_buckets - 1))


class RelativePositionBias(nn.Module):
    """T5's relative positions: a learned scalar per head and distance bucket, added to the attention logits of
    every self-attention layer of a stack (one table per stack, T5's first-layer table shared by all layers).
    Cross-attention gets none: source and target positions are unrelated."""

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_buckets, n_heads))
        self.max_distance, self.bidirectional = max_distance, bidirectional

    def forward(self, T: int, start: int, allowed: torch.Tensor | None) -> torch.Tensor:
        """Additive attention mask [B or 1, H, T, start + T] for queries at start..start+T-1 over keys 0..start+T-1:
        the bias where allowed (bool, broadcastable; True = may attend), -inf elsewhere."""
        q = torch.arange(start, start + T, device=self.weight.device)[:, None]
        k = torch.arange(start + T, device=self.weight.device)[None, :]
        buckets = relative_bucket(k - q, self.bidirectional, self.weight.shape[0], self.max_distance)  # [T, S]
        bias = self.weight[buckets].permute(2, 0, 1)[None]  # [1, H, T, S]
        return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


def make_absolute_positions(kind: str, max_len: int, dim: int) -> nn.Module | None:
    if kind == "learned":
        return LearnedPositions(max_len, dim)
    if kind == "sinusoidal":
        return SinusoidalPositions(max_len, dim)
    return None  # rotary and relative live in attention; none means no position signal
