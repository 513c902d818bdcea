"""lab.nn.norms: the RMS norm's forward and its hand-written backward (float32 on CPU) against float64 by hand."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lab.nn.norms import RMSNorm, rms_norm


def by_hand(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.parametrize("gain_shape", [(16,), (3, 16)], ids=["norm", "per-head gains"])
def test_rms_norm_and_its_gradients_equal_float64_by_hand(gain_shape):
    """Output and the gradients of x and of the gain ([D] as a norm's, [heads, hd] as QK-norm's, summed over
    batch and positions) against autograd through the formula in float64, on rows of very different scales
    (the projection off xhat must use each row's own rms)."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 5, 3, 16, generator=gen) * torch.logspace(-2, 2, 5)[None, :, None, None]).requires_grad_()
    weight = (torch.randn(gain_shape, generator=gen) + 1).requires_grad_()
    g = torch.randn(2, 5, 3, 16, generator=gen)
    y = rms_norm(x, weight, 1e-6)
    gx, gw = torch.autograd.grad(y, (x, weight), g)
    x64, w64 = x.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    want = by_hand(x64, w64, 1e-6)
    want_gx, want_gw = torch.autograd.grad(want, (x64, w64), g.double())
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx.double(), want_gx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw.double(), want_gw, rtol=1e-5, atol=1e-5)


def test_the_forward_is_f_rms_norms_floats_and_bfloat16_is_left_to_it():
    """float32: the same floats as F.rms_norm (the function only replaces the backward); bfloat16 goes to
    F.rms_norm itself, which rounds once after the gain."""
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 7, 32, generator=gen) * 3, torch.randn(32, generator=gen)
    assert torch.equal(RMSNorm(32)(x), F.rms_norm(x, (32,), torch.ones(32), 1e-6))
    assert torch.equal(rms_norm(x, w, 1e-5), F.rms_norm(x, (32,), w, 1e-5))
    xb, wb = x.bfloat16(), w.bfloat16()
    assert torch.equal(rms_norm(xb, wb, 1e-5), F.rms_norm(xb, (32,), wb, 1e-5))


def test_a_frozen_gain_gets_no_gradient_and_x_still_does():
    x = torch.randn(3, 8, requires_grad=True)
    weight = torch.randn(8)
    (gx,) = torch.autograd.grad(rms_norm(x, weight, 1e-6).sum(), (x,))
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(by_hand(x64, weight.double(), 1e-6).sum(), (x64,))
    torch.testing.assert_close(gx.double(), want, rtol=1e-4, atol=1e-6)
