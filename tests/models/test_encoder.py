"""Encoder models: padding invariance, bidirectionality, pooling, MLM weight tying, init_from."""
from __future__ import annotations

import pytest
import torch

from lab.errors import LabError
from lab.models.encoder import EncoderClassifier, MaskedLM, MeanPooling

PAD = 0
ARCH = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=24, dropout=0.0)


def classifier(**kw) -> EncoderClassifier:
    return EncoderClassifier(vocab_size=50, pad_id=PAD, num_labels=3, **{**ARCH, **kw}).eval()


@pytest.mark.parametrize("pooling,head", [("cls", "sequence"), ("mean", "sequence"), ("attention", "sequence"),
                                          ("cls", "token")], ids=["cls", "mean", "attention", "token-head"])
@pytest.mark.parametrize("placement", ["pre", "post"])
def test_padding_never_changes_logits(pooling, head, placement):
    torch.manual_seed(0)
    model = classifier(pooling=pooling, head=head, norm_placement=placement)
    if pooling == "attention":  # a non-trivial learned query, else attention pooling is mean pooling
        torch.nn.init.normal_(model.pool.query, std=1.0)
    seq = torch.randint(1, 50, (1, 7))
    alone = model(seq)
    padded = torch.cat([seq, torch.full((1, 9), PAD)], dim=1)
    neighbour = torch.randint(1, 50, (1, 16))  # a longer sequence in the same batch
    batched = model(torch.cat([padded, neighbour]))[:1]
    if head == "token":
        batched = batched[:, :7]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


def test_late_token_changes_early_representation():
    torch.manual_seed(0)
    model = classifier()
    ids = torch.randint(1, 50, (1, 10))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] % 49) + 1  # a different real token at the last position
    h1, _, _ = model.encoder(ids)
    h2, _, _ = model.encoder(changed)
    assert not torch.allclose(h1[0, 0], h2[0, 0], atol=1e-4), "position 0 did not see the last token: attention is causal"


def test_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    h = torch.randn(2, 6, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    garbage = h.clone()
    garbage[0, 3:] = 1e4 * torch.randn(3, 8)  # whatever sits at padded positions
    pooled = MeanPooling()(garbage, mask)
    torch.testing.assert_close(pooled[0], h[0, :3].mean(0))
    torch.testing.assert_close(pooled[1], h[1].mean(0))


def test_mlm_output_layer_is_tied_and_select_matches_full():
    torch.manual_seed(0)
    mlm = MaskedLM(vocab_size=50, pad_id=PAD, mask_id=4, **ARCH).eval()
    assert mlm.mlm_head.decoder.weight is mlm.encoder.embed.tokens.weight
    ids = torch.randint(5, 50, (2, 9))
    select = torch.rand(2, 9) < 0.3
    torch.testing.assert_close(mlm(ids, select=select), mlm(ids)[select], atol=1e-5, rtol=1e-5)


def _mlm_state(seed: int, **arch) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return MaskedLM(vocab_size=50, pad_id=PAD, mask_id=4, **{**ARCH, **arch}).state_dict()


@pytest.mark.parametrize("pooling", ["cls", "attention"])
def test_init_from_loads_exactly_the_encoder_weights(pooling):
    state = _mlm_state(1)
    torch.manual_seed(2)
    model = classifier(pooling=pooling)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = model.load_encoder(state)
    after = model.state_dict()
    encoder_keys = sorted(k for k in after if k.startswith("encoder."))
    assert sorted(report["loaded"]) == encoder_keys
    assert sorted(report["new"]) == sorted(k for k in after if not k.startswith("encoder."))
    assert all(k.startswith("mlm_head.") for k in report["ignored"]) and report["ignored"]
    for k in encoder_keys:
        assert torch.equal(after[k], state[k]), k
    for k in report["new"]:  # the head keeps its own init
        assert torch.equal(after[k], before[k]), k


@pytest.mark.parametrize("arch", [{"d_model": 64}, {"max_seq_len": 48}, {"n_layers": 1}],
                         ids=["width", "positions", "depth"])
def test_init_from_refuses_a_checkpoint_that_does_not_fit(arch):
    torch.manual_seed(2)
    model = classifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(LabError, match="does not fit"):
        model.load_encoder(_mlm_state(1, **arch))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()), "refused, but weights changed"
