"""Parallel text for translation: the Ding German-English dictionary (Debian `trans-de-en`) or the user's
own tsv/jsonl pairs, split once with a seed, a joint byte-level BPE, and dynamically padded batches.

A batch is a dict: source [B, S] (ids + eos, right-padded), target [B, T] (bos + ids + eos, right-padded),
and the raw source/reference strings, so BLEU is computed against the untouched reference text.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import tempfile
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from lab.data.batching import BucketBatchSampler, pad_batch, per_device_batch
from lab.data.sources import DebianPackage
from lab.data.text import normalize_sentence
from lab.data.tokenizers import load_or_train
from lab.errors import DataError

PAD, BOS, EOS = "<pad>", "<s>", "</s>"  # ids 0, 1, 2: the tokenizer adds specials first, in this order
SPECIALS = [PAD, BOS, EOS]

TRANS_DE_EN = DebianPackage(
    "trans-de-en", "1.9-6", "usr/share/trans/de-en", "34052c6021d09eadfee7a893a789204265954df70fe9c36d38fa00058d79d326"
)

Pair = tuple[str, str]
_ANNOTATION = re.compile(r"\s*(\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\))")  # {m}, [coll.], (something); innermost first
SENTENCE_END = (".", "!", "?")


def strip_annotations(text: str) -> str:
    previous = None
    while previous != text:  # nested brackets peel from the inside out
        previous, text = text, _ANNOTATION.sub("", text)
    return " ".join(text.split())


def ding_pairs(lines) -> list[Pair]:
    """Sentence pairs from Ding lines `de alt | de alt :: en alt | en alt`.

    The ` | ` alternatives are aligned (a headword, then its example phrases and sentences); each alternative
    lists synonyms separated by `; `, of which the first is kept. Annotations are removed; a pair is kept when
    both sides have >= 4 words and end in sentence punctuation; a German sentence is kept once (its first
    translation), so the held-out splits never share a source with training.
    """
    pairs, seen = [], set()
    for line in lines:
        if line.startswith("#") or " :: " not in line:
            continue
        de_side, en_side = line.rstrip("\n").split(" :: ", 1)
        de_alts, en_alts = de_side.split(" | "), en_side.split(" | ")
        if len(de_alts) != len(en_alts):  # misaligned entry: no way to know which goes with which
            continue
        for de, en in zip(de_alts, en_alts):
            de, en = strip_annotations(de.split("; ")[0]), strip_annotations(en.split("; ")[0])
            sentences = len(de.split()) >= 4 and len(en.split()) >= 4 and de.endswith(SENTENCE_END) and en.endswith(SENTENCE_END)
            if sentences and de not in seen:
                seen.add(de)
                pairs.append((de, en))
    return pairs


class Ding:
    """German-English sentence pairs from the Ding dictionary in Debian's trans-de-en (pinned, verified)."""

    name = "ding-de-en"

    def load(self, cache_dir: str | Path) -> dict[str, list[Pair]]:
        path = TRANS_DE_EN.fetch(cache_dir) / TRANS_DE_EN.member
        with open(path, encoding="utf-8") as f:
            return {"train": ding_pairs(f)}


class ParallelFiles:
    """The user's own pairs: .tsv (source and target columns) or .jsonl (one object per line, field names).
    valid_file / test_file are optional; without them the datamodule holds out a seeded split of train."""

    name = "files"

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 source_column: int = 0, target_column: int = 1, source_field: str = "source", target_field: str = "target"):
        self.files = {"train": train_file, "valid": valid_file, "test": test_file}
        self.columns, self.fields = (source_column, target_column), (source_field, target_field)

    def _read(self, file: str, split: str) -> list[Pair]:
        path = Path(file).expanduser()
        if not path.is_file():
            raise DataError(f"data.corpus.{split}_file={file!r} does not exist; give a .tsv or .jsonl file of pairs")
        pairs = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    if path.suffix == ".jsonl":
                        row = json.loads(line)
                        pairs.append((str(row[self.fields[0]]).strip(), str(row[self.fields[1]]).strip()))
                    elif path.suffix in (".tsv", ".txt"):
                        cols = line.rstrip("\n").split("\t")
                        pairs.append((cols[self.columns[0]].strip(), cols[self.columns[1]].strip()))
                    else:
                        raise DataError(f"{path}: unknown format {path.suffix!r}; use .tsv (tab-separated) or .jsonl")
                except (KeyError, IndexError, json.JSONDecodeError) as e:
                    what = f"fields {self.fields}" if path.suffix == ".jsonl" else f"columns {self.columns}"
                    raise DataError(f"{path}:{n} has no {what} ({type(e).__name__}: {e}); fix the line or set "
                                    f"data.corpus.source_field/target_field (jsonl) or source_column/target_column (tsv)") from e
        if not pairs:
            raise DataError(f"{path} holds no pairs")
        return pairs

    def load(self, cache_dir: str | Path) -> dict[str, list[Pair]]:
        return {split: self._read(f, split) for split, f in self.files.items() if f}


class PairDataset(Dataset):
    def __init__(self, pairs: list[Pair], source_ids: list[list[int]], target_ids: list[list[int]]):
        self.pairs, self.source_ids, self.target_ids = pairs, source_ids, target_ids

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int):
        return self.pairs[i], self.source_ids[i], self.target_ids[i]


class ParallelDataModule(L.LightningDataModule):
    """Fields:
    corpus: Ding() or ParallelFiles(...) (`.load(cache_dir) -> {split: [(source, target)]}`).
    reverse: translate target -> source (English -> German on Ding).
    valid_size / test_size: pairs held out of train (seeded) for splits the corpus does not provide.
    vocab_size: joint byte-level BPE over both languages of the training split.
    max_tokens: training pairs longer than this on either side (with bos/eos) are dropped; held-out sources
    are truncated to it, references are never touched.
    batch_size: GLOBAL sentence pairs per optimizer step (per device: batch_size / (devices * accumulation)).
    batch_tokens: when set, training batches are cut by GLOBAL padded tokens (source + target) instead of
    batch_size pairs, from pairs of similar length (random batches of Ding are 56% padding).
    Held-out batches keep the split's order, so the first val_bleu_batches are a fair sample of it.
    """

    def __init__(self, corpus, reverse: bool = False, valid_size: int = 1000, test_size: int = 1000,
                 vocab_size: int = 8000, max_tokens: int = 128, batch_size: int = 64, eval_batch_size: int = 100,
                 batch_tokens: int | None = None, cache_dir: str = "~/.cache/lab", seed: int = 1337, num_workers: int = 0):
        super().__init__()
        self.corpus, self.reverse = corpus, reverse
        self.valid_size, self.test_size, self.vocab_size_setting = valid_size, test_size, vocab_size
        self.max_tokens, self.batch_size, self.eval_batch_size = max_tokens, batch_size, eval_batch_size
        if batch_tokens is not None and batch_tokens < 1:
            raise DataError(f"data.batch_tokens={batch_tokens}: give a positive token budget per step, or null for "
                            "batches of data.batch_size pairs")
        self.batch_tokens = batch_tokens
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.tokenizer = None
        self.datasets: dict[str, PairDataset] = {}

    def _split(self, loaded: dict[str, list[Pair]]) -> dict[str, list[Pair]]:
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
            raise DataError(f"{len(train)} training pairs is too few to hold out {taken} for valid/test; give "
                            "data.corpus.valid_file/test_file or lower data.valid_size/test_size")
        held = set(order[:taken])
        splits["train"] = [p for i, p in enumerate(train) if i not in held]
        if self.reverse:
            splits = {k: [(t, s) for s, t in v] for k, v in splits.items()}
        return splits

    def _prepared_dir(self) -> Path:
        loaded = self.corpus.load(self.cache_dir)
        h = hashlib.sha256(f"{self.valid_size}|{self.test_size}|{self.seed}|{self.reverse}|{self.vocab_size_setting}".encode())
        for split in sorted(loaded):
            for s, t in loaded[split]:
                h.update(f"{split}\0{s}\0{t}\0".encode())
        self._loaded = loaded
        return self.cache_dir / "parallel" / h.hexdigest()[:16]

    def prepare_data(self) -> None:
        out = self._prepared_dir()
        if (out / "splits.json").exists():
            return
        splits = self._split(self._loaded)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".build-"))  # renamed into place when complete
        texts = (normalize_sentence(text) for pair in splits["train"] for text in pair)
        load_or_train(tmp / "tokenizer.json", "bpe", texts, SPECIALS, self.vocab_size_setting)
        (tmp / "splits.json").write_text(json.dumps(splits, ensure_ascii=False))
        try:
            tmp.rename(out)
        except OSError:  # a concurrent run (DDP rank, sweep job) finished first: use its copy
            shutil.rmtree(tmp, ignore_errors=True)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        from lab.data.tokenizers import tokenizer_from_json  # noqa: PLC0415

        out = self._prepared_dir()
        if not (out / "splits.json").exists():
            self.prepare_data()
        self.tokenizer = tokenizer_from_json((out / "tokenizer.json").read_text())
        if [self.tokenizer.token_id(t) for t in SPECIALS] != [0, 1, 2]:
            raise DataError(f"cached tokenizer {out / 'tokenizer.json'} lacks the pad/bos/eos specials; delete {out}")
        splits = json.loads((out / "splits.json").read_text())
        for split, pairs in splits.items():
            pairs = [tuple(p) for p in pairs]
            src = [ids + [2] for ids in self.tokenizer.encode_batch([normalize_sentence(s) for s, _ in pairs])]
            tgt = [[1] + ids + [2] for ids in self.tokenizer.encode_batch([normalize_sentence(t) for _, t in pairs])]
            if split == "train":  # teacher forcing feeds max_tokens - 1 target positions
                keep = [i for i in range(len(pairs)) if len(src[i]) <= self.max_tokens and len(tgt[i]) <= self.max_tokens + 1]
                self.dropped_long = len(pairs) - len(keep)
                pairs, src, tgt = [pairs[i] for i in keep], [src[i] for i in keep], [tgt[i] for i in keep]
            else:
                src = [s if len(s) <= self.max_tokens else s[: self.max_tokens - 1] + [2] for s in src]
                tgt = [t[: self.max_tokens] + ([] if len(t) <= self.max_tokens else [2]) for t in tgt]
            self.datasets[split] = PairDataset(pairs, src, tgt)

    @property
    def vocab(self) -> dict[str, int]:
        ids = {f"{name}_id": self.tokenizer.token_id(tok) for name, tok in (("pad", PAD), ("bos", BOS), ("eos", EOS))}
        return {"vocab_size": self.tokenizer.vocab_size, **ids}

    def checkpoint_metadata(self) -> dict:
        return {"corpus": self.corpus.name, "reverse": self.reverse}

    def collate(self, rows) -> dict:
        pairs, src, tgt = zip(*rows)
        return {"source": pad_batch(src, 0), "target": pad_batch(tgt, 0),
                "source_text": [p[0] for p in pairs], "reference_text": [p[1] for p in pairs]}

    @property
    def shards_batches(self) -> bool:  # a BucketBatchSampler takes each rank's batches itself (see lab.train)
        return self.batch_tokens is not None

    def train_dataloader(self) -> DataLoader:
        # seeded: the same data.seed gives the same batches in every run (the budget comparison depends on it)
        data, t = self.datasets["train"], self.trainer
        if self.batch_tokens is None:  # random batches of batch_size pairs
            return DataLoader(data, batch_size=per_device_batch(self.batch_size, t), shuffle=True, drop_last=True,
                              collate_fn=self.collate, num_workers=self.num_workers,
                              generator=torch.Generator().manual_seed(self.seed))
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        lengths = [len(s) + len(g) for s, g in zip(data.source_ids, data.target_ids)]
        sampler = BucketBatchSampler(lengths, per_device_batch(self.batch_size, t), True, self.seed, rank=rank,
                                     world=world, max_tokens=per_device_batch(self.batch_tokens, t, "data.batch_tokens"))
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers)

    def _eval_loader(self, split: str) -> DataLoader:
        return DataLoader(self.datasets[split], batch_size=self.eval_batch_size, collate_fn=self.collate,
                          num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")


class ParallelTextDataModule(ParallelDataModule):
    """ParallelDataModule over ParallelFiles, with the file settings as top-level fields, so that
    `data=parallel_text data.train_file=pairs.tsv` is the whole command-line change."""

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 source_column: int = 0, target_column: int = 1, source_field: str = "source",
                 target_field: str = "target", **settings):
        files = ParallelFiles(train_file, valid_file, test_file, source_column, target_column, source_field, target_field)
        super().__init__(corpus=files, **settings)
