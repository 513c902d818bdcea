"""A corpus tokenized into token shards on disk, in memory bounded by the chunk size, never the corpus's.

Preparation streams every file once (lab.data.sources.stream), cuts the decoded text where pre-tokenization splits
anyway (so the ids are exactly those of the whole text), tokenizes the pieces with `tokenizers`' batch
encoding (all cores), and appends the ids to shards of about data.shard_mb MB each, per file and split:
`<split>-<file index>-<shard index>.bin`, uint16 (or uint32 for a vocabulary of 65,536 or more), documents
separated by the end-of-text id (a document may go on in the next shard: readers see a split's shards as one
sequence).

It happens in a build directory named by the corpus key, under a lock: a shard is written under a temporary
name and renamed when it is full (at the end of a chunk of the reading), then `done/<file>.partial.json` records
where the reading stopped (the chunk index, the text carried over, the document in progress), so a killed
preparation re-reads the file up to there without tokenizing it and goes on with the next shard: what a kill
costs is the shard being written (a half-written shard is never trusted). When a file is done, `done/<file>.json`
records its counts; when every file is done, manifest.json is written and the directory renamed to its final
name (the marker every reader checks). Training memory-maps the shards (ShardedTokens): nothing of the corpus
is held in memory.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from lab.data.cache import publish_dir, published
from lab.data.corpora import FilePlan, held_out_lines
from lab.data.sources.reading import DataReport, drop_overlap
from lab.data.sources.stream import Stat, documents_of, safe_cuts
from lab.data.sources.text import normalize_document
from lab.errors import DataError

log = logging.getLogger("lab")
PIECE = 1 << 16  # characters per piece handed to the batch encoder (pieces of a chunk are encoded in parallel)
MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")


def dtype_for(vocab_size: int) -> np.dtype:
    if vocab_size >= 2**32:
        raise DataError(f"a vocabulary of {vocab_size} tokens does not fit the uint32 token shards; choose "
                        "data.vocab_size below 4294967296")
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def shard_bytes(shard_mb: float) -> int:
    """data.shard_mb -> bytes of ids per shard: how much a killed preparation re-does at most (one shard per
    split of the file being read), and the unit the readers memory-map."""
    if not shard_mb > 0:
        raise DataError(f"data.shard_mb={shard_mb} must be a positive number of MB (e.g. data.shard_mb=256)")
    return max(1, int(shard_mb * 1e6))


def tokenizer_sample(files: list[FilePlan], budget: int | None) -> Iterator[str]:
    """The text a BPE / WordPiece tokenizer is trained on: the first budget / len(train files) bytes of every
    file's training parts (all of them when budget is None or the training text is smaller), in file order,
    cut at safe places. Deterministic, so the tokenizer of a corpus is the same on every machine."""
    train = [f for f in files if "train" in f.splits]
    share = None if budget is None else max(1, budget // max(1, len(train)))
    for f in train:
        cuts, keep = f.sample_parts(share)
        carry = ""
        for part, text in documents_of(f, DataReport(), cuts):
            if not any(keep[part:]):
                break
            if not keep[part]:
                pieces, carry = [carry], ""  # a held-out stretch ends the training text before it
            else:
                pieces, carry = safe_cuts(carry + text, PIECE) if text is not None else ([carry], "")
            yield from (normalize_document(p) for p in pieces if p)
        if carry:
            yield normalize_document(carry)


class Progress:
    """One log line every `every` seconds: MB read of the files' total size, MB/s, tokens, ETA."""

    def __init__(self, total_bytes: int, every: float = 10.0):
        self.total, self.every, self.done, self.files_done, self.tokens = total_bytes, every, 0, 0, 0
        self.start = self.last = time.monotonic()

    def add(self, nbytes: int, tokens: int) -> None:
        self.done, self.tokens = self.done + nbytes, self.tokens + tokens
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            eta = (self.total - self.done) / rate if rate else float("inf")
            log.info("data: prepared %.1f of %.1f MB (%.0f%%), %.1f MB/s, %s tokens, ETA %s", self.done / 1e6,
                     self.total / 1e6, 100 * self.done / max(self.total, 1), rate / 1e6, f"{self.tokens:,}",
                     time.strftime("%H:%M:%S", time.gmtime(eta)) if eta < 1e6 else "?")

    def file_done(self, size: int) -> None:
        """Within a file progress counts characters read; a finished file counts its bytes on disk (compressed)."""
        self.files_done += size
        self.done = self.files_done

    def finish(self) -> None:
        seconds = time.monotonic() - self.start
        log.info("data: prepared %.1f MB into %s tokens in %.1f s (%.1f MB/s)", self.done / 1e6, f"{self.tokens:,}",
                 seconds, self.done / 1e6 / max(seconds, 1e-9))


class Encoder:
    """Pieces of text -> one array of ids: the batch encoder of `tokenizers` (parallel over the pieces) or,
    for the character tokenizer, one encode per piece."""

    def __init__(self, tok, dtype: np.dtype):
        self.tok, self.dtype = tok, dtype
        self.batch = tok.encode_batch

    def __call__(self, pieces: list[str]) -> np.ndarray:
        lists = self.batch(pieces) if pieces else []
        return np.fromiter(chain.from_iterable(lists), self.dtype, count=sum(map(len, lists)))


def no_space(directory: Path, needed: int) -> DataError:
    return DataError(f"no space left on the disk of {directory} while writing token shards (about {needed / 1e9:.1f} GB "
                     f"more needed); free space there or set paths.cache_dir= to a disk with room, then run again "
                     "(finished shards are kept)")


class Shard:
    """One split's shard of a file being written: its files (one per suffix) under temporary names until
    publish(), so a killed preparation leaves nothing a later run would trust. Subclasses say what a document
    becomes: write(pieces) takes the next pieces of the current document's text, end_document() ends it;
    state() is what of a document in progress goes on in the next shard of the split (restore() takes it), as
    JSON, so the shards concatenated are what one shard would hold."""

    suffixes = (".bin",)

    def __init__(self, stem: Path, progress: Progress):
        self.stem, self.progress = stem, progress
        self.files = {s: open(self._tmp(s), "wb") for s in self.suffixes}  # noqa: SIM115 - closed by close()
        self.f = self.files[".bin"]
        self.facts = {"tokens": 0, "bytes": 0, "characters": 0, "documents": 0}

    def _tmp(self, suffix: str) -> Path:
        return self.stem.with_name(f".{self.stem.name}{suffix}.tmp")

    def sync(self) -> None:
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def size(self) -> int:
        """Bytes of ids written so far."""
        return self.f.tell()

    def can_cut(self) -> bool:
        """Whether the next shard may take over here."""
        return True

    def state(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        pass

    def publish(self) -> str | None:
        """Give the closed files their names -> the .bin's name (a shard without ids is removed: None)."""
        empty = self._tmp(".bin").stat().st_size == 0
        for s in self.suffixes:
            if empty:
                self._tmp(s).unlink()
            else:
                self._tmp(s).rename(self.stem.with_name(self.stem.name + s))
        return None if empty else self.stem.name + ".bin"


class TokenShard(Shard):
    """The LM's shard: the ids of the documents, each followed by the end-of-text id."""

    def __init__(self, stem: Path, tok, dtype: np.dtype, progress: Progress, eos_token: str):
        super().__init__(stem, progress)
        self.encode, self.eos = Encoder(tok, dtype), tok.token_id(eos_token)
        self._begin()

    def _begin(self) -> None:
        self.start, self.doc, self.blank = self.f.tell(), {"tokens": 0, "bytes": 0, "characters": 0}, True

    def write(self, pieces: list[str]) -> None:
        ids = self.encode(pieces)
        ids.tofile(self.f)
        self.doc["tokens"] += len(ids)
        self.doc["characters"] += sum(map(len, pieces))
        self.doc["bytes"] += sum(len(p.encode("utf-8")) for p in pieces)
        self.blank = self.blank and not any(p.strip() for p in pieces)
        self.progress.add(0, len(ids))

    def can_cut(self) -> bool:  # not inside a document that is whitespace so far (it may yet be removed)
        return not self.blank or self.f.tell() == self.start

    def state(self) -> dict:
        return {"doc": self.doc, "blank": self.blank}

    def restore(self, state: dict) -> None:
        self.doc, self.blank = dict(state["doc"]), state["blank"]

    def end_document(self) -> None:
        if self.blank:  # whitespace only: no document (an empty file is skipped, and said)
            self.f.seek(self.start)
            self.f.truncate()
        else:
            np.asarray([self.eos], self.encode.dtype).tofile(self.f)  # so no window pretends two documents are one text
            for k in ("tokens", "bytes"):
                self.doc[k] += 1
            for k, v in self.doc.items():
                self.facts[k] += v
            self.facts["documents"] += 1
            self.progress.add(0, 1)
        self._begin()


NewShard = Callable[[Path, object, np.dtype, Progress], Shard]  # (stem, tokenizer, dtype, progress) -> a shard


class FileShards:
    """One file's shards being written, one open per split it feeds, and its resume record: `cut()` publishes
    the open shards, records where the reading is (`done/<file>.partial.json`) and opens the next ones, which
    take over the documents in progress."""

    def __init__(self, index: int, plan: FilePlan, stat: Stat, new_shard: NewShard, tok, dtype: np.dtype,
                 build: Path, progress: Progress):
        self.stat = stat  # the file as it was when its reading began: checked before any shard is published
        self.make = lambda k, s: new_shard(build / f"{s}-{index:05d}-{k:05d}", tok, dtype, progress)
        self.record = build / "done" / f"{index:05d}.partial.json"
        splits = dict.fromkeys(plan.splits)
        # where the reading goes on: the index of the next item of documents_of, the part, the text carried
        self.at = {"next": 0, "part": 0, "carry": "", "characters": 0, "k": 0,
                   "shards": {s: [] for s in splits}, "facts": {s: {} for s in splits}, "open": {}}
        with contextlib.suppress(FileNotFoundError, ValueError):
            self.at = json.loads(self.record.read_text())
        self.outs = self._open()

    def _open(self) -> dict[str, Shard]:
        outs = {}
        for s in self.at["shards"]:
            outs[s] = self.make(self.at["k"], s)
            if s in self.at["open"]:
                outs[s].restore(self.at["open"][s])
        return outs

    def _close(self) -> None:
        """Sync, close and publish the open shards; their counts go to the file's."""
        for shard in self.outs.values():
            shard.sync()
            shard.close()
        self.stat.check_unchanged()
        for s, shard in self.outs.items():
            name = shard.publish()
            self.at["shards"][s] += [name] if name else []
            for key, v in shard.facts.items():
                self.at["facts"][s][key] = self.at["facts"][s].get(key, 0) + v

    def cut(self, next_item: int, part: int, carry: str, characters: int) -> None:
        """The open shards are done: publish them and record that the reading goes on at item next_item."""
        carried = {s: shard.state() for s, shard in self.outs.items()}
        self._close()
        self.at.update(next=next_item, part=part, carry=carry, characters=characters, k=self.at["k"] + 1, open=carried)
        tmp = self.record.with_name(f".{self.record.name}.tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(self.at))
            f.flush()
            os.fsync(f.fileno())
        directory = os.open(self.record.parent.parent, os.O_RDONLY)  # the shards' new names reach the disk first
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        tmp.rename(self.record)
        self.outs = self._open()

    def finish(self) -> tuple[dict[str, list[str]], dict[str, dict]]:
        """The file is read: publish its last shards -> (per split: its shards' names, its counts)."""
        self._close()
        return {s: self.at["shards"][s] for s in self.outs}, {s: self.at["facts"][s] for s in self.outs}

    def close(self) -> None:
        for shard in self.outs.values():
            shard.close()


def _prepare_file(index: int, plan: FilePlan, new_shard: NewShard, tok, dtype: np.dtype, build: Path,
                  progress: Progress, shard_bytes: int) -> dict:
    """Stream one file into its shards (per split it feeds, a new one after about shard_bytes of ids) -> its
    done record. A file with a resume record is read again from its start without tokenizing (decompressing,
    decoding, parsing: what rebuilds the reading's state and report exactly) up to the recorded item, then
    tokenized from there."""
    stat, report = Stat.of(plan.path), DataReport()
    text_hash = hashlib.sha256()
    out = None
    try:
        out = FileShards(index, plan, stat, new_shard, tok, dtype, build, progress)
        skip, current, carry, read = out.at["next"], out.at["part"], out.at["carry"], out.at["characters"]
        if skip:
            log.info("data: resuming %s after %d of its shards: re-reading its first %s characters without "
                     "tokenizing them", plan.path, sum(map(len, out.at["shards"].values())), f"{read:,}")
            finished = [n for names in out.at["shards"].values() for n in names]  # their ids count as this file's
            progress.add(0, sum((build / n).stat().st_size for n in finished) // dtype.itemsize)
        began = time.monotonic()
        for item, (part, text) in enumerate(documents_of(plan, report, plan.cuts)):
            if text is not None:
                text_hash.update(text.encode("utf-8", "surrogatepass"))
            if item < skip:
                continue
            if item == skip and skip:
                log.info("data: re-read %s up to its last finished shard in %.1f s; tokenizing on from there",
                         plan.path, time.monotonic() - began)
            shard = out.outs[plan.splits[current]]
            if shard.size() >= shard_bytes and shard.can_cut():
                out.cut(item, current, carry, read)
            if part != current or text is None:  # a document ends: the file's part, or a record
                out.outs[plan.splits[current]].write([normalize_document(carry)] if carry else [])
                out.outs[plan.splits[current]].end_document()
                current, carry = part, ""
                if text is None:
                    continue
            pieces, carry = safe_cuts(carry + text, PIECE)
            out.outs[plan.splits[current]].write([normalize_document(p) for p in pieces])
            read += len(text)
            progress.add(len(text), 0)
        out.outs[plan.splits[current]].write([normalize_document(carry)] if carry else [])
        out.outs[plan.splits[current]].end_document()
        names, facts = out.finish()
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise no_space(build, Stat.of(plan.path).size * 2 * dtype.itemsize) from e
        raise DataError(f"cannot prepare {plan.path}: {e}") from e
    finally:
        if out is not None:
            out.close()
    record = {"name": plan.name, "field": plan.field, "splits": facts, "shards": names}
    if not any(s.get("documents") for s in facts.values()):
        report.note("skipped", plan.field, "empty files", str(plan.path))
    record["hash"], record["report"] = text_hash.hexdigest(), report.to_dict()
    return record


def say_before_caps(out: Path, old: Path) -> None:
    """One line when the prepared directory `out` (a plan with held-out caps) is not there yet but `old`, the
    directory of the plan the files had before the caps (StreamedCorpus.before_caps), is: that cache is not used."""
    if old != out and not (out / MANIFEST).exists() and (old / MANIFEST).exists():
        log.info("data: the held-out splits are capped now (data.corpus.val_max_mb / test_max_mb), so the cache %s "
                 "(held-out file tails) is not used: preparing once with the caps (null: no cap, that cache)", old)


def say_held_out(held_out: dict, splits: dict | None, where: str = "data.corpus") -> None:
    """Log lab.data.corpora.held_out_lines for a corpus's held_out and the prepared splits (the manifest's)."""
    said, warnings = held_out_lines(held_out, splits, where)
    for line in said:
        log.info("%s", line)
    for line in warnings:
        log.warning("%s", line)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One preparer per corpus at a time (DDP ranks, sweep jobs, a second lab.prepare): the others wait here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        published.append(path)  # this process made it: a refused lab.prepare takes it back with the entry
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prepare(out: Path, files: list[FilePlan], make_tokenizer: Callable[[Path], object], new_shard: NewShard,
            settings: dict, shard_bytes: int) -> None:
    """Build `out` (the published directory: manifest.json, tokenizer.json, shards) unless it exists.
    make_tokenizer(path) trains (or loads) the tokenizer cached at path; new_shard makes each file's shards
    (TokenShard for the LM, lab.data.mlm's SegmentShard for the MLM), a new one every shard_bytes of ids."""
    if (out / MANIFEST).exists():
        return
    with locked(out.parent / f".{out.name}.lock"):
        if (out / MANIFEST).exists():  # another process finished it while this one waited
            return
        build = out.parent / f".build-{out.name}"
        if not build.exists():  # new (not an interrupted build resumed): a refused lab.prepare takes it back
            published.append(build)
        (build / "done").mkdir(parents=True, exist_ok=True)
        tok = make_tokenizer(build / "tokenizer.json")
        dtype = dtype_for(tok.vocab_size)
        records = {}
        for i in range(len(files)):
            with contextlib.suppress(FileNotFoundError, ValueError):
                records[i] = json.loads((build / "done" / f"{i:05d}.json").read_text())
        if records:
            log.info("data: resuming the preparation in %s: %d of %d files are done", build, len(records), len(files))
        todo = [i for i in range(len(files)) if i not in records]
        progress = Progress(sum(Stat.of(files[i].path).size for i in todo))
        for i in todo:
            records[i] = _prepare_file(i, files[i], new_shard, tok, dtype, build, progress, shard_bytes)
            progress.file_done(Stat.of(files[i].path).size)
            done = build / "done" / f".{i:05d}.json.tmp"
            done.write_text(json.dumps(records[i]))
            done.rename(build / "done" / f"{i:05d}.json")
            (build / "done" / f"{i:05d}.partial.json").unlink(missing_ok=True)
        progress.finish()
        manifest = _manifest(files, [records[i] for i in range(len(files))], tok.vocab_size, dtype, settings)
        shutil.rmtree(build / "done")
        (build / MANIFEST).write_text(json.dumps(manifest, indent=1))
        publish_dir(build, out, MANIFEST)


def _manifest(files: list[FilePlan], records: list[dict], vocab_size: int, dtype: np.dtype, settings: dict) -> dict:
    """What was prepared, per split: shards, documents, tokens, bytes; the data report of the reading."""
    report = DataReport("lm")
    for r in records:
        report.merge(DataReport.from_dict(r["report"]))
    # an evaluation file identical to a training file is dropped (eval_overlap=drop) or refused
    whole = {s: [(i, r["name"], r["hash"]) for i, (f, r) in enumerate(zip(files, records))
                 if (s in f.splits if s == "train" else f.splits == (s,)) and any(x["documents"] for x in r["splits"].values())]
             for s in SPLITS}
    kept = drop_overlap(whole, lambda d: d[2], files[0].fmt.eval_overlap, report, files[0].fmt.prefix,
                        where=lambda d: d[1], unit="file", what="text")
    for s in ("val", "test"):
        if whole[s] and not kept[s]:
            raise DataError(f"nothing is left for {'validation' if s == 'val' else 'testing'}: every {s} file is "
                            f"identical to a training file ({', '.join(n for _, n, _ in whole[s])}); give other "
                            f"data.corpus.{s}_files, or none")
    keep = {(s, i) for s, rows in kept.items() for i, _, _ in rows} | {
        (s, i) for i, f in enumerate(files) for s in f.splits if len(f.splits) > 1}
    splits = {}
    for s in SPLITS:
        entries = [(i, records[i]["name"], records[i]["splits"][s]) for i in range(len(files))
                   if s in records[i]["splits"] and (s, i) in keep and records[i]["splits"][s]["tokens"]]
        if entries or s != "test":
            facts = dict.fromkeys(("documents", "characters", "tokens", "bytes", *(k for _, _, e in entries for k in e)))
            splits[s] = {"shards": [n for i, _, _ in entries for n in records[i]["shards"][s]],
                         "names": [n for _, n, _ in entries],
                         **{k: sum(e[k] for _, _, e in entries) for k in facts}}
    return {"vocab_size": vocab_size, "dtype": dtype.name, "settings": settings, "splits": splits,
            "report": report.to_dict()}


class ShardedTokens:
    """The shards of one split as one read-only token sequence (memory-mapped: the OS pages in what is read)."""

    def __init__(self, directory: Path, shards: list[str], dtype: str):
        self.maps, self.dtype = [np.memmap(directory / s, dtype=dtype, mode="r") for s in shards], np.dtype(dtype)
        self.starts = np.cumsum([0] + [len(m) for m in self.maps])  # starts[k]: the first index of shard k

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:  # np.asarray(view): the whole split, in memory
        return self[0 : len(self)].astype(dtype or self.dtype)

    def __getitem__(self, s: slice | int) -> np.ndarray:
        if isinstance(s, int | np.integer):
            return self[s : s + 1][0] if s >= 0 else self[len(self) + s]
        lo, hi, _ = s.indices(len(self))
        out, k = [], int(np.searchsorted(self.starts, lo, side="right")) - 1
        while lo < hi:
            take = min(hi, int(self.starts[k + 1])) - lo
            out.append(self.maps[k][lo - self.starts[k] : lo - self.starts[k] + take])
            lo, k = lo + take, k + 1
        return np.concatenate(out) if len(out) > 1 else np.asarray(out[0]) if out else np.empty(0, self.dtype)


class FullPassWindows(Dataset):
    """Every token of a split scored exactly once, for test loss and bits per byte that are the held-out text's.

    Window k covers tokens [s_k, s_k + T] with s_k = k * stride; its first window scores all T targets, every
    later one only the targets not scored before (the last `stride`, each with at least T - stride tokens of
    context); the last window is moved back to end at the final token. Unscored targets are IGNORE (-100,
    which F.cross_entropy leaves out)."""

    IGNORE = -100

    def __init__(self, tokens, block_size: int, stride: int):
        if not 0 < stride <= block_size:
            raise DataError(f"data.eval_stride={stride} must be in [1, data.block_size={block_size}]")
        n = len(tokens) - 1  # targets: tokens 1..n
        self.tokens, self.block_size, self.stride = tokens, block_size, stride
        self.starts = list(range(0, max(n - block_size, 0), stride)) + [max(n - block_size, 0)]

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, T = self.starts[k], self.block_size
        chunk = torch.from_numpy(self.tokens[s : s + T + 1].astype(np.int64))
        x, y = chunk[:-1], chunk[1:].clone()  # [T], [T]
        scored_until = self.starts[k - 1] + T if k else s  # targets up to this token index were scored before
        y[: max(0, scored_until - s)] = self.IGNORE
        return x, y
