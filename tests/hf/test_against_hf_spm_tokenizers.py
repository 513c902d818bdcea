"""Directories that ship a sentencepiece model instead of tokenizer.json: lab reads them with the ids transformers'
own tokenizer gives, on the tricky-text matrix, with tiny sentencepiece models trained here."""
import io

import pytest
from test_against_hf_pipelines import CORPUS, TRICKY

from lab.data.tokenizers import hf_tokenizer_key, tokenizer_from_hf_dir
from lab.errors import LabError
from lab.hf.importing import read_dir

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

TEXTS = [*TRICKY, "<s> <unk> <pad> ▁lead", CORPUS[:300]]


def _train(directory, name: str, **settings) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS.splitlines()), model_writer=model, minloglevel=2,
                                   character_coverage=1.0, **settings)
    directory.mkdir()
    (directory / name).write_bytes(model.getvalue())


def _agree(ours, theirs) -> None:
    for text in TEXTS:  # split_special_tokens: lab reads "</s>" in a text as characters
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
    _agree(ours, transformers.T5Tokenizer.from_pretrained(str(d), split_special_tokens=True))
    assert ours.special_tokens == ["<pad>", "</s>", "<unk>"]


def test_against_hf_marian_tokenizer(tmp_path):
    """Marian's source.spm/target.spm + vocab.json are not read yet (sentencepiece never matches a control piece
    such as "</s>" in text, a `tokenizers` Unigram over vocab.json does): one error line names them and the fix,
    where a directory with a sentencepiece tokenizer.model passes the same check."""
    d = tmp_path / "marian"
    _train(d, "source.spm", model_type="unigram", vocab_size=50, unk_id=1, eos_id=0, bos_id=-1)
    for name in ("config.json", "model.safetensors", "vocab.json"):
        (d / name).write_text("{}")
    with pytest.raises(LabError, match="lacks tokenizer.json; .* lab does not read Marian's source.spm/target.spm "
                                       r"\+ vocab.json: give a tokenizer.json"):
        read_dir(d)
    (d / "source.spm").rename(d / "tokenizer.model")
    assert read_dir(d) == (d, {})


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
