"""The blocks' parts (lab/nn/blocks.py): the logit soft-cap and zero-initialised residual projections, by hand."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_GPT as TINY

from lab.errors import ConfigError
from lab.models.gpt import GPT
from lab.nn import SoftCap


def test_softcap_by_hand_and_on_the_gpt_logits():
    cap = SoftCap(2.0)
    out = cap(torch.tensor([0.0, 1.0, -1.0, 100.0]))
    assert out.tolist() == pytest.approx([0.0, 0.92423431452, -0.92423431452, 2.0])  # 2 tanh(1/2) = 0.9242...
    torch.manual_seed(0)
    capped = GPT(11, **TINY, logit_softcap=0.05)
    raw = GPT(11, **TINY)
    raw.load_state_dict(capped.state_dict())
    x = torch.randint(0, 11, (2, 8))
    assert torch.allclose(capped(x), 0.05 * torch.tanh(raw(x) / 0.05), atol=1e-7)
    assert capped(x).abs().max() < 0.05 < raw(x).abs().max()
    with pytest.raises(ConfigError, match="logit_softcap=null"):
        SoftCap(0.0)


def test_zero_init_projections_start_every_block_as_the_identity():
    torch.manual_seed(0)
    model = GPT(11, **TINY, zero_init_proj=True, tie_embeddings=False)
    for block in model.decoder.layers:
        assert not block.self_attn.out_proj.weight.any() and not block.ffn.down.weight.any()
        assert block.self_attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert not model.lm_head.weight.any()
    x = torch.randint(0, 11, (2, 8))
    loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
    assert loss.item() == pytest.approx(math.log(11), abs=1e-6)  # a zero head: the uniform prediction
    tied = GPT(11, **TINY, zero_init_proj=True)  # tied: the head is the embedding, which stays random
    assert tied.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.2) and not tied.decoder.layers[0].ffn.down.weight.any()
