"""Parallel text for translation: the Ding German-English dictionary (Debian `trans-de-en`) or the user's
own tsv/jsonl pairs, split once with a seed, a joint byte-level BPE, and dynamically padded batches.

A batch is a dict: source [B, S] (ids + eos, right-padded), target [B, T] (bos + ids + eos, right-padded),
index [B] (position of each pair in its split) and, for the held-out splits, the raw source/reference strings,
so BLEU is computed against the untouched reference text. The splits are stored once, as token ids in flat
memmapped arrays (like the LM data), so a corpus of millions of pairs trains holding its token ids only.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from lab.data.batching import BucketBatchSampler, pad_batch, per_device_batch
from lab.data.cache import publish_dir
from lab.data.datamodule import LabDataModule
from lab.data.sources.packages import DebianPackage, sha256_of
from lab.data.sources.reading import (
    OVERLAP,
    DataReport,
    FileFormat,
    bad_line,
    check_distinct,
    check_file,
    drop_overlap,
    read_jsonl,
    read_table,
    text_of,
)
from lab.data.sources.text import normalize_sentence
from lab.data.tokenizers import hf_tokenizer_key, load_or_train, tokenizer_from_hf_dir
from lab.errors import DataError, excerpts

PAD, BOS, EOS = "<pad>", "<s>", "</s>"  # ids 0, 1, 2: the tokenizer adds specials first, in this order
SPECIALS = [PAD, BOS, EOS]


def special_ids(tokenizer) -> dict[str, int]:
    """pad/bos/eos ids of the tokenizer: lab's own are 0, 1, 2; a Marian tokenizer (data.tokenizer_from) has no
    <s>, and its model starts every target with <pad> (Marian's decoder_start_token_id), so bos is pad there."""
    pad, bos, eos = (tokenizer.token_id(t) for t in SPECIALS)
    return {"pad_id": pad, "bos_id": pad if bos is None else bos, "eos_id": eos}

TRANS_DE_EN = DebianPackage(
    "trans-de-en", "1.9-6", "usr/share/trans/de-en", "34052c6021d09eadfee7a893a789204265954df70fe9c36d38fa00058d79d326"
)

log = logging.getLogger("lab")

Pair = tuple[str, str, str]  # (source, target, "file:line" it came from)
_ANNOTATION = re.compile(r"\s*(\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\))")  # {m}, [coll.], (something); innermost first
SENTENCE_END = (".", "!", "?")


def strip_annotations(text: str) -> str:
    previous = None
    while previous != text:  # nested brackets peel from the inside out
        previous, text = text, _ANNOTATION.sub("", text)
    return " ".join(text.split())


def ding_pairs(lines, report: DataReport | None = None, name: str = "ding") -> list[Pair]:
    """Sentence pairs from Ding lines `de alt | de alt :: en alt | en alt`.

    The ` | ` alternatives are aligned (a headword, then its example phrases and sentences); each alternative
    lists synonyms separated by `; `, of which the first is kept. Annotations are removed; a pair is kept when
    both sides have >= 4 words and end in sentence punctuation; a German sentence is kept once (its first
    translation), so the held-out splits never share a source with training. What is left out is counted in
    `report` (as train's, at `name:line`): entries whose alternatives do not line up and repeated German
    sentences as dropped, alternatives that are not sentences (headwords, phrases) as skipped.
    """
    def note(action: str, reason: str, n: int) -> None:
        if report is not None:
            report.note(action, "train", reason, f"{name}:{n}")

    pairs, seen = [], set()
    for n, line in enumerate(lines, 1):
        if line.startswith("#"):  # the file's header comments: not entries
            continue
        if not line.strip():
            note("skipped", "blank lines", n)
            continue
        if " :: " not in line:
            note("dropped", "lines without ' :: ' between German and English", n)
            continue
        de_side, en_side = line.rstrip("\n").split(" :: ", 1)
        de_alts, en_alts = de_side.split(" | "), en_side.split(" | ")
        if len(de_alts) != len(en_alts):  # misaligned entry: no way to know which goes with which
            note("dropped", "entries whose ' | ' alternatives do not line up (German and English count differ)", n)
            continue
        for de, en in zip(de_alts, en_alts):
            de, en = strip_annotations(de.split("; ")[0]), strip_annotations(en.split("; ")[0])
            sentences = len(de.split()) >= 4 and len(en.split()) >= 4 and de.endswith(SENTENCE_END) and en.endswith(SENTENCE_END)
            if not sentences:
                note("skipped", "alternatives that are not sentences (under 4 words a side or no . ! ? at the end)", n)
            elif de in seen:
                note("dropped", "repeated German sentences (the first translation kept)", n)
            else:
                seen.add(de)
                pairs.append((de, en))
    return pairs


class Ding:
    """German-English sentence pairs from the Ding dictionary in Debian's trans-de-en (pinned, verified)."""

    name = "ding-de-en"
    prefix = "data.corpus."  # where its settings live in the config (messages name them)
    rules = "ding_pairs-2"  # change when ding_pairs changes what it keeps or reports: prepared caches are keyed by it

    def fingerprint(self) -> str:
        """What the pairs depend on, known without reading them: the pinned file and the extraction rules."""
        return f"{self.name}|{TRANS_DE_EN.sha256}|{self.rules}"

    def load(self, cache_dir: str | Path, report: DataReport) -> dict[str, list[Pair]]:
        path = TRANS_DE_EN.fetch(cache_dir) / TRANS_DE_EN.member
        with open(path, encoding="utf-8") as f:
            pairs = ding_pairs(f, report, path.name)
        report.file("train", path, pairs=len(pairs))
        return {"train": [(s, t, f"{self.name}#{i}") for i, (s, t) in enumerate(pairs)]}


class ParallelFiles:
    """The user's own pairs: .tsv (source and target columns; no quote processing) or .jsonl (one object per
    line, field names), read as lab.data.sources.reading says (FileFormat: encoding, quoting, header, bad_lines).
    Both sides are whitespace-stripped; a pair with an empty side is a bad line. valid_file / test_file are
    optional; without them the datamodule holds out a seeded split of train."""

    name = "files"

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 source_column: int = 0, target_column: int = 1, source_field: str = "source", target_field: str = "target",
                 header: bool | None = None, encoding: str = "utf-8", encoding_errors: str = "strict",
                 quoting: str = "none", bad_lines: str = "error", prefix: str = "data.corpus."):
        self.files = {"train": train_file, "valid": valid_file, "test": test_file}
        self.columns, self.fields, self.prefix = (source_column, target_column), (source_field, target_field), prefix
        self.format = FileFormat(encoding, encoding_errors, quoting, header, bad_lines, prefix=prefix)

    def _read(self, file: str, split: str, report: DataReport) -> list[Pair]:
        path, fmt, field = check_file(file, f"{self.prefix}{split}_file"), self.format, f"{split}_file"
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            records = []
            for n, obj in read_jsonl(path, fmt, field, report):
                absent = [f for f in self.fields if f not in obj]
                if absent:
                    bad_line(fmt, report, field, path, n, "lines without the source or target field",
                             f"has no fields {' / '.join(map(repr, absent))} (fields: {excerpts(obj)}); set "
                             f"{self.prefix}source_field / target_field if they are named otherwise")
                    continue
                records.append((n, [obj[f] for f in self.fields]))
        elif suffix in (".tsv", ".txt"):
            _, rows = read_table(path, fmt, field, report, names=self.fields, header=fmt.header)
            need = max(self.columns) + 1
            if rows and len(rows[0][1]) < need:
                raise DataError(f"{path}:{rows[0][0]}: has {len(rows[0][1])} tab-separated columns, too few for "
                                f"{self.prefix}source_column / target_column = {self.columns}; set them, or separate "
                                "source and target by a tab")
            records = [(n, [cells[c] for c in self.columns]) for n, cells in rows]
        else:
            raise DataError(f"{path}: unknown format {suffix!r}; use .tsv (tab-separated) or .jsonl")
        pairs = []
        for n, (source, target) in records:
            s, t = text_of(source), text_of(target)
            if s is None or t is None or not s.strip() or not t.strip():
                side = "source" if s is None or not s.strip() else "target"
                bad_line(fmt, report, field, path, n, "pairs with an empty or non-text side",
                         f"has an empty or non-text {side} ({json.dumps(source if side == 'source' else target, ensure_ascii=False)[:40]})")
                continue
            if not (isinstance(source, str) and isinstance(target, str)):  # 12 or true in the JSON: the text "12"
                report.note("changed", field, "sides given as a number or true/false (read as JSON writes them)",
                            f"{path.name}:{n}")
            pairs.append((s.strip(), t.strip(), f"{path.name}:{n}"))
        if not pairs:
            raise DataError(f"{path}: no usable pairs are left ({report.summary('dropped', field)})")
        report.file_facts(path, pairs=len(pairs))
        return pairs

    def load(self, cache_dir: str | Path, report: DataReport) -> dict[str, list[Pair]]:
        check_distinct({f"{k}_file": f for k, f in self.files.items()}, self.prefix, "train_file")
        return {split: self._read(f, split, report) for split, f in self.files.items() if f}

    def fingerprint(self) -> str:
        """What the pairs depend on, known without reading them into memory: each file's name as given (the cached
        report names the user's files) and bytes (sha256, streamed) and the reading options. A missing file is the
        same error as when reading."""
        parts = [self.name, self.format.key, repr(self.columns), repr(self.fields)]
        for split, file in self.files.items():
            if file:
                path = check_file(file, f"{self.prefix}{split}_file")
                parts.append(f"{split}:{file}:{sha256_of(path)}")
        return "|".join(parts)


class PairDataset(Dataset):
    """One split's pairs as token ids: the source ids of all pairs in one flat array, the target ids in another
    (read-only memmaps of the prepared cache), cut by offsets. Item i: (texts or None, source ids, target ids, i).
    texts: (source, reference) strings, held in memory for the held-out splits (BLEU scores the untouched
    reference); the training split leaves them on disk (`pairs` reads them), so training holds token ids only."""

    def __init__(self, directory: Path, split: str, dtype: str, hold_texts: bool):
        self.texts_path = directory / f"{split}.texts.jsonl"
        self.source, self.target = (np.memmap(directory / f"{split}.{side}.bin", dtype=dtype, mode="r")
                                    if (directory / f"{split}.{side}.bin").stat().st_size else np.zeros(0, dtype)
                                    for side in ("source", "target"))
        offsets = np.load(directory / f"{split}.offsets.npy")  # [N + 1, 2]: start of pair i's source, target ids
        self.source_offsets, self.target_offsets = offsets[:, 0], offsets[:, 1]
        self.texts: list[tuple[str, str]] | None = None
        if hold_texts:
            self.texts = self.pairs

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    @property
    def lengths(self) -> np.ndarray:  # [N] source + target tokens per pair
        return np.diff(self.source_offsets) + np.diff(self.target_offsets)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(source, reference) of every pair, in split order (read from disk for the training split)."""
        if self.texts is not None:
            return self.texts
        with open(self.texts_path, encoding="utf-8") as f:
            return [tuple(json.loads(line)) for line in f]

    def __getitem__(self, i: int):
        s, t = self.source_offsets, self.target_offsets
        return (self.texts[i] if self.texts is not None else None, self.source[s[i] : s[i + 1]].astype(np.int64),
                self.target[t[i] : t[i + 1]].astype(np.int64), i)


def write_split(directory: Path, split: str, pairs: list[Pair], tokenizer, max_tokens: int, report: DataReport,
                chunk: int = 10_000) -> dict:
    """Tokenise `pairs` chunk by chunk into directory/<split>.{source,target}.bin (flat token ids), .offsets.npy
    and .texts.jsonl, never holding more than one chunk's ids. Training pairs longer than max_tokens on either
    side (with bos/eos) are dropped; held-out sources are cut to max_tokens, targets for the loss only (the
    reference text is untouched); each counted in the report. -> facts for meta.json."""
    n, dtype = max_tokens, np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    ids = special_ids(tokenizer)
    bos, eos = ids["bos_id"], ids["eos_id"]
    starts, totals, kept, dropped, chars = [(0, 0)], [0, 0], 0, 0, [0, 0]
    with (open(directory / f"{split}.source.bin", "wb") as fs, open(directory / f"{split}.target.bin", "wb") as ft,
          open(directory / f"{split}.texts.jsonl", "w", encoding="utf-8") as fx):
        for c in range(0, len(pairs), chunk):
            part = pairs[c : c + chunk]
            sources = tokenizer.encode_batch([normalize_sentence(p[0]) for p in part])  # as inference will see them
            targets = tokenizer.encode_batch([normalize_sentence(p[1]) for p in part])
            src_ids, tgt_ids = [], []
            for (s, t, where), src, tgt in zip(part, sources, targets):
                src, tgt = src + [eos], [bos] + tgt + [eos]
                if split == "train":  # teacher forcing feeds max_tokens - 1 target positions
                    if len(src) > n or len(tgt) > n + 1:
                        report.note("dropped", split, f"pairs longer than data.max_tokens={n} tokens on either side", where)
                        dropped += 1
                        continue
                else:
                    if len(src) > n:
                        report.note("truncated", split, f"sources longer than data.max_tokens={n} tokens (cut; the "
                                    "reference is untouched)", where)
                        src = src[: n - 1] + [eos]
                    if len(tgt) > n:
                        report.note("truncated", split, f"targets longer than data.max_tokens={n} tokens, cut for the "
                                    "loss only (BLEU scores the whole reference)", where)
                        tgt = tgt[:n] + [eos]
                src_ids += src
                tgt_ids += tgt
                totals = [totals[0] + len(src), totals[1] + len(tgt)]
                starts.append((totals[0], totals[1]))
                chars = [chars[0] + len(s), chars[1] + len(t)]
                fx.write(json.dumps([s, t], ensure_ascii=False) + "\n")
                kept += 1
            np.asarray(src_ids, dtype=dtype).tofile(fs)
            np.asarray(tgt_ids, dtype=dtype).tofile(ft)
    if split == "train" and not kept:
        raise DataError(f"nothing is left to train on: all {len(pairs)} training pairs are longer than "
                        f"data.max_tokens={n} tokens; raise it (and model.max_seq_len)")
    np.save(directory / f"{split}.offsets.npy", np.asarray(starts, dtype=np.int64))
    report.split(split, pairs=kept, source_characters=chars[0], target_characters=chars[1])
    return {"pairs": kept, "dropped_long": dropped, "source_tokens": totals[0], "target_tokens": totals[1]}


class ParallelDataModule(LabDataModule):
    """Fields:
    corpus: Ding() or ParallelFiles(...) (`.load(cache_dir, report) -> {split: [(source, target, where)]}`, `.prefix`, and
    `.fingerprint()`: what its pairs depend on, without reading them).
    reverse: translate target -> source (English -> German on Ding).
    valid_size / test_size: pairs held out of train (seeded) for splits the corpus does not provide.
    vocab_size: joint byte-level BPE over both languages of the training split.
    max_tokens: training pairs longer than this on either side (with bos/eos) are dropped; held-out sources
    are truncated to it, references are never touched (both counted in the data report).
    eval_overlap: drop | error: valid/test pairs whose source occurs in train (test: or in valid).
    batch_size: GLOBAL sentence pairs per optimizer step (per device: batch_size / (devices * accumulation)); an
    epoch's last batch may hold fewer.
    batch_tokens: when set, training batches are cut by GLOBAL padded tokens (source + target) instead of
    batch_size pairs, from pairs of similar length (random batches of Ding are 56% padding).
    tokenizer_from: a Hugging Face model directory whose tokenizer.json encodes both sides instead of a trained
    BPE (fine-tuning an imported Marian model: model.init_from=<the same dir>); vocab_size is then unused.
    Held-out batches keep the split's order; the task decodes the pairs whose index is below its
    val_bleu_sentences, a seeded random sample of the split when it was cut from train.
    eval_batches: validation/test batches to use, the first ones in that order (null: all).
    """

    def __init__(self, corpus, reverse: bool = False, valid_size: int = 1000, test_size: int = 1000,
                 vocab_size: int = 8000, max_tokens: int = 128, batch_size: int = 64, eval_batch_size: int = 100,
                 batch_tokens: int | None = None, eval_batches: int | None = None, eval_overlap: str = "drop",
                 cache_dir: str = "~/.cache/lab",
                 seed: int = 1337, num_workers: int = 0, tokenizer_from: str | None = None):
        super().__init__()
        if eval_overlap not in OVERLAP:
            raise DataError(f"data.eval_overlap={eval_overlap!r} is not valid; choose one of {', '.join(OVERLAP)}")
        self.eval_overlap = eval_overlap
        self.corpus, self.reverse = corpus, reverse
        self.valid_size, self.test_size, self.vocab_size_setting = valid_size, test_size, vocab_size
        self.max_tokens, self.batch_size, self.eval_batch_size = max_tokens, batch_size, eval_batch_size
        if batch_tokens is not None and batch_tokens < 1:
            raise DataError(f"data.batch_tokens={batch_tokens}: give a positive token budget per step, or null for "
                            "batches of data.batch_size pairs")
        self.batch_tokens, self.eval_batches = batch_tokens, eval_batches
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.tokenizer_from = None if tokenizer_from is None else Path(tokenizer_from).expanduser()
        self.datasets: dict[str, PairDataset] = {}

    def _split(self, loaded: dict[str, list[Pair]], report: DataReport) -> dict[str, list[Pair]]:
        train = list(loaded["train"])
        order = list(range(len(train)))
        random.Random(self.seed).shuffle(order)
        splits, taken = {}, 0
        for split, size in (("valid", self.valid_size), ("test", self.test_size)):
            if split in loaded:
                splits[split] = loaded[split]
            else:
                splits[split] = [train[i] for i in order[taken : taken + size]]
                taken += size
        if len(train) - taken < max(taken, 1):
            files = self.corpus.prefix  # where the file fields live in the config
            raise DataError(f"{len(train)} training pairs is too few to hold out {taken} for valid/test; give "
                            f"{files}valid_file / test_file or lower data.valid_size/test_size")
        held = set(order[:taken])
        splits["train"] = [p for i, p in enumerate(train) if i not in held]
        if self.reverse:
            splits = {k: [(t, s, w) for s, t, w in v] for k, v in splits.items()}
        kept = drop_overlap(splits, lambda p: normalize_sentence(p[0]), self.eval_overlap, report, order=("train", "valid", "test"),
                            where=lambda p: p[2], unit="pair", what="source")
        for split in ("valid", "test"):
            if not kept[split]:
                raise DataError(f"nothing is left of the {split} split: all {len(splits[split])} of its pairs have a source "
                                "that occurs in an earlier split; give held-out pairs that differ from the training data")
        return kept

    def _prepared_dir(self) -> Path:
        """The cache directory of these settings and this corpus (by its fingerprint: nothing is read)."""
        vocab = self.vocab_size_setting
        if self.tokenizer_from is not None:  # a given tokenizer by its own bytes, not its directory's name
            vocab = hf_tokenizer_key(self.tokenizer_from)
        key = (f"v4|{self.valid_size}|{self.test_size}|{self.seed}|{self.reverse}|{vocab}|"
               f"{self.eval_overlap}|{self.max_tokens}|{self.corpus.fingerprint()}")
        return self.cache_dir / "parallel" / hashlib.sha256(key.encode()).hexdigest()[:16]

    def _tokenizer(self, path: Path, splits: dict[str, list[Pair]]):
        """The joint BPE trained on both sides of the training split, or data.tokenizer_from's; either written
        to path (lab's JSON) and checked for the specials the batches use."""
        if self.tokenizer_from is None:
            texts = (normalize_sentence(text) for s, t, _ in splits["train"] for text in (s, t))
            tokenizer = load_or_train(path, "bpe", texts, SPECIALS, self.vocab_size_setting)
            if [tokenizer.token_id(t) for t in SPECIALS] != [0, 1, 2]:
                raise DataError(f"the tokenizer lacks the pad/bos/eos specials as ids 0, 1, 2; delete {path.parent}")
            return tokenizer
        tokenizer = tokenizer_from_hf_dir(self.tokenizer_from)
        absent = [t for t in (PAD, EOS) if tokenizer.token_id(t) is None]
        if absent:
            raise DataError(f"data.tokenizer_from={self.tokenizer_from}: its tokenizer has no {' or '.join(absent)} "
                            "token, which every batch uses (padding, end of sentence); give a Marian-style tokenizer")
        path.write_text(tokenizer.to_json())
        return tokenizer

    def prepare_data(self) -> None:
        """Read the corpus, split it, train the tokenizer and write every split as token ids (write_split) into
        a cache directory named by the corpus fingerprint and the settings. Reading holds the text for a moment,
        once; a warm cache reads nothing but the ids."""
        out = self._prepared_dir()
        if (out / "meta.json").exists():
            return
        report = DataReport("translation")
        loaded = self.corpus.load(self.cache_dir, report)
        splits = self._split(loaded, report)
        del loaded
        out.parent.mkdir(parents=True, exist_ok=True)
        # renamed into place when complete, removed when the build fails (once published its name is gone:
        # ignore_cleanup_errors)
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-", ignore_cleanup_errors=True) as build:
            tmp = Path(build)
            tokenizer = self._tokenizer(tmp / "tokenizer.json", splits)
            dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
            meta = {"dtype": np.dtype(dtype).name, "splits": {}}
            for split in ("train", "valid", "test"):
                meta["splits"][split] = write_split(tmp, split, splits.pop(split), tokenizer, self.max_tokens, report)
            (tmp / "report.json").write_text(json.dumps(report.to_dict(), ensure_ascii=False))
            (tmp / "meta.json").write_text(json.dumps(meta))  # written last: marks it complete
            publish_dir(tmp, out, "meta.json")  # a concurrent run (DDP rank, sweep job) that finished first wins

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        from lab.data.tokenizers import tokenizer_from_json  # noqa: PLC0415

        out = self._prepared_dir()
        if not (out / "meta.json").exists():
            self.prepare_data()
        self.tokenizer = tokenizer_from_json((out / "tokenizer.json").read_text())
        if self.tokenizer.token_id(BOS) is None:
            log.info("data: the tokenizer has no %s: every target starts with %s (id %d), as Marian's decoder does",
                     BOS, PAD, self.tokenizer.token_id(PAD))
        meta = json.loads((out / "meta.json").read_text())
        self.datasets = {split: PairDataset(out, split, meta["dtype"], hold_texts=split != "train")
                         for split in ("train", "valid", "test")}
        self.dropped_long = meta["splits"]["train"]["dropped_long"]
        report = DataReport.from_dict(json.loads((out / "report.json").read_text(encoding="utf-8")))
        pairs = len(self.datasets["train"])
        if self.batch_tokens is None and self.batch_size > pairs:
            report.note("changed", "train", f"batch size: data.batch_size={self.batch_size} is more than the {pairs:,} "
                        f"training pairs; each step takes all {pairs:,}")
        self.report = report.to_dict()
        report.log()

    @property
    def vocab(self) -> dict[str, int]:
        return {"vocab_size": self.tokenizer.vocab_size, **special_ids(self.tokenizer)}

    def checkpoint_metadata(self) -> dict:
        return {"corpus": self.corpus.name, "reverse": self.reverse}

    def collate(self, rows) -> dict:
        texts, src, tgt, index = zip(*rows)
        pad = special_ids(self.tokenizer)["pad_id"]
        batch = {"source": pad_batch(src, pad), "target": pad_batch(tgt, pad), "index": torch.tensor(index)}
        if texts[0] is not None:  # held-out splits: the strings BLEU is computed on
            batch["source_text"], batch["reference_text"] = [p[0] for p in texts], [p[1] for p in texts]
        return batch

    shards_batches = True  # BucketBatchSampler takes each rank's batches itself (see lab.train)

    def train_dataloader(self) -> DataLoader:
        # seeded: the same data.seed gives the same batches in every run (the budget comparison depends on it);
        # batches of batch_size random pairs (all lengths equal), or token-budget batches of similar lengths
        data, t = self.datasets["train"], self.trainer
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        by_tokens = self.batch_tokens is not None
        lengths = data.lengths if by_tokens else [0] * len(data)  # equal lengths: random batches of batch_size
        budget = per_device_batch(self.batch_tokens, t, "data.batch_tokens") if by_tokens else None
        sampler = BucketBatchSampler(lengths, per_device_batch(self.batch_size, t), True, self.seed, rank=rank,
                                     world=world, max_tokens=budget)
        sampler.resume(t)  # a resumed run continues with the batch the interrupted one would have loaded next
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers)

    def _eval_loader(self, split: str) -> DataLoader:
        data = self.datasets[split]
        if self.eval_batches:
            data = Subset(data, range(min(len(data), self.eval_batches * self.eval_batch_size)))
        return DataLoader(data, batch_size=self.eval_batch_size, collate_fn=self.collate, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")


class ParallelTextDataModule(ParallelDataModule):
    """ParallelDataModule over ParallelFiles, with the file settings as top-level fields, so that
    `data=parallel_text data.train_file=pairs.tsv` is the whole command-line change."""

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 source_column: int = 0, target_column: int = 1, source_field: str = "source",
                 target_field: str = "target", header: bool | None = None, encoding: str = "utf-8",
                 encoding_errors: str = "strict", quoting: str = "none", bad_lines: str = "error", **settings):
        files = ParallelFiles(train_file, valid_file, test_file, source_column, target_column, source_field, target_field,
                              header, encoding, encoding_errors, quoting, bad_lines, prefix="data.")
        super().__init__(corpus=files, **settings)
