"""Inference inputs in-process: free text taken out of the command line verbatim, line splitting, settings
ranges, special-token strings read as text, and training-time = inference-time token ids for the same raw line
(classification, MLM, translation, language modelling). The CLIs themselves: tests/runtime/inference/test_inference_cli.py."""
from __future__ import annotations

import gzip
import json
import re
import sys

import pytest
from conftest import refused
from omegaconf import OmegaConf

from lab.data.sources.text import normalize_document, normalize_sentence
from lab.errors import LabError

# Text that Hydra's override grammar rejects or rewrites, each must come through untouched.
TRICKY = {
    "comma": "A warm, funny and moving film.",
    "question": "Wie spät ist es?",
    "quotes": 'He said "hello" and left',
    "apostrophe": "it's the cast's best",
    "brackets": "a [great] {film} (really) <b>",
    "equals": "a=b, key=value",
    "mask": "a [MASK] film",
    "non_ascii": "日本語 — naïve café ✓",
    "leading_dashes": "--verbose -- not a flag",
    "specials": "[PAD] [CLS] </s> <s> [SEP]",
    "dollar_braces": "${oc.env:HOME} and ${x}",
}


@pytest.mark.parametrize("text", TRICKY.values(), ids=TRICKY.keys())
def test_text_arguments_are_taken_out_of_argv_verbatim(text):
    from lab.runtime.inference.inputs import take_text_arguments, taken

    argv = ["lab.classify", "ckpt_path=x.ckpt", f"text={text}", "batch_size=4", "file=in put,1.txt"]
    got = take_text_arguments("text", "file", argv=argv)
    assert got == {"text": text, "file": "in put,1.txt"} and taken("text") == text
    assert argv == ["lab.classify", "ckpt_path=x.ckpt", "batch_size=4"]  # what Hydra still parses


def test_a_text_given_twice_is_one_error(capsys):
    from lab.runtime.inference.inputs import take_text_arguments

    with pytest.raises(SystemExit) as e:
        take_text_arguments("text", argv=["x", "text=a", "text=b"])
    assert e.value.code == 2 and "text= is given twice" in capsys.readouterr().err


@pytest.mark.parametrize(("data", "lines"), [
    ("a\n\nb\n", ["a", "", "b"]),
    ("a\n\nb", ["a", "", "b"]),
    ("a\r\n  \r\nb\r\n", ["a", "  ", "b"]),
    ("\n", [""]),
    ("", []),
    ("a\n\n", ["a", ""]),
], ids=["trailing_newline", "no_trailing_newline", "crlf_whitespace_line", "one_blank_line", "empty", "blank_last"])
def test_lines_are_split_as_line_numbering_tools_count_them(data, lines):
    from lab.runtime.inference.inputs import split_lines

    assert split_lines(data) == lines
    assert len(split_lines(data)) == data.count("\n") + (not data.endswith("\n") and data != "")  # = wc -l (+ unterminated)


BAD_SETTINGS = [
    ("temperature", -1, ">= 0"), ("temperature", float("nan"), ">= 0"), ("top_k", 0, ">= 1"), ("top_k", 2.5, ">= 1"),
    ("top_p", 1.5, "(0, 1]"), ("top_p", 0, "(0, 1]"), ("max_new_tokens", -5, ">= 1"), ("num_samples", 0, ">= 1"),
    ("beam_size", 0, ">= 1"), ("length_penalty", float("inf"), "finite"), ("batch_size", "many", ">= 1"),
    ("n_best", 0, "from 1 to beam_size"), ("no_repeat_ngram", -1, ">= 0"), ("no_repeat_ngram", 1.5, ">= 0"),
]


@pytest.mark.parametrize(("name", "value", "allowed"), BAD_SETTINGS, ids=[f"{n}={v}" for n, v, _ in BAD_SETTINGS])
def test_out_of_range_settings_name_the_setting_and_range(name, value, allowed):
    from lab.runtime.inference.predict import check_settings

    with pytest.raises(LabError, match=rf"^{name}=.* is out of range: {name} must be .*{__import__('re').escape(allowed)}"):
        check_settings({name: value}, name)


def test_settings_in_range_come_back_typed():
    from lab.runtime.inference.predict import check_settings

    cfg = OmegaConf.create({"temperature": 0, "top_k": None, "top_p": 1.0, "beam_size": 3, "length_penalty": -0.5})
    got = check_settings(cfg, "temperature", "top_k", "top_p", "beam_size", "length_penalty")
    assert got == {"temperature": 0.0, "top_k": None, "top_p": 1.0, "beam_size": 3, "length_penalty": -0.5}
    assert isinstance(got["temperature"], float)


# ---- special-token strings are text ----

def _tokenizers():
    from lab.data.classification import BERT_SPECIALS
    from lab.data.lm import EOS
    from lab.data.parallel import SPECIALS
    from lab.data.tokenizers import train_tokenizer

    words = ("pad", "cls", "mask", "s", "PAD CLS MASK SEP |endoftext|")
    corpus = [f"the cat [{w}] sat on <the> mat, /s {w} said the cast's friend." for w in words] * 30
    return {
        "bpe_translation": train_tokenizer("bpe", corpus, SPECIALS, 400),
        "wordpiece_encoder": train_tokenizer("wordpiece", corpus, BERT_SPECIALS, 400),
        "char_lm": train_tokenizer("char", corpus, [EOS], 0),
        "bpe_lm": train_tokenizer("bpe", corpus, [EOS], 400),
    }


SPECIAL_STRINGS = ["[PAD]", "[MASK]", "</s>", "<s>", "[CLS]", "<pad>", "<|endoftext|>", "[SEP] [PAD] [PAD]"]


@pytest.fixture(scope="module")
def tokenizers():
    return _tokenizers()


@pytest.mark.parametrize("kind", ["bpe_translation", "wordpiece_encoder", "char_lm", "bpe_lm"])
@pytest.mark.parametrize("special", SPECIAL_STRINGS)
def test_special_token_strings_in_text_encode_as_ordinary_text(tokenizers, kind, special):
    from lab.data.tokenizers import tokenizer_from_json

    tok = tokenizer_from_json(tokenizers[kind].to_json())  # as a checkpoint gives it back to inference
    special_ids = {tok.token_id(s) for s in tok.special_tokens if s != "[UNK]"}  # [UNK] is the tokenizer's own word
    ids = tok.encode(f"the {special} cat")
    assert ids and not special_ids & set(ids), (special, ids)
    if kind == "wordpiece_encoder":  # lowercased by its normaliser: the lowercase string is plainly text
        assert ids == tok.encode(f"the {special.lower()} cat")
    else:  # the text comes back: nothing was dropped or made a control token
        assert tok.decode(ids) == f"the {special} cat"


def test_char_tokenizer_never_maps_an_unseen_character_to_a_special_id(tokenizers):
    tok = tokenizers["char_lm"]
    assert tok.encode("a日t") == tok.encode("at") and len(tok.encode("at")) == 2 and tok.unknown("a日t") == ["日"]


# ---- training-time ids == inference-time ids for the same raw line ----

RAW = "  Wie  spa\u0308t\tist es?\u00a0 "  # NFD ä, a tab, double and non-breaking spaces, edge whitespace


def test_normalisation_is_nfc_and_single_spaces_for_sentences_and_keeps_lines_for_documents():
    assert normalize_sentence(RAW) == "Wie spät ist es?"
    assert normalize_document("ROMEO:\r\n  spa\u0308t\n") == "ROMEO:\n  spät\n"


def test_classifier_training_ids_equal_inference_ids(tmp_path):
    from lab.data.classification import LabelledFilesDataModule, encode_sentence

    rows = [{"text": f"sentence {i} spät ist es", "label": "pos" if i % 2 else "neg"} for i in range(40)]
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    test = tmp_path / "test.jsonl"  # held-out rows differ from train (lab removes the ones that do not)
    held_out = [{"text": RAW, "label": "pos"}, {"text": "ist es spät", "label": "neg"}, {"text": "es ist", "label": "pos"}]
    test.write_text("\n".join(json.dumps(r) for r in held_out), encoding="utf-8")
    dm = LabelledFilesDataModule(str(train), test_file=str(test), tokenizer="char",
                                 max_length=64, cache_dir=str(tmp_path / "cache"))
    dm.setup()
    trained = dm.encoded["test"][0][0]  # the raw line as the test split encoded it
    assert trained == encode_sentence(dm.tokenizer, RAW, 64)  # lab.classify's path
    assert trained == encode_sentence(dm.tokenizer, "Wie spät ist es?", 64)  # = the clean line


def test_translator_training_ids_equal_inference_ids(tmp_path):
    from lab.data.parallel import ParallelTextDataModule
    from lab.runtime.inference.predict import encode_source

    pairs = [(f"Satz {i} ist spät.", f"Sentence {i} is late.") for i in range(60)]
    train = tmp_path / "pairs.jsonl"
    train.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in pairs), encoding="utf-8")
    held_out = tmp_path / "held_out.jsonl"  # sources that differ from train (lab removes the ones that do not)
    held_out.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in
                                [(RAW, "How late is it?"), ("Es ist spät.", "It is late.")]), encoding="utf-8")
    dm = ParallelTextDataModule(str(train), test_file=str(held_out), valid_size=5, vocab_size=300,
                                cache_dir=str(tmp_path / "cache"))
    dm.setup()
    trained = dm.datasets["test"][0][1].tolist()  # (texts, source ids, target ids, index)
    assert trained == encode_source(dm.tokenizer, RAW, 2)  # lab.translate's path (eos id 2)
    assert trained == encode_source(dm.tokenizer, "Wie spät ist es?", 2)


def test_mlm_training_ids_equal_fill_mask_ids(tmp_path):
    from lab.data.corpora import TextFiles
    from lab.data.mlm import MLMDataModule
    from lab.runtime.inference.predict import encode_masked

    records = ["wie spät ist es? [pad] a b c"] * 20 + [RAW + " [PAD]"] + ["a b c"] * 4  # a record: a segment of its own
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in records))
    dm = MLMDataModule([TextFiles([str(tmp_path / "a.jsonl")], val_fraction=0.05)], vocab_size=200,
                       cache_dir=str(tmp_path / "cache"))
    dm.setup()
    tok, train = dm.tokenizer, dm.datasets["train"]
    assert train[20][1] == [tok.token_id("[CLS]"), *encode_masked(tok, RAW + " [PAD]"), tok.token_id("[SEP]")]


def test_lm_training_ids_equal_prompt_ids(tmp_path):
    from lab.data.corpora import TextFiles
    from lab.data.lm import LMDataModule
    from lab.runtime.inference.predict import encode_prompt

    doc = "ROMEO:\r\n  Wie spa\u0308t ist es?\r\n" * 40
    (tmp_path / "a.txt").write_bytes(doc.encode("utf-8"))
    dm = LMDataModule(TextFiles([str(tmp_path / "a.txt")], val_fraction=0.5), tokenizer="char", block_size=8,
                      cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup()
    line = "ROMEO:\r\n  Wie spa\u0308t ist es?\r\n"
    n = len(encode_prompt(dm.tokenizer, line, 1000))
    assert [int(i) for i in dm.train_tokens[:n]] == encode_prompt(dm.tokenizer, line, 1000)


def test_training_samples_encode_their_prompts_as_lab_generate():
    """The samples logged after each validation start from the ids lab.generate gives the same prompt."""
    from types import SimpleNamespace

    from lab.data.tokenizers import HFTokenizer
    from lab.models.gpt import GPT
    from lab.runtime.inference.predict import encode_prompt
    from lab.tasks.language_model import LanguageModelTask

    tok = HFTokenizer.train(["Juliet is the sun\n" * 20], ["<|endoftext|>"], vocab_size=280, kind="bpe")
    prompts = ["Juliet\r\nis", "spa\u0308t\r"]
    task = LanguageModelTask(GPT(tok.vocab_size, d_model=16, n_layers=1, n_heads=2, max_seq_len=32), None,
                             samples={"prompts": prompts, "max_new_tokens": 1})
    seen = []
    task.sample = lambda ids, **settings: seen.append(ids) or ids
    task.log_examples = lambda *args: None
    task.trainer = SimpleNamespace(datamodule=SimpleNamespace(tokenizer=tok, vocab={"eos_id": 0}), global_step=0)
    task.log_samples()
    assert seen == [encode_prompt(tok, p, 32) for p in prompts]


def test_fill_mask_windows_keep_every_mask_inside_trained_positions():
    from lab.runtime.inference.predict import mask_windows

    ids = list(range(100))
    for masks in ([0], [99], [50], [3, 97]):
        windows = mask_windows(ids, masks, 30)
        assert len(windows) == len(masks)
        for (start, window), m in zip(windows, masks):
            assert len(window) == 30 and window == ids[start : start + 30] and start <= m < start + 30
    assert mask_windows(ids[:30], [5, 20], 30) == [(0, ids[:30])]


def test_inference_inputs_that_are_not_text_are_one_line(tmp_path, monkeypatch):
    from lab.runtime.inference.inputs import read_texts

    (tmp_path / "in.txt").write_bytes(gzip.compress(b"a text\n"))
    (tmp_path / "nul.txt").write_bytes(b"abc\n" * 3000 + b"\0\n")  # past the first 8 KB
    assert re.fullmatch(r"\S+in.txt is a gzip-compressed file, not text; zcat \S+in.txt > in.plain.txt and give that file",
                        refused(read_texts, None, str(tmp_path / "in.txt")))
    assert "nul.txt holds NUL bytes (byte offset 12000): a binary file" in refused(read_texts, None, str(tmp_path / "nul.txt"))

    class Stdin:
        buffer = __import__("io").BytesIO(b"one\ntw\0o\n")

        @staticmethod
        def isatty():
            return False
    monkeypatch.setattr(sys, "stdin", Stdin)
    with pytest.raises(LabError, match=r"^file=\S+ is a directory; give a UTF-8 text file"):
        read_texts(None, str(tmp_path))
    with pytest.raises(LabError, match=r"^stdin holds NUL bytes \(byte offset 6\): binary data, not text"):
        read_texts(None, None)
