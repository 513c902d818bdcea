"""Streamed LM preparation (lab.data.sources.stream, lab.data.shards): exact ids, every byte in one split, resumable,
cached by file stats, refusing what it cannot do; the full-pass test windows score every token once."""
from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import lab.data.shards as shards
import lab.data.sources.stream as stream
from lab.data.corpora import TextFiles
from lab.data.lm import EOS, LMDataModule, RandomWindows
from lab.data.shards import FullPassWindows, ShardedTokens
from lab.data.sources.reading import DataReport, FileFormat
from lab.data.tokenizers import train_tokenizer
from lab.errors import DataError

# whitespace of every kind where cuts fall, multi-byte characters, \r\n line ends, long runs without spaces
TEXT = "".join(f"Line {i}:  caf\u00e9 \u00fcber\tna\u00efve\r\n\n   {'x' * (i % 7)}{'word' * (i % 50)} \u4e2d\u6587!" for i in range(400))


def datamodule(tmp_path: Path, files: list[str], tokenizer: str = "bpe", **corpus) -> LMDataModule:
    return LMDataModule(TextFiles(files, **corpus), tokenizer=tokenizer, vocab_size=300, block_size=16, batch_size=4,
                        cache_dir=str(tmp_path / "cache"), tokenizer_sample_mb=None)


def small_chunks(monkeypatch, chunk: int = 97, piece: int = 64) -> None:
    """Chunks and pieces far smaller than the text, so every cut, carry and straddled character is exercised."""
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(shards, "PIECE", piece)


def test_shards_hold_exactly_the_ids_of_each_whole_document(tmp_path, monkeypatch):
    """Per split, the shard is each part's text encoded whole, then EOS: cutting at the wrong place (inside a
    word, between a space and its word) or losing a carried rest changes the ids."""
    small_chunks(monkeypatch, 997, 256)
    (tmp_path / "a.txt").write_bytes(TEXT.encode())
    dm = datamodule(tmp_path, [str(tmp_path / "a.txt")], val_fraction=0.2, test_fraction=0.1)
    dm.prepare_data()
    dm.setup()
    raw = TEXT.encode()
    cut1, cut2 = character_cut(raw, 0.7), character_cut(raw, 0.9)
    tok, eos = dm.tokenizer, dm.vocab["eos_id"]
    for tokens, part in ((dm.train_tokens, raw[:cut1]), (dm.val_tokens, raw[cut1:cut2]), (dm.test_tokens, raw[cut2:])):
        expected = tok.encode(part.decode().replace("\r\n", "\n")) + [eos]
        assert np.array_equal(tokens[0 : len(tokens)], np.array(expected))


def character_cut(raw: bytes, fraction: float) -> int:
    """Where lab's byte cut lands in characters: a character straddling it, or the \r of a \r\n, goes to the
    later part."""
    cut = int(len(raw) * fraction)
    while raw[cut] & 0xC0 == 0x80:
        cut += 1
    return cut - 1 if raw[cut - 1 : cut + 1] == b"\r\n" else cut


def test_every_character_lands_in_exactly_one_split_in_order(tmp_path, monkeypatch):
    """Character level: the three splits decoded and joined are the file's text, at any chunk size (a \\r\\n or
    a multi-byte character straddling a chunk or a cut is neither lost nor doubled)."""
    (tmp_path / "a.txt").write_bytes(TEXT.encode())
    for chunk in (5, 97, 1 << 20):
        small_chunks(monkeypatch, chunk)
        dm = datamodule(tmp_path / str(chunk), [str(tmp_path / "a.txt")], "char", val_fraction=0.3, test_fraction=0.2)
        dm.setup()
        eos = dm.vocab["eos_id"]
        parts = [dm.tokenizer.decode(t[0 : len(t)].tolist()) for t in (dm.train_tokens, dm.val_tokens, dm.test_tokens)]
        assert "".join(parts) == TEXT.replace("\r\n", "\n")
        assert [int(t[len(t) - 1 : len(t)][0]) for t in (dm.train_tokens, dm.val_tokens, dm.test_tokens)] == [eos] * 3


@pytest.mark.parametrize("suffix", ["gz", "zst"])
def test_compressed_file_gives_the_plain_files_tokens(tmp_path, monkeypatch, suffix):
    small_chunks(monkeypatch, 1000)
    (tmp_path / "plain").mkdir()
    (tmp_path / "gz").mkdir()
    (tmp_path / "plain" / "a.txt").write_text(TEXT)
    (tmp_path / "v.txt").write_text(TEXT[:2000].upper())
    packed_path = tmp_path / "gz" / f"a.txt.{suffix}"
    if suffix == "gz":
        with gzip.open(packed_path, "wt") as f:
            f.write(TEXT)
    else:
        zstandard = pytest.importorskip("zstandard")  # the lab[zstd] extra
        packed_path.write_bytes(zstandard.ZstdCompressor().compress(TEXT.encode()))
    val = [str(tmp_path / "v.txt")]
    plain = datamodule(tmp_path / "p", [str(tmp_path / "plain" / "a.txt")], "char", val_files=val)
    packed = datamodule(tmp_path / "z", [str(packed_path)], "char", val_files=val)
    plain.setup()
    packed.setup()
    assert np.array_equal(plain.train_tokens[0 : len(plain.train_tokens)], packed.train_tokens[0 : len(packed.train_tokens)])
    same = datamodule(tmp_path / "s", [str(packed_path)], "char", val_files=[str(tmp_path / "plain" / "a.txt")])
    with pytest.raises(DataError, match="nothing is left for validation"):  # the same text, compressed or not
        same.setup()
    # a compressed file far smaller than a chunk has its held-out tails too: cut at the same fractions of its text
    tails = datamodule(tmp_path / "t", [str(packed_path)], "char", val_fraction=0.2, test_fraction=0.1)
    tails.setup()
    parts = [tails.tokenizer.decode(np.asarray(t)[:-1].tolist()) for t in (tails.train_tokens, tails.val_tokens, tails.test_tokens)]
    assert "".join(parts) == TEXT.replace("\r\n", "\n")
    assert [round(len(x) / len("".join(parts)), 2) for x in parts] == [0.7, 0.2, 0.1]


def test_a_killed_preparation_continues_with_the_unfinished_file(tmp_path, monkeypatch):
    """The first file's shard and record survive a crash in the second; the rerun tokenizes only the second,
    and the result is the uninterrupted build's, byte for byte."""
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(TEXT[: 3000] + name * 50)
    files = [str(tmp_path / f"{n}.txt") for n in "abc"]
    whole = datamodule(tmp_path / "whole", files, "char")
    whole.setup()

    real, calls = shards._prepare_file, []

    def crash_on_second(index, *args):
        calls.append(index)
        if index == 1:
            raise KeyboardInterrupt  # killed mid-file
        return real(index, *args)

    monkeypatch.setattr(shards, "_prepare_file", crash_on_second)
    dm = datamodule(tmp_path / "resumed", files, "char")
    with pytest.raises(KeyboardInterrupt):
        dm.prepare_data()
    monkeypatch.setattr(shards, "_prepare_file", lambda index, *args: calls.append(index) or real(index, *args))
    dm.setup()
    assert calls == [0, 1, 1, 2]
    for split in ("train", "val"):
        ours, theirs = getattr(dm, f"{split}_tokens"), getattr(whole, f"{split}_tokens")
        assert np.array_equal(ours[0 : len(ours)], theirs[0 : len(theirs)])
    assert not list((tmp_path / "resumed" / "cache" / "lm").glob(".build-*"))  # published and gone


def test_a_prepared_corpus_is_found_by_file_stats_without_reading(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text(TEXT)
    datamodule(tmp_path, [str(tmp_path / "a.txt")], "char").setup()

    def no_reading(*args, **kwargs):
        raise AssertionError("a cached corpus was read again")

    monkeypatch.setattr(stream, "stream_text", no_reading)
    monkeypatch.setattr(shards, "tokenizer_sample", no_reading)
    datamodule(tmp_path, [str(tmp_path / "a.txt")], "char").setup()  # found by name, size and mtime
    os.utime(tmp_path / "a.txt", ns=(0, 0))  # another modification time: another corpus as far as the key goes
    with pytest.raises(AssertionError, match="read again"):
        datamodule(tmp_path, [str(tmp_path / "a.txt")], "char").setup()


def test_a_file_that_changes_while_prepared_is_refused_and_nothing_published(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text(TEXT)
    real = stream.stream_text

    def appending(path, *args, **kwargs):
        for k, item in enumerate(real(path, *args, **kwargs)):
            if k == 1:  # someone appends while lab reads
                with open(path, "a") as f:
                    f.write("more\n")
            yield item

    monkeypatch.setattr(stream, "stream_text", appending)
    monkeypatch.setattr(stream, "CHUNK", 1000)
    dm = datamodule(tmp_path, [str(tmp_path / "a.txt")], "char")
    with pytest.raises(DataError, match=r"a.txt changed while it was being prepared"):
        dm.prepare_data()
    assert not list((tmp_path / "cache" / "lm").glob("*/manifest.json"))


def test_a_full_disk_names_the_directory_and_space(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text(TEXT)

    def full(self, pieces):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards.Encoder, "__call__", full)
    with pytest.raises(DataError, match=r"no space left on the disk of \S*cache/lm/.build-\w+ .*GB more needed"):
        datamodule(tmp_path, [str(tmp_path / "a.txt")], "char").prepare_data()


def test_a_shard_size_that_is_not_positive_is_refused():
    assert shards.shard_bytes(0.5) == 500_000
    for bad in (0, -1):
        with pytest.raises(DataError, match=rf"data.shard_mb={bad} must be a positive number of MB"):
            LMDataModule(TextFiles(["a.txt"]), shard_mb=bad)


def test_vocabulary_too_large_for_the_shards_is_refused():
    assert shards.dtype_for(2**16) == np.uint16 and shards.dtype_for(2**16 + 1) == np.uint32
    with pytest.raises(DataError, match="does not fit the uint32 token shards"):
        shards.dtype_for(2**32)


def test_tokenizer_sample_is_the_first_share_of_every_training_file(tmp_path):
    for name in "ab":
        (tmp_path / f"{name}.txt").write_text(f"{name}{name} " * 1000)
    files = TextFiles([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]).files(tmp_path)
    sample = "".join(shards.tokenizer_sample(files, 600))
    assert sample == "aa " * 100 + "bb " * 100  # 300 bytes of each, not 600 of the first
    assert "".join(shards.tokenizer_sample(files, None)).count("a") == 2 * 900  # all of a's training part


def test_sharded_tokens_slice_across_shards_like_one_array(tmp_path):
    parts = [np.arange(0, 5), np.arange(5, 6), np.arange(6, 20)]
    for i, p in enumerate(parts):
        p.astype(np.uint16).tofile(tmp_path / f"s{i}.bin")
    view, whole = ShardedTokens(tmp_path, ["s0.bin", "s1.bin", "s2.bin"], "uint16"), np.arange(20)
    assert len(view) == 20
    for lo, hi in [(0, 20), (3, 7), (4, 6), (5, 6), (6, 19), (0, 1), (19, 20), (7, 7)]:
        assert np.array_equal(view[lo:hi], whole[lo:hi]), (lo, hi)
    assert [int(view[i]) for i in (0, 5, 6, 19, -1)] == [0, 5, 6, 19, 19] and np.array_equal(np.asarray(view), whole)


@pytest.mark.parametrize("n, block, stride", [(101, 16, 8), (17, 16, 8), (100, 16, 5), (64, 8, 8), (50, 10, 1)])
def test_full_pass_scores_every_target_once_with_its_context(n, block, stride):
    """Against a naive account: target t (token index 1..n-1) is scored exactly once, in a window holding the
    tokens just before it, with at least block - stride of them (or all there are)."""
    tokens = np.arange(n, dtype=np.uint16)
    ds = FullPassWindows(tokens, block, stride)
    scored = []
    for k in range(len(ds)):
        x, y = ds[k]
        assert torch.equal(x[1:], torch.as_tensor(tokens[int(x[0]) + 1 : int(x[0]) + len(x)].astype(np.int64)))
        for p in (y != FullPassWindows.IGNORE).nonzero().flatten().tolist():
            t = int(y[p])
            assert int(x[p]) == t - 1  # the target's own predecessor is the last input
            assert p + 1 >= min(t, block - stride + 1) or p + 1 == t  # its context
            scored.append(t)
    assert sorted(scored) == list(range(1, n))


def test_test_loader_gives_each_rank_its_own_windows(tmp_path):
    """Three ranks together score every test token once: none twice, none left out by uneven counts."""
    from types import SimpleNamespace

    (tmp_path / "a.txt").write_text(TEXT[:4000])
    dm = datamodule(tmp_path, [str(tmp_path / "a.txt")], "char", test_fraction=0.3)
    dm.batch_size = 3
    dm.setup()
    targets = []
    for rank in range(3):
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=3, accumulate_grad_batches=1)
        loader = dm.test_dataloader()
        starts = [loader.dataset.starts[k] for k in loader.sampler]  # the windows this rank loads, in order
        y = torch.cat([y for _, y in loader])
        targets += [starts[i] + p + 1 for i, p in (y != -100).nonzero().tolist()]  # token index of each target
    assert sorted(targets) == list(range(1, len(dm.test_tokens)))
    assert len(loader.dataset) % 3  # the ranks' shares differ, and none is dropped


def test_manifest_records_the_splits(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT[:3000])
    (tmp_path / "t.txt").write_text(TEXT[3000:6000])
    dm = datamodule(tmp_path, [str(tmp_path / "a.txt")], "char", test_files=[str(tmp_path / "t.txt")])
    dm.setup()
    manifest = json.loads((Path(dm.report["prepared"]) / "manifest.json").read_text())
    assert manifest["splits"]["test"]["names"] == [str(tmp_path / "t.txt")]
    assert manifest["splits"]["test"]["tokens"] == len(dm.test_tokens)
    assert dm.report["manifest"]["train"]["documents"] == 1 and dm.test_split == "test"
    tok = train_tokenizer("char", [TEXT], [EOS], 0)
    assert manifest["splits"]["test"]["tokens"] == len(tok.encode(TEXT[3000:6000].replace("\r\n", "\n"))) + 1


def test_stream_reports_a_bad_byte_at_its_offset_in_any_chunk(tmp_path):
    data = "é".encode() * 300 + b"\xff" + b"abc"
    (tmp_path / "a.txt").write_bytes(data)
    for chunk in (7, 64, 4096):
        with pytest.raises(DataError, match="not valid utf-8 at byte offset 600 "):
            list(stream.stream_text(tmp_path / "a.txt", FileFormat(), "train", DataReport(), (), chunk))


def test_task_test_loss_is_the_mean_over_every_scored_token():
    """The task weights each batch by its scored targets: its test loss is the plain mean of the per-token
    losses (computed here one window at a time), though windows score 8, 3 or fewer targets each."""
    import functools

    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from lab.models.gpt import GPT
    from lab.tasks.language_model import LanguageModelTask

    torch.manual_seed(0)
    model = GPT(vocab_size=20, d_model=16, n_layers=1, n_heads=2, max_seq_len=8).eval()
    task = LanguageModelTask(model, functools.partial(torch.optim.AdamW))
    windows = FullPassWindows(np.random.default_rng(0).integers(0, 20, 50).astype(np.uint16), 8, 3)
    with torch.no_grad():
        for i, batch in enumerate(DataLoader(windows, batch_size=2)):
            task.validation_step(batch, i)
        losses = []
        for k in range(len(windows)):
            x, y = windows[k]
            nll = F.cross_entropy(model(x[None])[0], y.clamp(min=0), reduction="none")
            losses += nll[y != FullPassWindows.IGNORE].tolist()
    assert len(losses) == 49
    assert float(task.val_loss.compute()) == pytest.approx(sum(losses) / len(losses), rel=1e-5)


def test_prepare_cli_prepares_once_and_a_too_small_corpus_is_one_error_line(tmp_path):
    from conftest import run_module

    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "tiny.txt").write_text("to be\n" * 20)
    args = ["+experiment=gpt_nano_char", "data=text_files", f"paths.cache_dir={tmp_path}/cache"]
    out = run_module("lab.prepare", [*args, f"data.corpus.train_files=[{tmp_path}/a.txt]"], tmp_path)
    assert out.returncode == 0, out.stderr
    prepared = Path(out.stdout.split("prepared LMDataModule in ")[1].split(";")[0])
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert set(manifest["splits"]) == {"train", "val", "test"} and prepared.parent == tmp_path / "cache" / "lm"
    bad = run_module("lab.prepare", [*args, f"data.corpus.train_files=[{tmp_path}/tiny.txt]"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "Traceback" not in bad.stderr
    assert "the val split" in bad.stderr and "too few for windows of data.block_size=64" in bad.stderr


def test_jsonl_records_are_documents_and_bad_lines_are_named_or_counted(tmp_path, monkeypatch):
    small_chunks(monkeypatch, 50)
    records = [f"record {i}: " + "text " * (i % 9) + "\u00e9" for i in range(40)]
    lines = [json.dumps({"text": r, "id": i}) for i, r in enumerate(records)]
    lines[7:7] = ["", '{"title": "no text field"}']  # a blank line (no record) and a bad one: file line 9
    (tmp_path / "a.jsonl").write_text("\n".join(lines))  # no final newline: the last record still counts
    (tmp_path / "v.jsonl").write_text(json.dumps({"text": "held out " * 10}) + "\n")
    corpus = dict(val_files=[str(tmp_path / "v.jsonl")])
    with pytest.raises(DataError, match=r"a.jsonl:9: not a JSON object with a string field 'text'.*bad_lines=skip"):
        datamodule(tmp_path / "strict", [str(tmp_path / "a.jsonl")], "char", **corpus).setup()
    dm = datamodule(tmp_path / "skip", [str(tmp_path / "a.jsonl")], "char", bad_lines="skip", **corpus)
    dm.setup()
    eos = dm.vocab["eos_id"]
    expected = [i for r in records for i in [*dm.tokenizer.encode(r), eos]]
    assert np.asarray(dm.train_tokens).tolist() == expected  # each record one document, in order
    assert dm.report["manifest"]["train"]["documents"] == 40
    assert [(e["count"], e["first"]) for e in dm.report["events"] if e["action"] == "dropped"] == [(1, ["a.jsonl:9"])]


def test_hugging_face_datasets_on_disk_are_read_row_by_row_and_held_out_at_rows(tmp_path, monkeypatch):
    """A save_to_disk directory and a .parquet file (written by `datasets` itself): each row's text is one
    document, exactly, in order; the held-out tails are cut at rows, so even a 10-row table has val and test
    (train ends at 0.65 of the bytes: rows 1-6; val at 0.87: rows 7-8; test: rows 9-10)."""
    import datasets  # a dev dependency: real files of the library (the reader needs only lab[hf-datasets])

    rows = [f"row {i}: " + "w\u00f6rd " * (i % 7) + "\n second line" for i in range(10)]
    table = datasets.Dataset.from_dict({"text": rows, "n": list(range(10))})
    table.save_to_disk(str(tmp_path / "saved"))
    table.to_parquet(str(tmp_path / "t.parquet"))
    for source in (tmp_path / "saved", tmp_path / "t.parquet"):
        dm = datamodule(tmp_path / f"c-{source.name}", [str(source)], "char", val_fraction=0.22, test_fraction=0.13)
        dm.setup()
        for tokens, part in ((dm.train_tokens, rows[:6]), (dm.val_tokens, rows[6:8]), (dm.test_tokens, rows[8:])):
            assert np.asarray(tokens).tolist() == [i for r in part for i in [*dm.tokenizer.encode(r), dm.vocab["eos_id"]]]

    datasets.DatasetDict({"train": table, "test": table}).save_to_disk(str(tmp_path / "dict"))
    refusals = {"dict": "holds several splits \\(train, test\\).*train_files=\\[.*dict/train\\]",
                "saved": "has no column 'body' \\(its columns: text, n\\).*data.corpus.text_field="}
    for name, message in refusals.items():
        with pytest.raises(DataError, match=message):
            datamodule(tmp_path / f"x{name}", [str(tmp_path / name)], "char", text_field="body").setup()
    with pytest.raises(DataError, match="column 'n' holds int64, not text"):
        datamodule(tmp_path / "xn", [str(tmp_path / "t.parquet")], "char", text_field="n").setup()
    datasets.Dataset.from_dict({"text": ["a text " * 9, None, "more text here " * 9] * 4}).to_parquet(str(tmp_path / "null.parquet"))
    with pytest.raises(DataError, match="row 2 has no 'text' value"):
        datamodule(tmp_path / "xnull", [str(tmp_path / "null.parquet")], "char").setup()
    skipped = datamodule(tmp_path / "xskip", [str(tmp_path / "null.parquet")], "char", bad_lines="skip")
    skipped.setup()
    assert [e["count"] for e in skipped.report["events"] if e["action"] == "dropped"] == [4]

    real_import = __import__
    monkeypatch.setattr("builtins.__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name.startswith("pyarrow") else real_import(name, *a, **k))
    with pytest.raises(DataError, match=r"install the reader: pip install 'lab\[hf-datasets\]'"):
        datamodule(tmp_path / "xmissing", [str(tmp_path / "t.parquet")], "char").setup()


def ranks_trainer(world: int, rank: int, accum: int, step: int = 0, max_steps: int = 5):
    """What the datamodules read of a Lightning trainer on rank `rank` of `world` (e.g. 2 nodes x 2 devices)."""
    from types import SimpleNamespace

    return SimpleNamespace(world_size=world, global_rank=rank, accumulate_grad_batches=accum, global_step=step,
                           max_steps=max_steps, distributed_sampler_kwargs={"num_replicas": world, "rank": rank})


def test_ranks_of_many_nodes_read_disjoint_windows_of_the_shards_and_a_resume_reads_the_rest(tmp_path):
    """Three files, so windows cross shard boundaries. Simulated 2 nodes x 2 devices with gradient accumulation:
    each optimizer step's windows over all ranks are the single process's (as token arrays, read from the
    memory-mapped shards), no window is read by two ranks, and a run resumed at step 2 reads exactly the
    uninterrupted run's windows of steps 2-4. The concatenated shards are the files' tokens in order."""
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(TEXT[:2500] + name * 40)
    dm = datamodule(tmp_path, [str(tmp_path / f"{n}.txt") for n in "abc"], "char", val_fraction=0.2)
    dm.batch_size = 8
    dm.setup()
    tokens = dm.train_tokens
    assert len(tokens.maps) == 3 and np.array_equal(np.asarray(tokens), np.concatenate([np.asarray(m) for m in tokens.maps]))

    def steps(world: int, accum: int, resumed_at: int = 0) -> list[list[tuple]]:
        """Per optimizer step: the windows (token tuples) all ranks load, each rank's list checked disjoint."""
        out = [[] for _ in range(5)]
        for rank in range(world):
            dm.trainer = ranks_trainer(world, rank, accum, step=resumed_at)
            micro = [x for x, _ in dm.train_dataloader()]
            assert len(micro) == (5 - resumed_at) * accum
            for i, x in enumerate(micro):
                out[resumed_at + i // accum] += [tuple(w.tolist()) for w in x]
        return out

    single = steps(1, 1)
    slices = set(map(tuple, np.lib.stride_tricks.sliding_window_view(np.asarray(tokens), 16).tolist()))
    assert all(w in slices for step in single for w in step)  # windows read across shard ends are contiguous text
    many = steps(4, 2)
    assert [sorted(s) for s in many] == [sorted(s) for s in single]  # the same windows, none read twice
    assert steps(4, 2, resumed_at=2)[2:] == many[2:]
    dm.trainer = None


def published(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def write_corpus(tmp_path: Path, kind: str) -> tuple[str, dict]:
    """One file of TEXT as plain text, gzip or JSON lines (a record per 7 lines) -> (its path, the corpus's settings)."""
    if kind == "jsonl":
        lines = TEXT.split("\n")
        records = ["\n".join(lines[i : i + 7]) for i in range(0, len(lines), 7)]
        (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in records))
        return str(tmp_path / "a.jsonl"), {}
    if kind == "gz":
        with gzip.open(tmp_path / "a.txt.gz", "wt") as f:
            f.write(TEXT)
        return str(tmp_path / "a.txt.gz"), {}
    (tmp_path / "a.txt").write_text(TEXT)
    return str(tmp_path / "a.txt"), {}


@pytest.mark.parametrize("kind", ["txt", "gz", "jsonl"])
def test_a_file_cut_into_shards_and_killed_inside_resumes_to_the_uninterrupted_bytes(tmp_path, monkeypatch, caplog, kind):
    """One file, shards of 4 kB of ids: every split has several, and joined they are the one-shard build's
    tokens with its counts. A preparation killed while writing its third train shard resumes after the second
    (it tokenizes only the rest: the text of at most one shard and a chunk is tokenized twice) and publishes
    exactly the bytes of the uninterrupted build: shards, manifest, tokenizer."""
    small_chunks(monkeypatch, 997, 256)
    path, corpus = write_corpus(tmp_path, kind)
    given = {"val_fraction": 0.2, "test_fraction": 0.1, **corpus}

    def build(name: str, shard_mb: float) -> LMDataModule:
        dm = datamodule(tmp_path / name, [path], "char", **given)
        dm.shard_bytes = shards.shard_bytes(shard_mb)
        dm.setup()
        return dm

    whole, cut = build("whole", 1), build("cut", 0.004)
    for split, facts in whole.meta["splits"].items():
        ours = cut.meta["splits"][split]
        assert len(facts["shards"]) == 1 and len(ours["shards"]) >= 3
        assert {k: v for k, v in ours.items() if k != "shards"} == {k: v for k, v in facts.items() if k != "shards"}
        joined = b"".join((cut._dir / s).read_bytes() for s in ours["shards"])
        assert joined == (whole._dir / facts["shards"][0]).read_bytes()
        assert max((cut._dir / s).stat().st_size for s in ours["shards"]) < 4000 + 2 * 997  # a shard and a chunk

    tokenized = []
    real_encode, real_cut = shards.Encoder.__call__, shards.FileShards.cut
    monkeypatch.setattr(shards.Encoder, "__call__", lambda self, p: tokenized.append(len(ids := real_encode(self, p))) or ids)

    def killed_at_the_third(self, *args):
        if self.at["k"] == 2:
            raise KeyboardInterrupt  # the third shard is half written
        real_cut(self, *args)

    monkeypatch.setattr(shards.FileShards, "cut", killed_at_the_third)
    dm = datamodule(tmp_path / "resumed", [path], "char", **given)
    dm.shard_bytes = shards.shard_bytes(0.004)
    with pytest.raises(KeyboardInterrupt):
        dm.prepare_data()
    before, tokenized[:] = sum(tokenized), []
    monkeypatch.setattr(shards.FileShards, "cut", real_cut)
    with caplog.at_level("INFO", logger="lab"):
        dm.setup()
    eos = dm.vocab["eos_id"]
    total = sum(f["tokens"] - f["documents"] for f in whole.meta["splits"].values())  # the encoder's ids (not EOS)
    first_two = sum(int((np.fromfile(cut._dir / s, np.uint16) != eos).sum()) for s in cut.meta["splits"]["train"]["shards"][:2])
    assert sum(tokenized) == total - first_two  # the resumed run tokenized only what the two shards do not hold
    assert 2000 <= before + sum(tokenized) - total <= 2000 + 997  # what the kill cost: the third shard's ids
    assert "after 2 of its shards: re-reading its first" in caplog.text
    assert published(dm._dir) == published(cut._dir)


def test_training_and_full_pass_windows_over_many_shards_are_those_over_one(tmp_path, monkeypatch):
    """The same corpus in one shard per split and in shards of 2 kB of ids: the training windows (random starts)
    and the test pass's windows are equal, tensor for tensor, and many of them cross a shard boundary (a
    reader that started each shard's windows afresh, or dropped a token at a boundary, would differ there)."""
    small_chunks(monkeypatch, 499, 128)  # shards are cut at the end of a chunk of the reading
    (tmp_path / "a.txt").write_text(TEXT)
    built = []
    for name, shard_mb in (("one", 1), ("many", 0.002)):
        dm = datamodule(tmp_path / name, [str(tmp_path / "a.txt")], "char", val_fraction=0.2, test_fraction=0.1)
        dm.shard_bytes, dm.eval_stride = shards.shard_bytes(shard_mb), 5
        dm.setup()
        built.append(dm)
    one, many = built
    assert len(many.train_tokens.maps) > 10 and len(many.test_tokens.maps) > 1 and len(one.train_tokens.maps) == 1
    for loader in ("train_dataloader", "val_dataloader", "test_dataloader"):
        ours, theirs = list(getattr(many, loader)()), list(getattr(one, loader)())
        assert len(ours) == len(theirs) > 0
        for (x, y), (x1, y1) in zip(ours, theirs):
            assert torch.equal(x, x1) and torch.equal(y, y1)
    starts, T = many.train_tokens.starts[1:-1], many.block_size
    windows = RandomWindows(many.train_tokens, T, many.seed, len(many.train_dataloader().dataset))
    crossing = sum(any(s < b <= s + T for b in starts) for s in
                   (int(np.random.default_rng((many.seed, i)).integers(0, len(many.train_tokens) - T - 1)) for i in range(len(windows))))
    assert crossing >= 3
