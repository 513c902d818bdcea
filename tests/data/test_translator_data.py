"""Own pairs at scale: the splits are token ids in memmaps, written chunk by chunk; training holds no text."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lab.data.parallel import ParallelTextDataModule, write_split
from lab.data.sources.reading import DataReport

WORDS = ["haus", "baum", "katze", "hund", "wasser", "feuer", "stadt", "land", "fluss", "berg", "weg", "zeit", "tag", "nacht", "licht"]


def write_generated(path, n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            words = rng.choices(WORDS, k=rng.randint(2, 9))
            pair = (f"{' '.join(words)} {i}.", f"the {' '.join(w[::-1] for w in words)} {i}.")
            pairs.append(pair)
            f.write(f"{pair[0]}\t{pair[1]}\n")
    return pairs


def test_20k_generated_pairs_train_from_memmapped_ids_equal_to_the_tokenizers(tmp_path):
    pairs = write_generated(tmp_path / "pairs.tsv", 20_000)
    dm = ParallelTextDataModule(str(tmp_path / "pairs.tsv"), cache_dir=str(tmp_path / "cache"), vocab_size=500,
                                valid_size=500, test_size=500, max_tokens=64)
    dm.prepare_data()
    dm.setup("fit")
    train = dm.datasets["train"]
    assert isinstance(train.source, np.memmap) and isinstance(train.target, np.memmap)
    assert train.texts is None  # training holds ids only; its text stays on disk
    assert len(train) == 19_000 and set(train.pairs) | set(dm.datasets["valid"].pairs) | set(dm.datasets["test"].pairs) == set(pairs)
    texts = train.pairs
    rows = random.Random(1).sample(range(len(train)), 300)
    for i in rows:  # every sampled pair's ids are the tokenizer's, with eos / bos + eos
        _, src, tgt, index = train[i]
        assert index == i
        assert src.tolist() == dm.tokenizer.encode(texts[i][0]) + [2]
        assert tgt.tolist() == [1] + dm.tokenizer.encode(texts[i][1]) + [2]
    assert dm.datasets["valid"][7][0] == dm.datasets["valid"].pairs[7]  # held-out items carry their text for BLEU
    facts = json.loads(next((tmp_path / "cache" / "parallel").glob("*/meta.json")).read_text())["splits"]["train"]
    assert facts["source_tokens"] == len(train.source) and facts["pairs"] == len(train)


def test_chunked_tokenisation_writes_what_one_chunk_writes(tmp_path):
    """Chunk boundaries (7 pairs, the last chunk short) change nothing: ids, offsets, texts, the report."""
    from lab.data.tokenizers import train_tokenizer

    pairs = [(s, t, f"f:{i}") for i, (s, t) in enumerate(write_generated(tmp_path / "p.tsv", 100))]
    pairs[50] = (" ".join(["haus"] * 40) + ".", "long.", "f:50")  # dropped for being too long
    tok = train_tokenizer("bpe", [x for s, t, _ in pairs for x in (s, t)], ["<pad>", "<s>", "</s>"], 300)
    written = {}
    for chunk in (7, 10_000):
        d = tmp_path / f"c{chunk}"
        d.mkdir()
        report = DataReport()
        facts = write_split(d, "train", pairs, tok, 32, report, chunk=chunk)
        written[chunk] = (facts, report.to_dict(), *(d.joinpath(f"train.{x}").read_bytes() for x in
                                                     ("source.bin", "target.bin", "offsets.npy", "texts.jsonl")))
    assert written[7] == written[10_000]
    long = [w for s, t, w in pairs if len(tok.encode(s)) + 1 > 32 or len(tok.encode(t)) + 2 > 33]
    assert "f:50" in long and written[7][0]["dropped_long"] == len(long) and written[7][0]["pairs"] == 100 - len(long)


def test_a_warm_cache_is_found_by_fingerprint_without_reading_the_pairs(tmp_path, monkeypatch):
    from lab.data.parallel import ParallelFiles

    write_generated(tmp_path / "pairs.tsv", 300)
    settings = dict(cache_dir=str(tmp_path / "cache"), vocab_size=300, valid_size=20, test_size=20)
    first = ParallelTextDataModule(str(tmp_path / "pairs.tsv"), **settings)
    first.prepare_data()
    first.setup("fit")

    def no_reading(*_):
        raise AssertionError("the pairs were read again")

    monkeypatch.setattr(ParallelFiles, "load", no_reading)
    again = ParallelTextDataModule(str(tmp_path / "pairs.tsv"), **settings)
    again.prepare_data()
    again.setup("fit")
    assert again.datasets["test"].pairs == first.datasets["test"].pairs and again.report == first.report
    with open(tmp_path / "pairs.tsv", "a") as f:  # other bytes: another cache entry, so the file is read
        f.write("noch ein satz.\tone more sentence.\n")
    changed = ParallelTextDataModule(str(tmp_path / "pairs.tsv"), **settings)
    with pytest.raises(AssertionError, match="read again"):
        changed.prepare_data()


def test_a_failed_split_write_leaves_no_build_folder_and_says_why(tmp_path, monkeypatch):
    """prepare_data writes into a temporary .build-* folder renamed into place when complete; a failure while
    writing (every training pair too long: a DataError; the disk full: an OSError) removes it and lets the
    error through unchanged. Catches: the temporary folder left in the cache, beside a later good build."""
    import lab.data.parallel as parallel
    from lab.errors import DataError

    write_generated(tmp_path / "pairs.tsv", 60)
    settings = dict(cache_dir=str(tmp_path / "cache"), vocab_size=120, valid_size=5, test_size=5)
    with pytest.raises(DataError, match="nothing is left to train on: all 50 training pairs are longer than data.max_tokens=2"):
        ParallelTextDataModule(str(tmp_path / "pairs.tsv"), max_tokens=2, **settings).prepare_data()
    assert list((tmp_path / "cache").rglob(".build-*")) == []

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parallel, "write_split", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        ParallelTextDataModule(str(tmp_path / "pairs.tsv"), max_tokens=64, **settings).prepare_data()
    assert list((tmp_path / "cache").rglob(".build-*")) == [] and list((tmp_path / "cache").rglob("meta.json")) == []
    monkeypatch.undo()
    dm = ParallelTextDataModule(str(tmp_path / "pairs.tsv"), max_tokens=64, **settings)
    dm.prepare_data()  # a build that succeeds is published, not removed with the temporary name
    assert len(list((tmp_path / "cache").rglob("meta.json"))) == 1 and list((tmp_path / "cache").rglob(".build-*")) == []
