"""The feed-forward blocks (lab/nn/ffn.py): activations by hand."""
from __future__ import annotations

import pytest
import torch
from conftest import TINY_GPT as TINY

from lab.errors import ConfigError
from lab.nn import TransformerConfig
from lab.nn.ffn import ACTIVATIONS


def test_relu_squared_by_hand():
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0])
    assert ACTIVATIONS["relu_squared"]()(x).tolist() == [0.0, 0.0, 0.0, 0.25, 9.0]
    assert TransformerConfig(**TINY, ffn="relu_squared").d_ff == 64  # 4 x d_model, as relu and gelu
    with pytest.raises(ConfigError, match="model.ffn=gelu"):
        TransformerConfig(**TINY, ffn="relu_squared", moe={"num_experts": 4})



def test_relu_squared_gradient_is_autograds_through_relu_then_square_bit_for_bit():
    """The hand-written backward (2 relu(x) g where x > 0) gives the very floats autograd gives through relu then
    square, zeros included (x = 0 and x < 0, even under an inf or nan g); catches a backward without the factor 2
    or that lets x <= 0 through."""
    torch.manual_seed(0)
    x = torch.randn(6, 40, requires_grad=True)
    with torch.no_grad():
        x[0, :5] = 0.0
    g = torch.randn(6, 40)
    g[0, 0], g[1, x[1] < 0] = float("inf"), float("nan")  # where x <= 0 the gradient is 0 whatever g is
    y = ACTIVATIONS["relu_squared"]()(x)
    (ours,) = torch.autograd.grad(y, x, g)
    reference = torch.relu(x) ** 2
    (expected,) = torch.autograd.grad(reference, x, g)
    assert torch.equal(y, reference) and torch.equal(ours, expected)
    assert torch.equal(ours[x <= 0], torch.zeros_like(ours[x <= 0]))

def test_silu_by_hand():
    """x / (1 + e^-x), Marian's "swish"; dense only. Catches another activation under the name (e.g. GELU, close
    near 0 but 0.0036 apart at x = 2) or experts accepting it without an expert implementation."""
    x = torch.tensor([-2.0, 0.0, 1.0, 2.0])
    expected = [v / (1 + torch.exp(torch.tensor(-v)).item()) for v in x.tolist()]
    torch.testing.assert_close(ACTIVATIONS["silu"]()(x), torch.tensor(expected), atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="model.ffn=gelu"):
        TransformerConfig(**TINY, ffn="silu", moe={"num_experts": 4})
