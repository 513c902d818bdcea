"""Streamed MLM preparation (lab.data.mlm SegmentShard / Segments over lab.data.shards): the segments are those
of a naive per-line pack of each whole document, every test segment is scored once over any number of ranks,
and a corpus that only loads Documents is streamed too."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import lab.data.shards as shards
import lab.data.sources.stream as stream
from lab.data.corpora import Documents, TextFiles
from lab.data.mlm import MLMDataModule
from lab.data.sources.text import normalize_sentence
from lab.errors import DataError

# long lines (truncated), blank and whitespace-only lines, \r\n, multi-byte and NFD characters, a paragraph per doc
TEXT = "".join(f"Line {i}:  caf\u00e9 u\u0308ber\tna\u00efve\r\n\n   \n{'word ' * (i % 40)}\u4e2d\u6587!\n" for i in range(300))


def datamodule(tmp_path: Path, corpora: list, **given) -> MLMDataModule:
    return MLMDataModule(corpora, **{"vocab_size": 200, "max_length": 16, "batch_size": 4, "eval_batches": 2,
                                     "cache_dir": str(tmp_path / "cache"), "tokenizer_sample_mb": None, **given})


def naive_segments(text: str, tok, max_length: int) -> tuple[list[list[int]], int]:
    """The packing rule written plainly over one whole document: each non-blank line encoded alone, cut to the
    room, lines appended to the current segment while they fit. -> (segments, lines cut)."""
    cls, sep, room = tok.token_id("[CLS]"), tok.token_id("[SEP]"), max_length - 2
    out, current, cut = [], [], 0
    for line in text.replace("\r\n", "\n").split("\n"):
        if not normalize_sentence(line):
            continue
        ids = tok.encode(normalize_sentence(line))
        cut += len(ids) > room
        ids = ids[:room]
        if current and len(current) + len(ids) > room:
            out.append([cls, *current, sep])
            current = []
        current = current + ids
    return out + ([[cls, *current, sep]] if current else []), cut


def test_segments_are_a_naive_pack_of_each_whole_split(tmp_path, monkeypatch):
    """Train / val / test parts of two files, read in chunks far smaller than a line: a line split across chunks
    or pieces, a document not flushed at its end, or an off-by-one offset in .idx changes the segments."""
    monkeypatch.setattr(stream, "CHUNK", 97)
    monkeypatch.setattr(shards, "PIECE", 64)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(TEXT.encode())
    b.write_bytes(TEXT[:3000].upper().encode())
    corpus = TextFiles([str(a), str(b)], val_fraction=0.2, test_fraction=0.1)
    dm = datamodule(tmp_path, [corpus])
    dm.setup()
    tok, plans = dm.tokenizer, corpus.files(tmp_path)  # each file's byte cuts (the plan, tested with the LM)
    cut = {}
    for k, split in enumerate(("train", "val", "test")):
        expected, cut[split] = [], 0
        for plan in plans:
            raw, bounds = plan.path.read_bytes(), (0, *plan.cuts, None)
            segs, n = naive_segments(raw[bounds[k] : bounds[k + 1]].decode(), tok, 16)
            expected, cut[split] = expected + segs, cut[split] + n
        got = [dm.datasets[split][i][1] for i in range(len(dm.datasets[split]))]
        assert got == expected
        assert dm.datasets[split].lengths.tolist() == [len(s) for s in expected]
        assert dm.report["manifest"][split]["truncated"] == cut[split] > 0
    assert dm.report["manifest"]["train"]["documents"] == 2  # one document per file's part


class SentenceCorpus:
    """A corpus that only loads Documents (as lab.data.classification.LabelledTextCorpus does)."""

    def __init__(self, train: list[str], val: list[str]):
        self.train, self.val = train, val

    def load(self, cache_dir) -> Documents:
        return Documents([(f"t{i}", t) for i, t in enumerate(self.train)], [(f"v{i}", t) for i, t in enumerate(self.val)],
                         fingerprint=str(hash((tuple(self.train), tuple(self.val))) & 0xFFFFFFFF))


def test_loaded_documents_stay_one_segment_each_and_the_test_pass_scores_every_segment_once(tmp_path):
    """Sentences of a Documents corpus are records: one segment each, in order (packing two into one segment
    would merge them). The test split (here the text file's test part) is scored once over W ranks: no segment
    twice, none left out, in any rank count; validation is the first eval_batches batches."""
    sentences = [f"sentence number {i} is {'very ' * (i % 5)}short" for i in range(40)]
    (tmp_path / "a.txt").write_text(TEXT)
    dm = datamodule(tmp_path, [SentenceCorpus(sentences, sentences[:9]), TextFiles([str(tmp_path / "a.txt")], test_fraction=0.3)])
    dm.setup()
    tok, train = dm.tokenizer, dm.datasets["train"]
    assert [train[i][1] for i in range(40)] == [[tok.token_id("[CLS]"), *tok.encode(s), tok.token_id("[SEP]")] for s in sentences]
    assert dm.test_split == "test"
    n = len(dm.datasets["test"])
    for world in (1, 2, 4):
        seen = []
        for rank in range(world):
            dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, accumulate_grad_batches=1)
            seen += [i for batch in dm.test_dataloader().batch_sampler for i in batch]
        assert sorted(seen) == list(range(n))
    dm.trainer = None
    assert len(dm.val_dataloader().batch_sampler) == 2
    inputs, targets = next(iter(dm.test_dataloader()))
    again, targets_again = next(iter(dm.test_dataloader()))
    assert (inputs == again).all() and (targets == targets_again).all()  # fixed masks: the same number every time


def test_an_empty_split_is_refused(tmp_path):
    dm = datamodule(tmp_path, [SentenceCorpus(["some training text here"], ["   "])])
    with pytest.raises(DataError, match="the MLM val text is empty"):
        dm.setup()


def test_a_prepared_corpus_is_found_without_reading_it_again(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text(TEXT)
    first = datamodule(tmp_path, [TextFiles([str(tmp_path / "a.txt")])])
    first.setup()
    def again(*args):
        raise RuntimeError("prepared twice")

    monkeypatch.setattr(shards, "_prepare_file", again)
    second = datamodule(tmp_path, [TextFiles([str(tmp_path / "a.txt")])])
    second.setup()
    assert np.array_equal(np.concatenate(second.datasets["val"].ids), np.concatenate(first.datasets["val"].ids))
    changed = datamodule(tmp_path, [TextFiles([str(tmp_path / "a.txt")])], max_length=12)
    with pytest.raises(RuntimeError, match="prepared twice"):  # another segment length: another preparation
        changed.setup()


def test_mlm_ranks_take_disjoint_batches_and_a_resumed_loader_continues_with_the_next(tmp_path):
    """Training batches of the memory-mapped segments: 2 ranks take disjoint halves of the single process's
    batch order, and a run resumed after 3 optimizer steps (accumulating 2) loads what the uninterrupted one
    would have loaded next."""
    from types import SimpleNamespace

    (tmp_path / "a.txt").write_text(TEXT)
    dm = datamodule(tmp_path, [TextFiles([str(tmp_path / "a.txt")])])
    dm.setup()

    def batches(world: int, rank: int, step: int = 0, accum: int = 1) -> list[list[int]]:
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, accumulate_grad_batches=accum, global_step=step)
        return [list(b) for b in dm.train_dataloader().batch_sampler]

    per_rank = [batches(2, r, accum=2) for r in range(2)]
    assert not {i for b in per_rank[0] for i in b} & {i for b in per_rank[1] for i in b}
    for r in range(2):
        assert batches(2, r, step=3, accum=2) == per_rank[r][6:]
    dm.trainer = None


def test_segments_in_many_shards_and_a_resume_inside_the_file_are_the_one_shard_segments(tmp_path, monkeypatch):
    """Shards of 1 kB of ids cut a file's segments anywhere (the line and the segment being filled go on in the
    next shard): the segments and counts are those of one shard per split; a preparation killed while writing
    its third shard resumes inside the file and publishes the uninterrupted build's bytes. (One cache, so one
    WordPiece tokenizer: `tokenizers`' WordPieceTrainer numbers the ## alphabet in a different order each time.)"""
    monkeypatch.setattr(stream, "CHUNK", 499)
    monkeypatch.setattr(shards, "PIECE", 128)
    (tmp_path / "a.txt").write_text(TEXT)
    corpus = [TextFiles([str(tmp_path / "a.txt")], val_fraction=0.2, test_fraction=0.2)]
    one, many = datamodule(tmp_path, corpus, shard_mb=1), datamodule(tmp_path, corpus, shard_mb=0.001)
    one.setup()
    many.setup()
    meta = [json.loads(Path(dm.report["prepared"], "manifest.json").read_text())["splits"] for dm in (one, many)]
    for split, segments in one.datasets.items():
        assert len(meta[0][split]["shards"]) == 1 and len(meta[1][split]["shards"]) >= 2
        assert [m.pop("shards") for m in (meta[0][split], meta[1][split])] and meta[0][split] == meta[1][split]
        assert [many.datasets[split][i] for i in range(len(segments))] == [segments[i] for i in range(len(segments))]

    real_cut = shards.FileShards.cut

    def killed_at_the_third(self, *args):
        if self.at["k"] == 2:
            raise KeyboardInterrupt
        real_cut(self, *args)

    monkeypatch.setattr(shards.FileShards, "cut", killed_at_the_third)
    prepared = Path(many.report["prepared"])
    uninterrupted = {p.name: p.read_bytes() for p in sorted(prepared.iterdir())}
    shutil.rmtree(prepared)  # prepared again, by a preparation that is killed, then resumed
    resumed = datamodule(tmp_path, corpus, shard_mb=0.001)
    with pytest.raises(KeyboardInterrupt):
        resumed.prepare_data()
    assert (prepared.parent / f".build-{prepared.name}" / "done" / "00000.partial.json").exists()
    monkeypatch.setattr(shards.FileShards, "cut", real_cut)
    resumed.setup()
    assert {p.name: p.read_bytes() for p in sorted(prepared.iterdir())} == uninterrupted
