"""Masked-language-modelling data: unlabelled text cut into [CLS] ... [SEP] segments, masked by the collator
(the one place masking happens), BERT's rule: choose 15% of the real tokens; of those, 80% -> [MASK],
10% -> a random token, 10% unchanged. Special tokens and padding are never chosen.

The corpora are streamed into shards once (lab.data.shards, as the LM's): each document's lines packed into
segments, their ids in `<split>-<file>-<shard>.bin` and where each segment starts in `.idx`; training memory-maps
them. A segment never straddles two shards; a document may (the line and the segment being filled go on).
"""
from __future__ import annotations

import hashlib
import json
import logging
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from lab.data.batching import BucketBatchSampler, pad_batch, per_device_batch
from lab.data.cache import write_once
from lab.data.classification import BERT_SPECIALS
from lab.data.corpora import FilePlan, StreamedCorpus
from lab.data.datamodule import LabDataModule
from lab.data.shards import (
    MANIFEST,
    Progress,
    Shard,
    prepare,
    say_before_caps,
    say_held_out,
    shard_bytes,
    tokenizer_sample,
)
from lab.data.sources.reading import DataReport, FileFormat
from lab.data.sources.text import normalize_sentence
from lab.data.tokenizers import Rereadable, load_or_train, tokenizer_from_json, training_key
from lab.errors import DataError

log = logging.getLogger("lab")
IGNORE = -100  # target of positions that were not chosen (F.cross_entropy's ignore_index)


class MaskingCollator:
    """Pads a batch of id lists and masks it. -> (inputs [B, T], targets [B, T]: the original id at chosen
    positions, IGNORE elsewhere). seed=None draws from torch's global RNG (fresh masks every epoch, seeded by
    the run); a seed makes the masks a function of (seed, the batch's sample indices): fixed validation."""

    def __init__(self, pad_id: int, mask_id: int, vocab_size: int, special_ids: list[int], mask_prob: float = 0.15,
                 replace_mask: float = 0.8, replace_random: float = 0.1, seed: int | None = None):
        if not 0 < mask_prob < 1 or replace_mask + replace_random > 1:
            raise DataError(f"data masking: mask_prob={mask_prob} must be in (0, 1) and replace_mask + replace_random "
                            f"= {replace_mask} + {replace_random} at most 1")
        self.pad_id, self.mask_id, self.mask_prob = pad_id, mask_id, mask_prob
        self.replace_mask, self.replace_random, self.seed = replace_mask, replace_random, seed
        self.special = torch.tensor(sorted(set(special_ids) | {pad_id}))
        self.random_ids = torch.tensor([i for i in range(vocab_size) if i not in set(self.special.tolist())])

    def __call__(self, items: list[tuple[int, list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        indices, seqs = zip(*items)
        gen = None
        if self.seed is not None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + min(indices))
        ids = pad_batch(seqs, self.pad_id)  # [B, T]
        return self.mask(ids, gen)

    def mask(self, ids: torch.Tensor, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        eligible = ~torch.isin(ids, self.special)  # [B, T]
        chosen = (torch.rand(ids.shape, generator=gen) < self.mask_prob) & eligible
        if not chosen.any():  # a batch without a target has no loss; choose one eligible token
            flat = eligible.flatten().nonzero().squeeze(1)
            chosen.view(-1)[flat[torch.randint(len(flat), (1,), generator=gen)]] = True
        targets = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        action = torch.rand(ids.shape, generator=gen)
        to_mask = chosen & (action < self.replace_mask)
        to_random = chosen & (action >= self.replace_mask) & (action < self.replace_mask + self.replace_random)
        random_tokens = self.random_ids[torch.randint(len(self.random_ids), ids.shape, generator=gen)]
        inputs = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        inputs = torch.where(to_random, random_tokens, inputs)
        return inputs, targets


class SegmentShard(Shard):
    """The MLM's shard of one file and split: each document's lines ("\\n"-separated, normalize_sentence'd,
    blank ones left out) packed greedily into [CLS] ... [SEP] segments of at most max_length tokens; a line
    longer than a segment is cut (counted: facts["truncated"]). Short texts (one sentence) stay one segment
    each. .bin: the segments' ids one after another; .idx: int64 offsets, segment k is bin[idx[k]:idx[k+1]]."""

    suffixes = (".bin", ".idx")

    def __init__(self, stem: Path, tok, dtype: np.dtype, progress: Progress, max_length: int):
        super().__init__(stem, progress)
        self.tok, self.dtype, self.room = tok, dtype, max_length - 2
        self.cls, self.sep = tok.token_id("[CLS]"), tok.token_id("[SEP]")
        self.facts.update(segments=0, truncated=0)
        self.line, self.current, self.written = "", [], 0
        self.doc = {"characters": 0, "bytes": 0, "segments": 0, "tokens": 0}
        np.zeros(1, np.int64).tofile(self.files[".idx"])

    def write(self, pieces: list[str]) -> None:
        text = self.line + "".join(pieces)
        lines = text.split("\n")
        self.line = lines.pop()  # the line may go on in the next pieces
        self._pack(lines)
        self.doc["characters"] += sum(map(len, pieces))
        self.doc["bytes"] += sum(len(p.encode("utf-8")) for p in pieces)

    def state(self) -> dict:  # the line and the segment being filled go on in the next shard
        return {"line": self.line, "current": self.current, "doc": self.doc}

    def restore(self, state: dict) -> None:
        self.line, self.current, self.doc = state["line"], list(state["current"]), dict(state["doc"])

    def end_document(self) -> None:
        self._pack([self.line])
        self._write([self.current] if self.current else [])
        if self.doc["segments"]:  # a document without a non-blank line makes no segment and is no document
            self.facts["documents"] += 1
            for k, v in self.doc.items():
                self.facts[k] += v
        self.line, self.current = "", []
        self.doc = {"characters": 0, "bytes": 0, "segments": 0, "tokens": 0}

    def _pack(self, lines: list[str]) -> None:
        lines = [x for x in map(normalize_sentence, lines) if x]
        done = []
        for ids in self.tok.encode_batch(lines) if lines else []:
            if len(ids) > self.room:
                self.facts["truncated"] += 1
                ids = ids[: self.room]
            if self.current and len(self.current) + len(ids) > self.room:
                done.append(self.current)
                self.current = []
            self.current = self.current + ids
        self._write(done)

    def _write(self, segments: list[list[int]]) -> None:
        if not segments:
            return
        lengths = np.fromiter((len(s) + 2 for s in segments), np.int64, count=len(segments))
        ids = np.fromiter((i for s in segments for i in (self.cls, *s, self.sep)), self.dtype, count=int(lengths.sum()))
        ids.tofile(self.f)
        (self.written + np.cumsum(lengths)).tofile(self.files[".idx"])
        self.written += len(ids)
        self.doc["tokens"] += len(ids)
        self.doc["segments"] += len(segments)
        self.progress.add(0, len(ids))


class Segments(torch.utils.data.Dataset):
    """One split's segments from its shards, memory-mapped. Item i: (i, ids of segment i); the collator derives
    fixed evaluation masks from the indices."""

    def __init__(self, directory: Path, shards: list[str], dtype: str):
        self.ids = [np.memmap(directory / s, dtype=dtype, mode="r") for s in shards]
        self.offsets = [np.memmap(directory / s.replace(".bin", ".idx"), dtype=np.int64, mode="r") for s in shards]
        self.first = np.cumsum([0] + [len(o) - 1 for o in self.offsets])  # first[k]: index of shard k's first segment

    def __len__(self) -> int:
        return int(self.first[-1])

    @property
    def lengths(self) -> np.ndarray:  # [N] tokens per segment (the bucketing sampler sorts by them)
        return np.concatenate([np.diff(o).astype(np.int32) for o in self.offsets])

    def __getitem__(self, i: int) -> tuple[int, list[int]]:
        k = int(np.searchsorted(self.first, i, side="right")) - 1
        o = self.offsets[k]
        j = i - int(self.first[k])
        return i, self.ids[k][o[j] : o[j + 1]].tolist()


def planned(corpus, cache_dir: Path, verify: str, before_caps: bool = False) -> tuple[list[FilePlan], str, DataReport]:
    """A corpus as files to stream and its cache key. A corpus with `files()` (text files, Shakespeare) is
    streamed from its files (before_caps: as planned before held-out caps, where they change the plan); one with
    only `load()` -> Documents (a labelled data set's sentences: small, held in memory by its own loader) is
    written once as JSON lines in the cache, a record per document."""
    if isinstance(corpus, StreamedCorpus):
        files = corpus.files(cache_dir)
        if before_caps and corpus.before_caps is not None:
            files = corpus.before_caps
        return files, corpus.key(files, verify), corpus.listing
    docs = corpus.load(cache_dir)
    fmt, plans = FileFormat(prefix="data.corpora."), []
    for split, items in (("train", docs.train), ("val", docs.val)):
        path = cache_dir / "mlm" / f"documents-{docs.fingerprint}-{split}.jsonl"
        if not path.exists():
            write_once(path, "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for _, t in items))
        plans.append(FilePlan(path, f"{type(corpus).__name__}:{split}", (split,), (), split, fmt, "text"))
    return plans, docs.fingerprint, docs.report


class MLMDataModule(LabDataModule):
    """Fields:
    corpora: unlabelled corpora, concatenated: lab.data.corpora's (TextFiles, Shakespeare: streamed, with
    their val / test parts) or any with load(cache_dir) -> Documents (train and val, held in memory once).
    vocab_size: WordPiece vocabulary, trained on tokenizer_sample_mb MB of the training text (lab.data.shards
    tokenizer_sample; null: all of it), cached.
    max_length: tokens per segment incl. [CLS] / [SEP]. batch_size: GLOBAL segments per step.
    mask_prob / replace_mask / replace_random: the masking rule.
    eval_batches: validation batches, a sampled estimate (the shortest segments' batches first; null: all).
    The test pass scores every test segment once (masks fixed by the seed); without a test split, the val split.
    verify: stat (the cache key is each file's name, size and modification time) | content (its bytes' hash).
    shard_mb: MB of segment ids per shard (lab.data.lm's LMDataModule: what a killed preparation re-does).
    """
    shards_batches = True  # BucketBatchSampler takes each rank's batches itself (see lab.train)

    def __init__(self, corpora: list, vocab_size: int = 8000, max_length: int = 64, batch_size: int = 64,
                 mask_prob: float = 0.15, replace_mask: float = 0.8, replace_random: float = 0.1,
                 bucketing: bool = True, eval_batches: int | None = 50, cache_dir: str = "~/.cache/lab",
                 seed: int = 1337, num_workers: int = 0, tokenizer_sample_mb: float | None = 100, verify: str = "stat",
                 shard_mb: float = 256):
        super().__init__()
        if not corpora:
            raise DataError("data.corpora is empty; give at least one corpus (e.g. the movie reviews or text_files)")
        self.corpora, self.vocab_size_setting, self.max_length = list(corpora), vocab_size, max_length
        self.batch_size, self.bucketing, self.eval_batches = batch_size, bucketing, eval_batches
        self.masking = {"mask_prob": mask_prob, "replace_mask": replace_mask, "replace_random": replace_random}
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.sample_bytes = None if tokenizer_sample_mb is None else int(tokenizer_sample_mb * 1e6)
        self.verify, self.shard_bytes = verify, shard_bytes(shard_mb)

    def _plan(self, before_caps: bool = False) -> tuple[Path, Path, list[FilePlan], DataReport]:
        """-> (the prepared directory, the tokenizer's cache file, the files, what planning read); before_caps:
        of the corpora's plans before held-out caps."""
        files, keys, report = [], [], DataReport("mlm")
        for corpus in self.corpora:
            f, key, read = planned(corpus, self.cache_dir, self.verify, before_caps)
            files, keys = files + f, keys + [key]
            report.merge(read)
        tok_key = f"{'|'.join(keys)}|{training_key('wordpiece')}|{self.vocab_size_setting}|{self.sample_bytes}"
        tok_file = self.cache_dir / "mlm" / f"tokenizer-{hashlib.sha256(tok_key.encode()).hexdigest()[:16]}.json"
        key = hashlib.sha256(f"{tok_key}|segments|{self.max_length}|shard_bytes:{self.shard_bytes}".encode()).hexdigest()[:16]
        return self.cache_dir / "mlm" / key, tok_file, files, report

    def _held_out(self) -> dict:
        """The one corpus's held_out (a StreamedCorpus's, set by planning); with several corpora, each streamed
        one's under its place in the list ("data.corpora[i]"): they are prepared into the same splits, so what each
        held out is its plan (bytes of its own text), not a share of the prepared splits."""
        streamed = self._streamed()
        if len(self.corpora) == 1:
            return next(iter(streamed.values()), {})
        return {"by_corpus": streamed} if streamed else {}

    def _streamed(self) -> dict[str, dict]:
        """{config path: held_out} of the streamed corpora that hold text out."""
        return {f"data.corpora[{i}]": c.held_out for i, c in enumerate(self.corpora)
                if isinstance(c, StreamedCorpus) and c.held_out}

    def _say_held_out(self, splits: dict) -> None:
        for where, held_out in self._streamed().items():
            say_held_out(held_out, splits if len(self.corpora) == 1 else None, where)

    def prepare_data(self) -> None:
        out, tok_file, files, _ = self._plan()
        if any(isinstance(c, StreamedCorpus) and c.before_caps is not None for c in self.corpora):
            say_before_caps(out, self._plan(before_caps=True)[0])

        def make_tokenizer(path: Path):
            tok = load_or_train(tok_file, "wordpiece", Rereadable(partial(tokenizer_sample, files, self.sample_bytes)), BERT_SPECIALS,
                                self.vocab_size_setting)
            path.write_text(tok.to_json())
            return tok

        settings = {"tokenizer": "wordpiece", "vocab_size": self.vocab_size_setting, "max_length": self.max_length,
                    "tokenizer_sample_bytes": self.sample_bytes, "shard_bytes": self.shard_bytes,
                    "held_out": self._held_out()}
        prepare(out, files, make_tokenizer, partial(SegmentShard, max_length=self.max_length), settings, self.shard_bytes)

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:
            return
        out, _, _, read = self._plan()
        if not (out / MANIFEST).exists():
            self.prepare_data()
        meta = json.loads((out / MANIFEST).read_text())
        report, splits = DataReport.from_dict(meta["report"]), meta["splits"]
        report.task = "mlm"
        report.merge(read)
        for split, facts in splits.items():
            if not facts.get("segments"):
                raise DataError(f"the MLM {split} text is empty; check data.corpora (each corpus's {split} part)")
            report.split(split, documents=facts["documents"], characters=facts["characters"], segments=facts["segments"],
                         tokens=facts["tokens"])
            if facts.get("truncated"):
                report.note("truncated", split, f"lines longer than data.max_length={self.max_length} tokens (cut)",
                            count=facts["truncated"])
        self.report = {**report.to_dict(), "prepared": str(out), "manifest": {s: {k: v for k, v in f.items() if k != "names"}
                                                                               for s, f in splits.items()},
                       "held_out": self._held_out()}
        report.log()
        self._say_held_out(splits)
        self.tokenizer = tokenizer_from_json((out / "tokenizer.json").read_text())
        self.datasets = {s: Segments(out, f["shards"], meta["dtype"]) for s, f in splits.items()}
        self.use_for_test("test" if "test" in splits else "val")
        log.info("data: val/* is an estimate from the first %s validation batches (data.eval_batches); test/* scores "
                 "every segment of the %s split once", self.eval_batches or "all",
                 "test" if "test" in splits else "val (no test split: give the corpora a test part, e.g. test_works)")

    def use_for_test(self, split: str) -> None:
        """The split the test pass scores (lab.eval split=valid: every validation segment)."""
        self.test_split = split

    @property
    def vocab(self) -> dict[str, int]:
        t = self.tokenizer
        return {"vocab_size": t.vocab_size, "pad_id": t.token_id("[PAD]"), "mask_id": t.token_id("[MASK]")}

    def collator(self, seed: int | None) -> MaskingCollator:
        t = self.tokenizer
        return MaskingCollator(t.token_id("[PAD]"), t.token_id("[MASK]"), t.vocab_size,
                               [t.token_id(s) for s in BERT_SPECIALS], seed=seed, **self.masking)

    def _loader(self, split: str, stage: str) -> DataLoader:
        segs = self.datasets[split]
        t = self.trainer
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        bs = per_device_batch(self.batch_size, t)
        lengths = segs.lengths if self.bucketing else np.zeros(len(segs), np.int32)  # all equal: plain random batches
        if stage == "test":  # every segment once: rank r of W takes sorted batches r, r + W, ... (none dropped)
            sampler = list(BucketBatchSampler(lengths, bs, False))[rank::world]
        else:
            sampler = BucketBatchSampler(lengths, bs, stage == "train", self.seed, rank=rank, world=world)
            if stage == "train":
                sampler.resume(t)  # a resumed run continues with the batch the interrupted one would have loaded next
            elif self.eval_batches:
                sampler = list(sampler)[: self.eval_batches]
        return DataLoader(segs, batch_sampler=sampler, num_workers=self.num_workers,
                          collate_fn=self.collator(None if stage == "train" else self.seed))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", "train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", "val")

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_split, "test")
