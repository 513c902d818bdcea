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


def test_silu_by_hand():
    """x / (1 + e^-x), Marian's "swish"; dense only. Catches another activation under the name (e.g. GELU, close
    near 0 but 0.0036 apart at x = 2) or experts accepting it without an expert implementation."""
    x = torch.tensor([-2.0, 0.0, 1.0, 2.0])
    expected = [v / (1 + torch.exp(torch.tensor(-v)).item()) for v in x.tolist()]
    torch.testing.assert_close(ACTIVATIONS["silu"]()(x), torch.tensor(expected), atol=1e-6, rtol=0)
    with pytest.raises(ConfigError, match="model.ffn=gelu"):
        TransformerConfig(**TINY, ffn="silu", moe={"num_experts": 4})
