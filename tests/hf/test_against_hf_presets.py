"""The shipped presets leave lab: each experiment's model, as its config composes it, exports to a transformers
class (BERT for the encoders, Pegasus for the translator, SwitchTransformers for its MoE twin, Apertus for the
fast LMs) and gives transformers the logits lab computes (issue 31: every preset exports)."""
from __future__ import annotations

import pytest
import torch

from lab.data.tokenizers import HFTokenizer
from lab.hf.exporting import export
from lab.models import build_model

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


TRANSLATOR_PRESETS = {  # experiment -> (overrides, transformers class)
    # the GPU preset inherits translator_small's layout at 6+6 x 512: both must map (built at 2 layers x 64 here)
    "translator_small": (["model.n_layers=2", "model.d_model=64"], "PegasusForConditionalGeneration"),
    "translator_base_gpu": (["model.n_layers=2", "model.d_model=64"], "PegasusForConditionalGeneration"),
    # at its own size: 2+2 layers x 128, 8 experts on layer 2 of each side
    "translator_small_moe": ([], "SwitchTransformersForConditionalGeneration"),
}


@pytest.mark.parametrize("name", list(TRANSLATOR_PRESETS))
def test_shipped_translator_preset_exports_with_equal_logits(compose, name, tmp_path):
    """transformers' class gives lab's eval logits on a padded batch; the MoE preset's routers spread the tokens."""
    overrides, hf_class = TRANSLATOR_PRESETS[name]
    cfg = compose([f"+experiment={name}", "model.init_std=0.1", *overrides])
    tok = HFTokenizer.train([TEXT] * 10, ["<pad>", "<s>", "</s>"], vocab_size=150, kind="bpe")
    torch.manual_seed(0)
    model = build_model(cfg.model, {"vocab_size": tok.vocab_size, "pad_id": 0, "bos_id": 1, "eos_id": 2}).eval()
    _perturb_norms_and_biases(model)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "router" in key:
                p.normal_(0.0, 1.0)
    meta = {"config": {"model": dict(cfg.model)}}
    assert export(model, tok, meta, tmp_path).hf_class == hf_class
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    rows = [tok.encode(t)[:30] + [2] for t in ("a gorgeous, moving film", "neither funny nor scary at all, the worst")]
    src = torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])  # right-padded
    tgt = torch.tensor([[1, *tok.encode("the worst movie of the year")[:8]], [1, *tok.encode("a moving film, funny")[:8]]])
    with torch.no_grad():
        ours, aux = model(src, tgt, return_aux=True)
        theirs = hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    moe = [routing.stats for routing in aux.routing.values()]
    assert len(moe) == (2 if cfg.model.moe else 0)
    assert all(int((f["expert_fraction"] > 0).sum()) >= 2 for f in moe)  # experts that differ are compared
    assert (ours[0] - ours[1]).abs().max() > 0.05  # the two inputs give different outputs
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["gpt_nano_char_fast", "gpt_small_fast"])
def test_shipped_fast_lm_preset_exports_as_apertus_and_comes_back_bit_exact(compose, name, tmp_path):
    """The speedrun presets at their own sizes, with their data's tokenizer kind (char, BPE): transformers'
    logits on a left-padded batch of prompts of other lengths, its batched greedy generate, its tokenizer and a
    round trip through model.init_from all equal lab's."""
    from test_against_hf_export import SAMPLES
    from test_against_hf_pipelines import TRICKY

    from lab.data.lm import EOS
    from lab.data.tokenizers import train_tokenizer
    from lab.hf.importing import init_from, load
    from lab.models.decoding import generate
    from lab.runtime.inference.predict import encode_prompt

    cfg = compose([f"+experiment={name}", "model.init_std=0.1"])  # outputs that vary clearly by input (as above)
    tok = train_tokenizer(cfg.data.tokenizer, [TEXT * 5], [EOS], 300)
    torch.manual_seed(0)
    model = build_model(cfg.model, {"vocab_size": tok.vocab_size}).eval()
    with torch.no_grad():  # the zero-init projections and head as training leaves them: away from zero
        for p in model.parameters():
            if not p.any():
                p.normal_(0, 0.1)
    _perturb_norms_and_biases(model)
    meta = {"config": {"model": dict(cfg.model)}}
    assert export(model, tok, meta, tmp_path).hf_class == "ApertusForCausalLM"
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in SAMPLES + TRICKY:  # as lab.generate reads a prompt (line ends, NFC, unseen characters)
        assert hf_tok(text)["input_ids"] == encode_prompt(tok, text, 64), repr(text)
    prompts = ["a gorgeous, moving film", "neither funny nor scary at all, the worst movie", "the"]
    batch = hf_tok(prompts, return_tensors="pt", padding=True)  # on the left (a causal LM's export)
    assert (batch.attention_mask[:, 0] == 0).any()
    with torch.no_grad():
        theirs = hf(**batch).logits
        for row, text in enumerate(prompts):
            ids = torch.tensor([tok.encode(text)])
            ours = model(ids)[0]
            assert ours.std() > 0.5  # outputs that vary by position and token: a mapping error would show
            torch.testing.assert_close(theirs[row, -ids.shape[1]:], ours, atol=1e-4, rtol=0)
    eos = tok.token_id(EOS)
    out = hf.generate(**batch, max_new_tokens=16, do_sample=False)[:, batch.input_ids.shape[1]:].tolist()
    seen = set()
    for row, text in enumerate(prompts):
        ours = generate(model, torch.tensor([tok.encode(text)]), 16, temperature=0.0)[0, len(tok.encode(text)):].tolist()
        n = ours.index(eos) + 1 if eos in ours else len(ours)  # transformers pads the rows after their eos
        assert out[row][:n] == ours[:n] and n > 4, text
        seen |= set(ours[:n])
    assert len(seen) > 4  # continuations that depend on the logits, not one repeated token
    fresh = build_model(cfg.model, {"vocab_size": tok.vocab_size})  # a run of the preset with model.init_from=<export>
    init_from(fresh, str(tmp_path), meta)
    back = load(tmp_path).model
    for other in (fresh, back):
        assert [k for k, v in model.state_dict().items() if not torch.equal(v, other.state_dict()[k])] == []
    ids = torch.randint(0, tok.vocab_size, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(fresh.eval()(ids), model(ids))
