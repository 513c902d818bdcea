"""Normalisation layers."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _RMSNormFunction(torch.autograd.Function):
    """x / rms(x) over the last dim, times a gain that broadcasts against x's trailing dims (a norm's [D], or
    QK-norm's per-head [heads, hd]). The forward is F.rms_norm's own kernel (which also returns 1/rms, kept for the
    backward); the backward is six kernels, where autograd differentiates CPU's F.rms_norm through its
    decomposition (about a dozen: only CUDA has a fused backward). Same forward floats; gradients equal up to the
    order of float sums."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xhat, rstd = torch.ops.aten._fused_rms_norm(x, [x.size(-1)], None, eps)  # [..., D], [..., 1]
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        xhat, rstd, weight = ctx.saved_tensors
        g_weight = (g * xhat).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        g_xhat = g * weight
        # d xhat / dx = (I - xhat xhat^T / D) / rms: remove g's component along xhat, then scale
        along = torch.linalg.vecdot(g_xhat, xhat).unsqueeze(-1).div_(xhat.size(-1))  # [..., 1]
        return torch.addcmul(g_xhat, xhat, along, value=-1).mul_(rstd), g_weight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS norm over x's last dim, then the gain `weight` ([D], or any shape that broadcasts against x's trailing
    dims): _RMSNormFunction in float32 on CPU, F.rms_norm's fused forward and backward elsewhere (in bfloat16 it
    rounds once, after the gain, where _RMSNormFunction would round the normalised x first)."""
    if x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32:
        return _RMSNormFunction.apply(x, weight, eps)
    if weight.shape == x.shape[-1:]:
        return F.rms_norm(x, (x.size(-1),), weight, eps)
    return F.rms_norm(x, (x.size(-1),), None, eps) * weight


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019): rescale only, no centring, no bias."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def make_norm(kind: str, dim: int, bias: bool, eps: float) -> nn.Module:
    if kind == "rmsnorm":
        return RMSNorm(dim, eps)
    return nn.LayerNorm(dim, eps=eps, bias=bias)
