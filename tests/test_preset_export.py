"""The shipped presets leave lab: each experiment's model, as its config composes it, exports to a transformers
class (BERT for the encoders, Pegasus for the translator) and gives transformers the logits lab computes
(issue 31: every preset exports)."""
from __future__ import annotations

import pytest
import torch

from lab.data.tokenizers import HFTokenizer
from lab.models import build_model
from lab.runtime.hf import export

transformers = pytest.importorskip("transformers")

TEXT = "a gorgeous, moving film. the worst movie of the year; neither funny nor scary! " * 4
PRESETS = {  # experiment -> (transformers class, Auto class)
    "encoder_classifier": ("BertForSequenceClassification", "AutoModelForSequenceClassification"),
    "encoder_classifier_pretrained": ("BertForSequenceClassification", "AutoModelForSequenceClassification"),
    "encoder_mlm": ("BertForMaskedLM", "AutoModelForMaskedLM"),
}


def _perturb_norms_and_biases(model) -> None:
    """Norms and biases away from their init (1 and 0), so a swapped tensor would show."""
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "norm" in key or key.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)


@pytest.mark.parametrize("name", list(PRESETS))
def test_shipped_encoder_preset_exports_with_equal_logits(compose, name, tmp_path):
    # init_std 0.1 (the preset's is 0.02): outputs that vary clearly from input to input, so a mapping error shows
    extra = ["model.init_from=null"] if "pretrained" in name else []
    cfg = compose([f"+experiment={name}", "model.init_std=0.1", *extra])
    tok = HFTokenizer.train([TEXT] * 10, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], vocab_size=120, kind="wordpiece")
    torch.manual_seed(0)
    model = build_model(cfg.model, {"vocab_size": tok.vocab_size, "pad_id": 0, "mask_id": 4, "num_labels": 2}).eval()
    _perturb_norms_and_biases(model)
    cls, auto = PRESETS[name]
    meta = {"data": {"labels": ["negative", "positive"]}, "config": {"model": dict(cfg.model)}}
    assert export(model, tok, meta, tmp_path).hf_class == cls
    hf = getattr(transformers, auto).from_pretrained(tmp_path).eval()
    rows = [[2, *tok.encode(t)[:30], 3] for t in ("a gorgeous, moving film", "neither funny nor scary at all")]
    ids = torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])  # right-padded
    with torch.no_grad():
        ours, theirs = model(ids), hf(input_ids=ids, attention_mask=ids != 0).logits
    real = ids != 0 if ours.dim() == 3 else slice(None)  # MLM: padded positions are unused by both
    assert (ours[0] - ours[1]).abs().max() > 0.05  # the two inputs give different outputs
    torch.testing.assert_close(theirs[real], ours[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["translator_small", "translator_base_gpu"])
def test_shipped_translator_preset_exports_as_pegasus_with_equal_logits(compose, name, tmp_path):
    # the GPU preset inherits translator_small's layout at 6+6 x 512: both must map (built at 2 layers x 64 here)
    cfg = compose([f"+experiment={name}", "model.init_std=0.1", "model.n_layers=2", "model.d_model=64"])
    tok = HFTokenizer.train([TEXT] * 10, ["<pad>", "<s>", "</s>"], vocab_size=150, kind="bpe")
    torch.manual_seed(0)
    model = build_model(cfg.model, {"vocab_size": tok.vocab_size, "pad_id": 0, "bos_id": 1, "eos_id": 2}).eval()
    _perturb_norms_and_biases(model)
    meta = {"config": {"model": dict(cfg.model)}}
    assert export(model, tok, meta, tmp_path).hf_class == "PegasusForConditionalGeneration"
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    rows = [tok.encode(t)[:30] + [2] for t in ("a gorgeous, moving film", "neither funny nor scary at all, the worst")]
    src = torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])  # right-padded
    tgt = torch.tensor([[1, *tok.encode("the worst movie of the year")[:8]], [1, *tok.encode("a moving film, funny")[:8]]])
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    assert (ours[0] - ours[1]).abs().max() > 0.05  # the two inputs give different outputs
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)
