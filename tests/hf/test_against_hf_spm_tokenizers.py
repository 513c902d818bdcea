"""Directories that ship a sentencepiece model instead of tokenizer.json: lab reads them with the ids transformers'
own tokenizer gives, on the tricky-text matrix, with tiny sentencepiece models trained here."""
import io
import json
import logging
import shutil

import pytest
from test_against_hf_pipelines import CORPUS, TRICKY

from lab.data.tokenizers import hf_tokenizer_key, tokenizer_from_hf_dir
from lab.errors import LabError

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

TEXTS = [*TRICKY, "<s> <unk> <pad> ▁lead", CORPUS[:300]]


def _train(directory, name: str, lines=(), **settings) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([*CORPUS.splitlines(), *lines]), model_writer=model, minloglevel=2,
                                   character_coverage=1.0, **settings)
    directory.mkdir()
    (directory / name).write_bytes(model.getvalue())


def _agree(ours, theirs, texts=TEXTS) -> None:
    for text in texts:  # split_special_tokens: lab reads "</s>" in a text as characters
        assert ours.encode(text) == theirs(text, add_special_tokens=False).input_ids, repr(text)
        assert ours.encode_batch([text]) == [ours.encode(text)]


def test_against_hf_llama_sentencepiece_tokenizer(tmp_path):
    """Catches merges ranked lowest score first, no "▁" before the text, no byte fallback."""
    d = tmp_path / "llama"
    _train(d, "tokenizer.model", model_type="bpe", vocab_size=330, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2)
    ours = tokenizer_from_hf_dir(d)
    _agree(ours, transformers.LlamaTokenizer.from_pretrained(str(d), split_special_tokens=True))
    assert ours.special_tokens == ["<unk>", "<s>", "</s>"] and ours.token_id("</s>") == 2
    assert hf_tokenizer_key(d).startswith("from2:")


def test_against_hf_t5_tokenizer(tmp_path):
    """Catches a missing normaliser (the file's NFKC) and a missing whitespace split."""
    d = tmp_path / "t5"
    _train(d, "spiece.model", model_type="unigram", vocab_size=55, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    ours = tokenizer_from_hf_dir(d)
    theirs = transformers.T5Tokenizer.from_pretrained(str(d), split_special_tokens=True)
    _agree(ours, theirs, [*TEXTS, "The <extra_id_0> walks in <extra_id_99> park", "a<extra_id_1>b  <extra_id_100>"])
    assert ours.special_tokens == ["<pad>", "</s>", "<unk>"]


@pytest.mark.parametrize(("file", "config", "named"), [
    ("config.json", {"model_type": "pegasus"}, "the tokenizer of model_type 'pegasus'"),
    ("tokenizer_config.json", {"tokenizer_class": "PegasusTokenizer"}, "PegasusTokenizer"),
    ("tokenizer_config.json", {"tokenizer_class": "T5TokenizerFast"}, None),
    ("config.json", {"model_type": "mt5"}, None)])
def test_a_spiece_model_of_another_family_than_t5_is_refused_not_read_as_t5(tmp_path, file, config, named):
    """Pegasus ships a Unigram spiece.model too, but PegasusTokenizer shifts every id by 103: read as T5's, its
    ids would be silently wrong. Catches the family check missing, or refusing T5's own (fast) class or mT5."""
    d = tmp_path / "spm"
    _train(d, "spiece.model", model_type="unigram", vocab_size=55, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    (d / file).write_text(json.dumps(config))
    if named is None:
        assert tokenizer_from_hf_dir(d).token_id("</s>") == 1
        return
    with pytest.raises(LabError, match=f"{named} is not T5Tokenizer.*save_pretrained"):
        tokenizer_from_hf_dir(d)


@pytest.mark.parametrize(("config", "n"), [(None, 100), ({"extra_ids": 3}, 3)])
def test_against_hf_t5_sentinels(tmp_path, config, n):
    """T5's <extra_id_*> sentinels after the file's pieces, <extra_id_0> last: the vocabulary size and every
    sentinel's id are T5Tokenizer's, with 100 of them or tokenizer_config.json's extra_ids. Catches them left out
    (vocabulary 100 short, a sentinel in a text read as characters) or numbered upwards."""
    d = tmp_path / "t5"
    _train(d, "spiece.model", model_type="unigram", vocab_size=55, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    key = hf_tokenizer_key(d)
    if config:
        (d / "tokenizer_config.json").write_text(json.dumps(config))
        assert hf_tokenizer_key(d) != key  # extra_ids changes the vocabulary: part of the data's cache key
    ours = tokenizer_from_hf_dir(d)
    theirs = transformers.T5Tokenizer.from_pretrained(str(d), split_special_tokens=True)
    sentinels = [t for t in theirs.all_special_tokens if t.startswith("<extra_id_")]
    assert len(sentinels) == n and ours.vocab_size == len(theirs) == 55 + n
    assert [ours.token_id(t) for t in sentinels] == theirs.convert_tokens_to_ids(sentinels)
    assert ours.decode([ours.token_id("<extra_id_0>")], skip_special=False) == "<extra_id_0>"


MARIAN_ONLY = ["▁yonder▁window", "ROMEO", ">>fr<<", ">>de<<"]  # vocab.json entries that are not source.spm pieces
MARIAN_TEXTS = [*TEXTS, ">>fr<< Juliet is the sun", ">>de<<sun", "yonder window, ROMEO", "</s>, <pad>, <unk>", " ▁lead", ""]


def _marian(tmp_path, lines=("a <b/c> d",)):
    """source.spm = target.spm, a Unigram as Marian's; vocab.json as Marian's: </s> 0, <unk> 1, the pieces in
    another order than the file's, entries that are not pieces, <pad> last."""
    d = tmp_path / "marian"
    _train(d, "source.spm", lines, model_type="unigram", vocab_size=50, unk_id=1, eos_id=0, bos_id=-1)
    shutil.copy(d / "source.spm", d / "target.spm")
    pieces = spm.SentencePieceProcessor(model_file=str(d / "source.spm")).id_to_piece(list(range(50)))
    itos = ["</s>", "<unk>", *reversed(pieces[2:]), *MARIAN_ONLY, "<pad>"]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos)}))
    return d, itos


def test_against_hf_marian_tokenizer(tmp_path):
    """Marian's source.spm + vocab.json give MarianTokenizer's ids: sentencepiece's segmentation, vocab.json's
    ids. Catches ids taken from the .spm file, a vocab.json entry that is no piece taken from a text ("</s>",
    "▁yonder▁window"), the language code not taken whole, and the file's normaliser, whitespace and "▁" prefix."""
    d, itos = _marian(tmp_path)
    ours = tokenizer_from_hf_dir(d)
    _agree(ours, transformers.MarianTokenizer.from_pretrained(str(d), split_special_tokens=True), MARIAN_TEXTS)
    assert ours.special_tokens == ["</s>", "<unk>", "<pad>"] and ours.vocab_size == len(itos)
    assert [ours.token_id(t) for t in ("</s>", "<pad>", ">>fr<<")] == [0, len(itos) - 1, itos.index(">>fr<<")]
    assert ours.decode(ours.encode("Juliet is the sun")) == "Juliet is the sun"
    key = hf_tokenizer_key(d)
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos[::-1])}))
    assert key.startswith("from2:") and hf_tokenizer_key(d) != key  # vocab.json's ids are part of the data's cache key


def test_against_hf_marian_directory_imports_and_exports(tmp_path):
    """A MarianMTModel directory as transformers saves it (source.spm, target.spm, vocab.json, no tokenizer.json):
    lab's logits on lab's ids are transformers', and the exported directory's tokenizer gives MarianTokenizer's
    ids (lab's sentence normalisation first, </s> after a source) on the tricky texts."""
    import torch

    from lab.data.sources.text import normalize_sentence
    from lab.hf.exporting import export
    from lab.hf.importing import load

    d, itos = _marian(tmp_path)
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=len(itos), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=128,
        pad_token_id=len(itos) - 1, eos_token_id=0, decoder_start_token_id=len(itos) - 1)).eval()
    hf.save_pretrained(str(d))
    imported = load(d)
    src = torch.tensor([imported.tokenizer.encode(CORPUS[:80]) + [0]])
    tgt = torch.tensor([[len(itos) - 1, *imported.tokenizer.encode("the sun")]])
    with torch.no_grad():
        torch.testing.assert_close(imported.model(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits,
                                   atol=1e-4, rtol=0)
    export(imported.model, imported.tokenizer, {}, tmp_path / "back")
    back = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "back"))
    theirs = transformers.MarianTokenizer.from_pretrained(str(d), split_special_tokens=True)
    for text in MARIAN_TEXTS:
        assert back(text).input_ids == theirs(normalize_sentence(text)).input_ids, repr(text)


def test_against_hf_marian_what_lab_reads_otherwise_is_said(tmp_path, caplog):
    """A source.spm that lacks characters of a vocab.json entry: one warning naming it; separate vocabularies and a
    piece vocab.json lacks: one error line each."""
    d, itos = _marian(tmp_path, lines=())  # "<", "/" and ">" unknown to sentencepiece
    with caplog.at_level(logging.WARNING, logger="lab"):
        tokenizer_from_hf_dir(d)
    assert "mix characters it knows with characters it does not" in caplog.text and "</s>" in caplog.text
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(itos[:-10] + ["<pad>"])}))
    with pytest.raises(LabError, match="pieces vocab.json lacks"):
        tokenizer_from_hf_dir(d)
    (d / "target_vocab.json").write_text("{}")
    with pytest.raises(LabError, match="separate source and target vocabularies"):
        tokenizer_from_hf_dir(d)


def test_a_llama_directory_with_tokenizer_model_imports(tmp_path):
    """A LlamaForCausalLM directory as Llama-2-era checkpoints ship it (tokenizer.model, no tokenizer.json):
    lab's import reads both, and its logits on lab's ids are transformers'."""
    import torch

    from lab.hf.importing import load

    d = tmp_path / "llama"
    _train(d, "tokenizer.model", model_type="bpe", vocab_size=330, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2)
    torch.manual_seed(0)
    theirs = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=330, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64)).eval()
    theirs.save_pretrained(str(d))
    imported = load(d)
    ids = torch.tensor([imported.tokenizer.encode(CORPUS[:60])])
    with torch.no_grad():
        assert torch.allclose(imported.model(ids), theirs(ids).logits, atol=1e-4)
