"""Labelled sentences: the MR movie-review source, the user's tsv/csv/jsonl files, a cached seeded stratified
split, and the datamodule that serves [CLS] sentence [SEP] batches with dynamic padding and length bucketing."""
from __future__ import annotations

import hashlib
import json
import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from lab.data.batching import BucketBatchSampler, pad_batch, per_device_batch
from lab.data.cache import write_once
from lab.data.corpora import Documents
from lab.data.datamodule import LabDataModule
from lab.data.sources.packages import PyPISdist, extract_once
from lab.data.sources.reading import (
    DataReport,
    FileFormat,
    bad_line,
    check_distinct,
    check_file,
    drop_overlap,
    label_counts,
    label_of,
    label_order,
    read_jsonl,
    read_table,
    text_of,
)
from lab.data.sources.text import normalize_sentence
from lab.data.tokenizers import load_or_train, tokenizer_from_hf_dir, tokenizer_from_json, training_key
from lab.errors import DataError, UnsafeFileError, excerpt, excerpts

VADER = PyPISdist("vaderSentiment", "3.3.2", "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9")
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPLITS = ("train", "val", "test")
Example = tuple[str, str, str]  # (text, label, "file:line" it came from)


def encode_sentence(tokenizer, text: str, max_length: int) -> list[int]:
    """[CLS] tokens [SEP], truncated to max_length: the one place training data and inference encode text."""
    ids = tokenizer.encode(normalize_sentence(text))[: max_length - 2]
    return [tokenizer.token_id("[CLS]"), *ids, tokenizer.token_id("[SEP]")]


class MovieReviews:
    """MR sentences (Pang & Lee 2005) as rated by Hutto & Gilbert (ICWSM 2014), shipped in the PyPI sdist
    vaderSentiment==3.3.2: tab-separated id, mean rating in [-4, 4], sentence. Label = sign of the rating;
    the 37 sentences rated exactly 0 are dropped (10,568 remain); they and the blank lines are counted in the data report."""

    fingerprint = f"{VADER.name}|movieReviewSnippets|report-2"  # report-2: blank lines counted (cached splits carry the report)
    prefix = "data."  # where the settings that messages about a source name live in the config
    eval_overlap = "drop"

    def load(self, cache_dir: str | Path, report: DataReport) -> dict[str, list[Example]]:
        inner = VADER.fetch(cache_dir) / VADER.name / "additional_resources" / "hutto_ICWSM_2014.tar.gz"
        if not inner.is_file():
            raise DataError(f"{inner} is missing from the {VADER.name} sdist; delete {inner.parents[2]} and run again")
        path = extract_once(inner, inner.parent / "hutto_ICWSM_2014") / "hutto_ICWSM_2014" / "movieReviewSnippets_GroundTruth.txt"
        rows = []
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                report.note("skipped", "all", "blank lines", f"{path.name}:{n}")
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                raise DataError(f"{path}:{n} is not 'id<TAB>rating<TAB>sentence'; delete {inner.parents[2]} and run again")
            rating = float(parts[1])
            if rating != 0:
                rows.append((parts[2].strip(), "positive" if rating > 0 else "negative", f"{path.name}:{n}"))
            else:
                report.note("dropped", "all", "sentences rated exactly 0 (no sentiment sign)", f"{path.name}:{n}")
        report.file("all", path, lines=len(lines), rows=len(rows))
        return {"all": rows}


FILE_FIELDS = {"all": "train_file", "val": "valid_file", "test": "test_file"}


class LabelledFiles:
    """The user's own labelled text: tsv / csv (with a header row naming text_field and label_field) or jsonl
    (one object a line), chosen by file extension; read as lab.data.sources.reading says (encoding, quoting, bad_lines,
    eval_overlap: see FileFormat). valid_file / test_file are optional; missing splits are cut from train_file
    (stratified, seeded). Labels: stripped strings, numbers normalised (label_of)."""

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 text_field: str = "text", label_field: str = "label", encoding: str = "utf-8",
                 encoding_errors: str = "strict", quoting: str = "none", bad_lines: str = "error",
                 eval_overlap: str = "drop", prefix: str = "data.source."):
        self.files = {"all": train_file, "val": valid_file, "test": test_file}
        self.text_field, self.label_field, self.prefix = text_field, label_field, prefix
        self.format = FileFormat(encoding, encoding_errors, quoting, True, bad_lines, eval_overlap, prefix)
        self.eval_overlap = eval_overlap

    def _read(self, file: str, split: str, report: DataReport) -> list[Example]:
        path, fmt, field = check_file(file, self.prefix + FILE_FIELDS[split]), self.format, FILE_FIELDS[split]
        fields = (self.text_field, self.label_field)
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            records = read_jsonl(path, fmt, field, report)
        elif suffix in (".tsv", ".csv"):
            head, rows = read_table(path, fmt, field, report, names=fields, header=True)
            missing = [f for f in fields if f not in head]
            sep = next((d for d in ",;|" if set(fields) <= {c.strip() for c in head[0].split(d)}), None)
            if missing and suffix == ".tsv" and len(head) == 1 and sep:  # .csv reads , ; | by its header
                raise DataError(f"{path}: its header line {excerpt(head[0])} is {sep!r}-separated, not tab-separated; "
                                f"give it a .csv name (mv {path} {path.stem}.csv)")
            if missing:
                sep = "<TAB>" if suffix == ".tsv" else ","
                raise DataError(f"{path}: the header line has no {' / '.join(repr(f) for f in missing)} column (columns: "
                                f"{excerpts(head)}); set {self.prefix}text_field / {self.prefix}label_field to its column "
                                f"names, or add a first line naming the columns ({self.text_field}{sep}{self.label_field})")
            records = [(n, dict(zip(head, cells))) for n, cells in rows]
        else:
            raise DataError(f"{path}: unsupported extension {suffix!r}; use .tsv, .csv (with a header) or .jsonl")
        out = []
        for n, r in records:
            where = f"{path.name}:{n}"
            absent = [f for f in fields if f not in r]
            if absent:
                bad_line(fmt, report, field, path, n, "records without the text or label field",
                         f"has no {' / '.join(repr(f) for f in absent)} field (fields: {excerpts(r)}); "
                         f"set {self.prefix}text_field / {self.prefix}label_field if they are named otherwise")
                continue
            nested = [(f, r[f]) for f in fields if isinstance(r[f], dict | list)]
            if nested:
                name, value = nested[0]
                bad_line(fmt, report, field, path, n, "records whose text or label is a JSON object or list",
                         f"has a JSON {'object' if isinstance(value, dict) else 'list'} as its {name!r} field "
                         f"({json.dumps(value, ensure_ascii=False)[:40]}), not text")
                continue
            text, label = text_of(r[self.text_field]), label_of(r[self.label_field])
            if text is None or not text.strip():
                bad_line(fmt, report, field, path, n, "rows with an empty text", f"has an empty {self.text_field!r} field")
                continue
            if label is None:
                bad_line(fmt, report, field, path, n, "rows with an empty label", f"has an empty {self.label_field!r} field")
                continue
            if label != text_of(r[self.label_field]):
                report.note("changed", field, "labels normalised (Unicode NFC, whitespace, numbers as 1 / 0.5)", where)
            if not isinstance(r[self.text_field], str):  # 12 or true in the JSON: read as the text "12" / "true"
                report.note("changed", field, "texts given as a number or true/false (read as JSON writes them)", where)
            out.append((text, label, where))
        if not out:
            raise DataError(f"{path}: no usable rows are left ({report.summary('dropped', field)})")
        report.file_facts(path, rows=len(out))
        return out

    @property
    def fingerprint(self) -> str:
        """The files' names as given (the cached report names the user's files, not a copy's) and bytes."""
        h = hashlib.sha256(f"v2|{self.text_field}|{self.label_field}|{self.format.key}".encode())
        for name, file in self.files.items():
            h.update(f"|{name}={file}:".encode() + (check_file(file, self.prefix + FILE_FIELDS[name]).read_bytes() if file else b""))
        return h.hexdigest()[:16]

    def load(self, cache_dir: str | Path, report: DataReport) -> dict[str, list[Example]]:
        check_distinct({FILE_FIELDS[k]: f for k, f in self.files.items()}, self.prefix, FILE_FIELDS["all"])
        return {k: self._read(f, k, report) for k, f in self.files.items() if f}


def stratified_split(labels: list[str], fractions: dict[str, float], seed: int) -> dict[str, list[int]]:
    """Indices per split, each label's rows shuffled (seed) and cut in the same proportions."""
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    rng = np.random.default_rng(seed)
    out: dict[str, list[int]] = {k: [] for k in fractions}
    for label in sorted(by_label):
        idx = [by_label[label][i] for i in rng.permutation(len(by_label[label]))]
        start = 0
        for k, (name, frac) in enumerate(fractions.items()):
            end = len(idx) if k == len(fractions) - 1 else start + round(frac * len(idx))
            out[name] += idx[start:end]
            start = end
    return {k: sorted(v) for k, v in out.items()}


def load_split(source, cache_dir: str | Path, split_seed: int, fractions=(0.8, 0.1, 0.1)) -> tuple[dict[str, list[Example]], DataReport]:
    """train/val/test examples (text, label, "file:line") and the report of how they were read and split.
    Splits the source lacks are cut from its pool ("all") by a seeded stratified split; evaluation rows whose
    text occurs in an earlier split are dropped (reading.drop_overlap). Written once to the cache so every
    run (and the MLM corpus) sees exactly the same split."""
    cache_dir = Path(cache_dir).expanduser()
    key = hashlib.sha256(f"v3|{source.fingerprint}|{split_seed}|{tuple(fractions)}".encode()).hexdigest()[:16]  # v3: overlap by the model's text
    path = cache_dir / "classification" / key / "split.json"
    if not path.exists():
        report = DataReport("classification")
        given = source.load(cache_dir, report)
        pool = given.pop("all")
        missing = [s for s in SPLITS if s != "train" and s not in given]
        wanted = {"train": fractions[0], **{s: fractions[SPLITS.index(s)] for s in missing}}
        total = sum(wanted.values())
        idx = stratified_split([y for _, y, _ in pool], {k: v / total for k, v in wanted.items()}, split_seed)
        cut = {**given, **{k: [pool[i] for i in v] for k, v in idx.items()}}
        for name in SPLITS:
            if not cut[name]:
                prefix = source.prefix
                raise DataError(f"the {name} split is empty ({len(pool)} training rows are too few to split 80/10/10); "
                                f"give more rows, or {prefix}valid_file / {prefix}test_file")
        splits = drop_overlap(cut, lambda row: normalize_sentence(row[0]), source.eval_overlap, report, source.prefix,
                              order=SPLITS, where=lambda row: row[2], what="text")
        for name in SPLITS:
            if not splits[name]:
                raise DataError(f"nothing is left of the {name} split: all {len(cut[name])} of its rows also occur in an "
                                "earlier split; give held-out rows that differ from the training data")
        write_once(path, json.dumps({"splits": splits, "report": report.to_dict()}, ensure_ascii=False))
    cached = json.loads(path.read_text(encoding="utf-8"))
    return {k: [tuple(r) for r in v] for k, v in cached["splits"].items()}, DataReport.from_dict(cached["report"])


class LabelledTextCorpus:
    """The texts of a labelled source as an unlabelled corpus (lab.data.corpora interface) for MLM: the train
    split's sentences train, the val split's validate; test sentences are never seen in pretraining."""

    def __init__(self, source, split_seed: int = 0):
        self.source, self.split_seed = source, split_seed

    def load(self, cache_dir: str | Path) -> Documents:
        splits, report = load_split(self.source, cache_dir, self.split_seed)
        docs = lambda s: [(f"{s}{i}", t) for i, (t, _, _) in enumerate(splits[s])]  # noqa: E731
        key = f"{self.source.fingerprint}|split={self.split_seed}"
        return Documents(docs("train"), docs("val"), hashlib.sha256(key.encode()).hexdigest()[:16], report)


def tokenizer_from_checkpoint(path: str):
    """The tokenizer stored in a lab checkpoint (or a Hugging Face model directory's tokenizer.json): fine-tuning
    must read text exactly as pretraining did."""
    p = Path(path).expanduser()
    if p.is_dir() and (p / "tokenizer.json").is_file():
        return tokenizer_from_hf_dir(p)
    if not p.is_file():
        raise DataError(f"data.tokenizer_from={path}: no such checkpoint; give the pretrained run's .ckpt")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)  # someone else's file runs no code
    except pickle.UnpicklingError as e:
        refusal = UnsafeFileError.from_load_error(f"data.tokenizer_from={path}", e, p)
        if refusal is None:
            raise
        raise refusal from None
    meta = (ckpt.get("lab") if isinstance(ckpt, dict) else None) or {}
    if "tokenizer" not in meta:
        raise DataError(f"data.tokenizer_from={path} is not a lab checkpoint (no tokenizer inside)")
    return tokenizer_from_json(meta["tokenizer"])


class TextClassificationDataModule(LabDataModule):
    """Fields:
    source: MovieReviews or LabelledFiles (or any object with load(cache_dir, report), fingerprint, eval_overlap, prefix).
    tokenizer: wordpiece (trained on the train split, cached) | bpe | char; vocab_size for wordpiece/bpe.
    tokenizer_from: a lab checkpoint whose tokenizer to use instead (fine-tuning a pretrained encoder).
    max_length: tokens per sentence including [CLS] and [SEP]. batch_size: GLOBAL sentences per step.
    bucketing: length-bucketed batches (less padding). split_seed: the data split (not the run's seed).
    eval_batches: validation/test batches to use (null: all).
    """
    shards_batches = True  # BucketBatchSampler takes each rank's batches itself (see lab.train)

    def __init__(self, source, tokenizer: str = "wordpiece", vocab_size: int = 8000, tokenizer_from: str | None = None,
                 max_length: int = 128, batch_size: int = 32, bucketing: bool = True, split_seed: int = 0,
                 eval_batches: int | None = None, cache_dir: str = "~/.cache/lab", seed: int = 1337, num_workers: int = 0):
        super().__init__()
        self.source, self.tokenizer_kind, self.vocab_size_setting = source, tokenizer, vocab_size
        self.tokenizer_from, self.max_length, self.batch_size = tokenizer_from, max_length, batch_size
        self.bucketing, self.split_seed, self.eval_batches = bucketing, split_seed, eval_batches
        self.cache_dir, self.seed, self.num_workers = Path(cache_dir).expanduser(), seed, num_workers
        self.encoded: dict[str, tuple[list[list[int]], list[int]]] = {}

    def prepare_data(self) -> None:
        self._load()

    def _load(self):
        splits, report = load_split(self.source, self.cache_dir, self.split_seed)
        if self.tokenizer_from:
            tok = tokenizer_from_checkpoint(self.tokenizer_from)
        else:
            key = hashlib.sha256(f"{self.source.fingerprint}|{self.split_seed}|{training_key(self.tokenizer_kind)}|{self.vocab_size_setting}".encode())
            path = self.cache_dir / "classification" / "tokenizers" / f"{key.hexdigest()[:16]}.json"
            tok = load_or_train(path, self.tokenizer_kind, [normalize_sentence(t) for t, _, _ in splits["train"]], BERT_SPECIALS,
                                self.vocab_size_setting)
        missing = [s for s in BERT_SPECIALS if tok.token_id(s) is None]
        if missing:
            raise DataError(f"the tokenizer lacks the special token(s) {missing}; train it with {BERT_SPECIALS}")
        return splits, tok, report

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:
            return
        splits, tok, report = self._load()
        # the model's input is the tokens: texts that differ only where the tokenizer normalises (wordpiece
        # lowercases and strips accents) are the same input, so held-out copies of that kind go too (said); a
        # text with unknown tokens keeps its own key (distinct words that are all [UNK] to it are not copies)
        cut, prefix, unk = splits, self.source.prefix, tok.token_id("[UNK]")

        def key(row: Example):
            text = normalize_sentence(row[0])
            ids = tuple(tok.encode(text))
            return text if unk in ids else ids

        splits = drop_overlap(cut, key, self.source.eval_overlap, report, prefix, order=SPLITS, where=lambda row: row[2],
                              what="tokens", repeats=False)
        for name in SPLITS:
            if not splits[name]:
                raise DataError(f"nothing is left of the {name} split: all {len(cut[name])} of its rows are, as the "
                                "tokenizer reads them, rows of an earlier split; give held-out rows that differ")
        self.labels = label_order(y for _, y, _ in splits["train"])
        if len(self.labels) < 2:
            raise DataError(f"the training data has a single label {excerpt(self.labels[0])} ({len(splits['train'])} rows): a "
                            "classifier needs at least two classes; check data.label_field and the label column")
        index = {y: i for i, y in enumerate(self.labels)}
        for name in SPLITS:
            unknown = [(y, w) for _, y, w in splits[name] if y not in index]
            if unknown:
                raise DataError(f"the {name} split has label(s) {excerpt(', '.join(label_order(y for y, _ in unknown)))} that never occur in "
                                f"the training data (first at {unknown[0][1]}); fix those labels, or give training rows with them")
            ids = [encode_sentence(tok, t, self.max_length) for t, _, _ in splits[name]]
            for (t, _, where), x in zip(splits[name], ids):  # only a full-length one can have been cut
                if len(x) == self.max_length and len(tok.encode(t)) > self.max_length - 2:
                    report.note("truncated", name, f"texts longer than data.max_length={self.max_length} tokens (cut)", where)
            self.encoded[name] = (ids, [index[y] for _, y, _ in splits[name]])
            report.split(name, rows=len(ids), characters=sum(len(t) for t, _, _ in splits[name]),
                         labels=label_counts(y for _, y, _ in splits[name]))
        rows = len(splits["train"])
        if self.batch_size > rows:
            report.note("changed", "train", f"batch size: data.batch_size={self.batch_size} is more than the {rows:,} "
                        f"training rows; each step takes all {rows:,}")
        self.tokenizer, self.pad_id = tok, tok.token_id("[PAD]")
        self.report = report.to_dict()
        report.log()

    @property
    def vocab(self) -> dict[str, int]:
        return {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.pad_id, "num_labels": len(self.labels)}

    def checkpoint_metadata(self) -> dict:
        return {"labels": self.labels, "max_length": self.max_length}

    def collate(self, items: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, labels = zip(*items)
        return pad_batch(ids, self.pad_id), torch.tensor(labels)  # [B, T], [B]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        ids, labels = self.encoded[split]
        data = list(zip(ids, labels))
        t = self.trainer
        bs = per_device_batch(self.batch_size, t)
        rank, world = (t.global_rank, t.world_size) if t is not None else (0, 1)
        lengths = [len(x) for x in ids] if self.bucketing else [0] * len(ids)  # all equal: plain random batches
        sampler = BucketBatchSampler(lengths, bs, shuffle, self.seed, rank=rank, world=world)
        if shuffle:
            sampler.resume(t)  # a resumed run continues with the batch the interrupted one would have loaded next
        elif self.eval_batches:
            sampler = list(sampler)[: self.eval_batches]
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)



class LabelledFilesDataModule(TextClassificationDataModule):
    """TextClassificationDataModule on the user's files, with the file fields at the top level of the data
    config (data.train_file=x.tsv data.text_field=review ...); see LabelledFiles."""

    def __init__(self, train_file: str, valid_file: str | None = None, test_file: str | None = None,
                 text_field: str = "text", label_field: str = "label", encoding: str = "utf-8",
                 encoding_errors: str = "strict", quoting: str = "none", bad_lines: str = "error",
                 eval_overlap: str = "drop", **kwargs):
        super().__init__(LabelledFiles(train_file, valid_file, test_file, text_field, label_field, encoding, encoding_errors,
                                       quoting, bad_lines, eval_overlap, prefix="data."), **kwargs)
