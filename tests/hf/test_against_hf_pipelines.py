"""The exported tokenizer is part of the model: transformers' own pipelines (text-generation, text-classification,
fill-mask) and tokenize-then-generate (translation) over texts that exercise lab's normalisation (\\r\\n, decomposed
accents, runs of spaces, edge whitespace, tabs, emoji, special-token strings) give exactly what lab's entry points
give on the same weights."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from lab.data.classification import encode_sentence
from lab.data.tokenizers import HFTokenizer
from lab.hf.exporting import export
from lab.models.decoding import generate
from lab.models.encoder import EncoderClassifier, MaskedLM
from lab.models.gpt import GPT
from lab.models.seq2seq import EncoderDecoder
from lab.runtime.inference import predict as inference

transformers = pytest.importorskip("transformers")

CORPUS = ("ROMEO. But soft, what light through yonder window breaks? It is the east, and Juliet is the sun.\n"
          "Café naïve résumé, the envious moon who is already sick and pale with grief.\n") * 20
TRICKY = ["Juliet is\r\nthe sun", "Cafe\u0301 nai\u0308ve", "two  spaces   three", "  edge whitespace \n",
          "tab\there\t\tand there", "emoji 🙂 and 日本", "line\rbreaks\n\nkept", "strings [CLS] [SEP] <|endoftext|> </s>",
          "nbsp\u00a0and\u3000ideographic"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():  # non-trivial norms and biases: a mapping error cannot hide behind init values
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def _meta(max_seq_len: int = 64, **data) -> dict:
    return {"config": {"model": {"max_seq_len": max_seq_len}, "data": data}, "data": {"labels": data.get("labels")}}


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    tok = HFTokenizer.train([CORPUS], ["<|endoftext|>"], vocab_size=320, kind="bpe")
    torch.manual_seed(0)
    model = _perturbed(GPT(tok.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1))
    out = tmp_path_factory.mktemp("lm")
    export(model, tok, _meta(block_size=48), out)
    return tok, model, out


def test_text_generation_pipeline_gives_lab_generate_ids(lm):
    tok, model, out = lm
    pipe = transformers.pipeline("text-generation", model=str(out), device="cpu")
    assert pipe.tokenizer.model_max_length == 48  # the trained block size, not max_seq_len
    agree = 0
    for text in TRICKY:
        ids = inference.encode_prompt(tok, text, 48)
        ours = generate(model, torch.tensor([ids]), 6, temperature=0.0)[0].tolist()
        (theirs,) = pipe(text, return_tensors=True, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        agree += theirs["generated_token_ids"][: len(ids)] == ids
        assert list(theirs["generated_token_ids"]) == ours, repr(text)
    assert agree == len(TRICKY)


def test_batched_generate_pads_on_the_left(lm):
    """A batch of prompts of different lengths: each row's continuation is the one it gets alone."""
    tok, model, out = lm
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    prompts = ["ROMEO.", "Juliet is the sun, and the  moon\r\nis"]
    batch = hf_tok(prompts, padding=True, return_tensors="pt")
    assert hf_tok.padding_side == "left" and batch["attention_mask"][0, 0] == 0  # the shorter prompt is padded first
    rows = hf.generate(**batch, max_new_tokens=5, min_new_tokens=5, do_sample=False)[:, batch["input_ids"].shape[1]:]
    for prompt, row in zip(prompts, rows.tolist()):
        ids = inference.encode_prompt(tok, prompt, 48)
        assert row == generate(model, torch.tensor([ids]), 5, temperature=0.0)[0, len(ids):].tolist(), prompt


def test_a_tokenizer_from_model_exports_the_ids_lab_read_and_prompts(tmp_path, caplog):
    """data.tokenizer_from=<HF dir> with a tokenizer as users bring them: its own normaliser (lowercase), a template
    that puts a token before every text (as a Llama's <s>), truncation and padding set. lab normalises every text
    before that tokenizer and adds nothing to it; the export gives the same ids for the data (a corpus with \r\n
    line ends and decomposed accents, read by the LM datamodule) and for lab.generate's prompts."""
    from tokenizers import normalizers, processors

    from lab.data.corpora import TextFiles
    from lab.data.lm import LMDataModule
    from lab.data.sources.text import normalize_document

    source = HFTokenizer.train([CORPUS], ["<|endoftext|>"], vocab_size=320, kind="bpe").backend
    source.normalizer = normalizers.Lowercase()
    text = "\r\n".join(TRICKY * 30)
    expected = source.encode(normalize_document(text).lower()).ids  # lab's normalisation, then the tokenizer's
    source.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)])
    source.enable_truncation(8)
    source.enable_padding(pad_id=0, pad_token="<|endoftext|>")
    (tmp_path / "hf").mkdir()
    source.save(str(tmp_path / "hf" / "tokenizer.json"))
    (tmp_path / "corpus.txt").write_bytes(text.encode())  # as written: \r\n kept
    dm = LMDataModule(TextFiles([str(tmp_path / "corpus.txt")]), block_size=32, batch_size=2,
                      cache_dir=str(tmp_path / "cache"), tokenizer_from=str(tmp_path / "hf"))
    dm.prepare_data()
    dm.setup()
    tok = dm.tokenizer
    assert tok.encode_batch(["ab", "longer text"])[0] == tok.encode("ab")  # a batch is not padded either
    torch.manual_seed(0)
    model = _perturbed(GPT(tok.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1))
    with caplog.at_level(logging.INFO, logger="lab"):
        export(model, tok, _meta(block_size=32), tmp_path / "out")
    assert "post-processor adds 1 token(s) to every text" in caplog.text  # the <|endoftext|> it left out, said
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = hf_tok(text)["input_ids"]  # the corpus's own text through transformers
    assert len(ids) > 1000 and ids == expected
    assert np.asarray(dm.train_tokens)[:1000].tolist() == ids[:1000]  # what the model was trained on
    for text in [*TRICKY, " leading and trailing  ", "CAPS\rlone"]:
        assert hf_tok(text)["input_ids"] == inference.encode_prompt(tok, text, 32), repr(text)


@pytest.fixture(scope="module")
def wordpiece():
    return HFTokenizer.train([CORPUS], BERT_SPECIALS, vocab_size=200, kind="wordpiece")


BERT = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1, positions="learned", norm="layernorm",
            norm_placement="post", ffn="gelu", embed_norm=True)


@pytest.mark.parametrize("kind", ["translator", "classifier"])
def test_a_tokenizer_from_sentence_model_exports_the_ids_lab_reads(tmp_path, kind):
    """A Marian-style (text </s>) and a BERT-style ([CLS] text [SEP], BertNormalizer) tokenizer.json with truncation
    set, as data.tokenizer_from reads them: the export's ids are lab.translate's / lab.classify's (lab's sentence
    normalisation, then the tokenizer's own; lab's specials; nothing cut below the trained length)."""
    from tokenizers import processors

    from lab.data.tokenizers import tokenizer_from_hf_dir

    if kind == "translator":
        source = HFTokenizer.train([CORPUS], ["</s>", "<unk>", "<pad>"], vocab_size=300, kind="bpe").backend
        source.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    else:
        source = HFTokenizer.train([CORPUS], BERT_SPECIALS, vocab_size=200, kind="wordpiece").backend
        source.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    source.enable_truncation(6)
    (tmp_path / "hf").mkdir()
    source.save(str(tmp_path / "hf" / "tokenizer.json"))
    tok = tokenizer_from_hf_dir(tmp_path / "hf")
    torch.manual_seed(0)
    if kind == "translator":
        model = EncoderDecoder(tok.vocab_size, 2, 0, 0, d_model=32, n_layers=1, n_heads=4, max_seq_len=64,
                               positions="sinusoidal", norm="layernorm", norm_placement="post", ffn="relu",
                               scale_embeddings=True)
        export(model, tok, _meta(max_tokens=40), tmp_path / "out")
        ours = lambda text: inference.encode_source(tok, text, model.eos_id)  # noqa: E731
    else:
        model = EncoderClassifier(tok.vocab_size, 0, 2, pooling="bert", **BERT)
        export(model, tok, _meta(max_length=40, labels=["a", "b"]), tmp_path / "out")
        ours = lambda text: encode_sentence(tok, text, 40)  # noqa: E731
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    for text in [*TRICKY, " leading and trailing  ", "ROMEO. But soft, what light through yonder window breaks?"]:
        assert hf_tok(text)["input_ids"] == ours(text), repr(text)
    assert len(ours(CORPUS.splitlines()[0])) > 6


def test_text_classification_pipeline_gives_lab_classify(wordpiece, tmp_path):
    torch.manual_seed(0)
    model = _perturbed(EncoderClassifier(wordpiece.vocab_size, 0, 3, pooling="bert", **BERT))
    texts = [*TRICKY, *CORPUS.splitlines()[:2]]
    with torch.no_grad():  # predictions that differ from text to text: logits centred on their mean over the texts
        model.classifier.weight.mul_(30)
        model.classifier.bias.sub_(model(torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encode_sentence(wordpiece, t, 24)) for t in texts], batch_first=True)).mean(0))
    labels = ["negative", "neutral", "positive"]
    export(model, wordpiece, _meta(max_length=24, labels=labels), tmp_path)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path), device="cpu")
    assert pipe.tokenizer.model_max_length == 24
    for text in texts:  # the ids the model reads: [CLS] ... [SEP], lab's normalisation
        assert pipe.tokenizer(text, truncation=True)["input_ids"] == encode_sentence(wordpiece, text, 24), repr(text)
    ours = inference.classify(model, wordpiece, labels, texts, 24)
    theirs = pipe(texts, truncation=True)  # as lab, cut to the trained length (one text here is longer)
    assert len({label for label, _ in ours}) > 1  # the texts do not all get one label
    for (label, p), t in zip(ours, theirs):
        assert t["label"] == label and t["score"] == pytest.approx(p, abs=1e-5)


@pytest.mark.parametrize("layout", [{}, {"ffn": "gelu_erf", "norm_eps": 1e-12}], ids=["tanh-gelu", "bert-erf-gelu"])
def test_fill_mask_pipeline_gives_lab_fill_mask(wordpiece, tmp_path, layout):
    """bert-erf-gelu: released BERT's settings (hidden_act "gelu", layer_norm_eps 1e-12), in the MLM head too."""
    torch.manual_seed(0)
    model = _perturbed(MaskedLM(wordpiece.vocab_size, 0, 4, **{**BERT, **layout}))
    export(model, wordpiece, _meta(max_length=32), tmp_path)
    pipe = transformers.pipeline("fill-mask", model=str(tmp_path), device="cpu", top_k=3)
    # special-token strings other than [MASK] are left out: in the MLM's tokenizer they are tokens (lab.hf.tokenizer)
    texts = [f"{t} [MASK] end" for t in TRICKY if "[CLS]" not in t] + ["[MASK]ing the  sun\r\n", "juliet [MASK]"]
    for text in texts:
        (predictions,), _ = inference.fill_mask(model, wordpiece, text, 3, 32)
        theirs = pipe(text)
        assert [t["token_str"] for t in theirs] == [s for s, _ in predictions], repr(text)
        assert [t["score"] for t in theirs] == pytest.approx([p for _, p in predictions], abs=1e-5)


TRANSLATION_LAYOUTS = {  # Marian's; T5's with Switch experts (translator_small_moe's, exported as SwitchTransformers)
    "marian": dict(positions="sinusoidal", norm="layernorm", norm_placement="post", ffn="relu", scale_embeddings=True),
    "switch": dict(positions="relative", attention_scale=1.0, norm="rmsnorm", norm_placement="pre", ffn="relu", bias=False,
                   output_scale=True, moe={"num_experts": 4, "top_k": 1, "capacity_factor_eval": None, "every_n": 2}),
}


@pytest.mark.parametrize("layout", list(TRANSLATION_LAYOUTS))
def test_translation_tokenize_then_generate_gives_lab_translate(layout, tmp_path):
    pairs = ["ROMEO. But soft, what light through yonder window breaks?", "Café naïve résumé, the envious moon."]
    tok = HFTokenizer.train([CORPUS], ["<pad>", "<s>", "</s>"], vocab_size=300, kind="bpe")
    torch.manual_seed(0)
    model = _perturbed(EncoderDecoder(tok.vocab_size, 0, 1, 2, d_model=32, n_layers=2, n_heads=4, max_seq_len=64,
                                      init_std=0.1, **TRANSLATION_LAYOUTS[layout]))
    export(model, tok, _meta(max_tokens=40), tmp_path)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert hf_tok.model_max_length == 40
    texts = [*TRICKY, *pairs]
    ours = inference.translate_lines(model, tok, texts, batch_size=4, beam_size=1, max_tokens=40)
    assert len(set(ours)) > 1
    for text, translation in zip(texts, ours):
        ids = hf_tok(text, return_tensors="pt")["input_ids"]
        assert ids[0].tolist() == inference.encode_source(tok, text, model.eos_id), repr(text)  # </s> included
        limit = min(int(ids.shape[1] * 1.5) + 10, 40 - 1)  # lab's default length limit
        out = hf.generate(ids, max_new_tokens=limit, num_beams=1, do_sample=False)
        assert hf_tok.decode(out[0], skip_special_tokens=True) == translation, repr(text)


def test_classifier_pipeline_accuracy_equals_lab_classify_on_the_test_split(tmp_path):
    """The movie-review test split through transformers' pipeline and through lab.classify: the same label for
    every sentence, so the same accuracy (the export's [CLS]/[SEP] and normaliser are what make it so)."""
    from conftest import CACHE_DIR

    from lab.data.classification import BERT_SPECIALS as SPECIALS
    from lab.data.classification import MovieReviews, load_split
    from lab.data.sources.text import normalize_sentence

    splits, _ = load_split(MovieReviews(), CACHE_DIR, 0)
    tok = HFTokenizer.train([normalize_sentence(t) for t, _, _ in splits["train"]], SPECIALS, 2000, "wordpiece")
    texts, gold = [t for t, _, _ in splits["test"]], [y for _, y, _ in splits["test"]]
    labels = ["negative", "positive"]
    torch.manual_seed(0)
    model = _perturbed(EncoderClassifier(tok.vocab_size, 0, 2, pooling="bert", **{**BERT, "max_seq_len": 128}))
    with torch.no_grad():  # predictions that depend on the text: logits centred on their mean over the split
        model.classifier.weight.mul_(30)
        model.classifier.bias.sub_(model(torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encode_sentence(tok, t, 128)) for t in texts[:200]], batch_first=True)).mean(0))
    export(model, tok, _meta(128, max_length=128, labels=labels), tmp_path)
    ours = [label for label, _ in inference.classify(model, tok, labels, texts, 128)]
    pipe = transformers.pipeline("text-classification", model=str(tmp_path), device="cpu")
    theirs = [r["label"] for r in pipe(texts, truncation=True, batch_size=64)]
    accuracy = lambda predicted: sum(p == y for p, y in zip(predicted, gold)) / len(gold)  # noqa: E731
    assert len(texts) > 1000 and 0 < ours.count("positive") < len(texts)
    assert accuracy(theirs) == accuracy(ours)
    assert theirs == ours
