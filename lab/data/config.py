"""The schemas of `data`: one typed dataclass per datamodule (and per corpus or source it reads), which Hydra
composes conf/data/*.yaml onto (lab.runtime.cli.schemas registers them), so a wrong type, an unknown key or a
`???` left unset is refused while the config is composed. What a type cannot say (ranges) is RANGES below,
checked by lab.runtime.cli.config_checks before any data is read. Light: no torch here.

A new data setting: a field on its datamodule's dataclass here, an argument of the datamodule's __init__ with
the same name and default, and a RANGES row when not every value of its type is valid."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import II, MISSING

# ---- corpora and sources (the nested `data.corpus`, `data.source`, items of `data.corpora`) ----

@dataclass
class ShakespeareConfig:
    """lab.data.corpora.Shakespeare: validation and test hold out whole works."""

    _target_: str = "lab.data.corpora.Shakespeare"
    val_works: list[str] = MISSING
    """pick checkpoints."""
    test_works: list[str] | None = None
    """reported once, at the end (lab.eval too)"""
    max_works: int | None = None
    """train on the first N works only (tests use a small slice)"""


@dataclass
class TextFilesConfig:
    """lab.data.corpora.TextFiles: your own text files (.txt, .jsonl, .gz/.zst read as text)."""

    _target_: str = "lab.data.corpora.TextFiles"
    train_files: Any = MISSING
    """a path or glob, or a list of them."""
    val_files: Any = None
    """the same; None: val_fraction of the training files' bytes, at most val_max_mb"""
    val_fraction: float = 0.1
    """within val_max_mb: the last val_fraction of each file's bytes (before the test tail)"""
    test_files: Any = None
    """the same; None: test_fraction of the training files' bytes, at most test_max_mb (0: no test split)"""
    test_fraction: float = 0.0
    """within test_max_mb: the last test_fraction of each file's bytes"""
    val_max_mb: float | None = 4
    """cap on the validation text drawn from the training files, in MB of the files as stored (known before
    tokenizing: a token cap would need the tokenizer, which is trained on the split's training text). Over
    a cap, each held-out split is its capped size, in stretches of whole lines or records spread over the files;
    null: no cap"""
    test_max_mb: float | None = 4
    """the same for the test text, which the end-of-run test pass scores whole: 4 MB takes minutes on a CPU"""
    split_seed: int = 0
    """seeds where the capped held-out stretches lie (another seed: other text held out)"""
    encoding: str = "utf-8"
    """any Python codec: latin-1, cp1252, utf-16, ...; a file that is not valid is an error."""
    encoding_errors: str = "strict"
    """or replace: undecodable bytes become U+FFFD (counted)"""
    eval_overlap: str = "drop"
    """or error: a val file identical to a train file is removed / refused."""
    text_field: str = "text"
    """.jsonl files: each line a JSON object; this field of it is one document."""
    bad_lines: str = "error"
    """or skip: a .jsonl line without a string text_field is skipped (counted)"""


@dataclass
class MovieReviewsConfig:
    """lab.data.classification.MovieReviews: MR movie-review sentences, positive/negative."""

    _target_: str = "lab.data.classification.MovieReviews"


@dataclass
class DingConfig:
    """lab.data.parallel.Ding: German-English pairs of the Ding dictionary."""

    _target_: str = "lab.data.parallel.Ding"


# ---- datamodules ----

@dataclass
class LMDataConfig:
    """lab.data.lm.LMDataModule: a corpus streamed into token shards, windows of block_size."""

    _target_: str = "lab.data.lm.LMDataModule"
    corpus: Any = MISSING
    """the corpus (lab.data.corpora: data=shakespeare | text_files), with its settings."""
    tokenizer: str = "bpe"
    """char | bpe."""
    vocab_size: int = 2048
    """BPE merges target (ignored for char)"""
    block_size: int = II("model.max_seq_len")
    batch_size: int = 32
    """global, per optimizer step."""
    eval_batches: int = 20
    """validation: a sampled estimate from eval_batches x batch_size windows."""
    eval_stride: int | None = None
    """test: every token once, windows moved by this (None: block_size / 2)"""
    tokenizer_sample_mb: float | None = 100
    """BPE trains on the first N MB of the training text (None: all)"""
    verify: str = "stat"
    """cache key from file names, sizes, mtimes; content: hash the bytes."""
    shard_mb: float = 256
    """MB of token ids per shard: a killed preparation re-does at most one shard per split."""
    tokenizer_from: str | None = None
    """a Hugging Face model dir whose tokenizer.json encodes the text."""
    cache_dir: str = II("paths.cache_dir")
    seed: int = II("seed")
    num_workers: int = 0


@dataclass
class MLMDataConfig:
    """lab.data.mlm.MLMDataModule: unlabelled text of one or more corpora, streamed into segment shards."""

    _target_: str = "lab.data.mlm.MLMDataModule"
    corpora: list[Any] = MISSING
    """the corpora, each with its _target_ (lab.data.corpora, lab.data.classification.LabelledTextCorpus)."""
    vocab_size: int = 8000
    max_length: int = 64
    """tokens per segment incl. [CLS]/[SEP]."""
    batch_size: int = 64
    mask_prob: float = 0.15
    """of the real tokens; of those:"""
    replace_mask: float = 0.8
    """-> [MASK]."""
    replace_random: float = 0.1
    """-> a random token (the rest stay unchanged)"""
    bucketing: bool = True
    eval_batches: int | None = 50
    tokenizer_sample_mb: float | None = 100
    """WordPiece trains on the first N MB of the training text (None: all)"""
    verify: str = "stat"
    shard_mb: float = 256
    cache_dir: str = II("paths.cache_dir")
    seed: int = II("seed")
    num_workers: int = 0


@dataclass
class _ClassificationSettings:
    """What both classification datamodules take besides where their examples come from."""

    _target_: str = MISSING
    tokenizer: str = "wordpiece"
    """trained on the train split, cached."""
    vocab_size: int = 8000
    tokenizer_from: str | None = None
    """a lab checkpoint or Hugging Face model dir whose tokenizer to use."""
    max_length: int = II("model.max_seq_len")
    batch_size: int = 32
    """global, per optimizer step."""
    bucketing: bool = True
    """length-bucketed batches: less padding."""
    split_seed: int = 0
    """the data split; runs with different seeds share it."""
    eval_batches: int | None = None
    """None: the whole val/test split."""
    cache_dir: str = II("paths.cache_dir")
    seed: int = II("seed")
    num_workers: int = 0


@dataclass
class TextClassificationDataConfig(_ClassificationSettings):
    """lab.data.classification.TextClassificationDataModule: labelled text of a source, seeded 80/10/10 split."""

    _target_: str = "lab.data.classification.TextClassificationDataModule"
    source: Any = MISSING
    """where the labelled sentences come from (lab.data.classification.MovieReviews)."""


@dataclass
class LabelledFilesDataConfig(_ClassificationSettings):
    """lab.data.classification.LabelledFilesDataModule: your own labelled files (how they are read:
    lab/data/sources/reading.py)."""

    _target_: str = "lab.data.classification.LabelledFilesDataModule"
    train_file: str = MISSING
    valid_file: str | None = None
    test_file: str | None = None
    text_field: str = "text"
    label_field: str = "label"
    encoding: str = "utf-8"
    encoding_errors: str = "strict"
    quoting: str = "none"
    """.tsv: tabs separate and quotes are text; csv: CSV quoting with a tab delimiter."""
    bad_lines: str = "error"
    """or skip: rows with the wrong column count, an empty field or bad JSON (counted)"""
    eval_overlap: str = "drop"
    """or error: val/test rows whose text occurs in train are removed / refused."""


@dataclass
class _PairSettings:
    """What both parallel-text datamodules take besides where their pairs come from."""

    _target_: str = MISSING
    reverse: bool = False
    """translate from the target side to the source side."""
    valid_size: int = 1000
    test_size: int = 1000
    vocab_size: int = 8000
    """joint byte-level BPE over both languages of the training split."""
    tokenizer_from: str | None = None
    """a Hugging Face model dir whose tokenizer.json encodes both sides."""
    max_tokens: int = II("model.max_seq_len")
    batch_size: int = 64
    """global sentence pairs per optimizer step (when batch_tokens is None)"""
    batch_tokens: int | None = None
    """or global padded tokens (source + target) per step."""
    eval_batch_size: int = 100
    eval_overlap: str = "drop"
    """or error: valid/test pairs whose source occurs in train are removed / refused."""
    eval_batches: int | None = None
    """validation/test batches to use, the first ones of the split (None: all)"""
    cache_dir: str = II("paths.cache_dir")
    seed: int = 1337
    """the split and the batch order; fixed, so runs with different seeds share one test set."""
    num_workers: int = 0


@dataclass
class ParallelDataConfig(_PairSettings):
    """lab.data.parallel.ParallelDataModule: sentence pairs of a corpus, joint byte-level BPE."""

    _target_: str = "lab.data.parallel.ParallelDataModule"
    corpus: Any = MISSING
    """the corpus (lab.data.parallel.Ding), with its settings."""


@dataclass
class ParallelTextDataConfig(_PairSettings):
    """lab.data.parallel.ParallelTextDataModule: your own parallel text (how it is read:
    lab/data/sources/reading.py)."""

    _target_: str = "lab.data.parallel.ParallelTextDataModule"
    train_file: str = MISSING
    valid_file: str | None = None
    test_file: str | None = None
    source_column: int = 0
    """.tsv."""
    target_column: int = 1
    source_field: str = "source"
    """.jsonl."""
    target_field: str = "target"
    header: bool | None = None
    """.tsv first line; None: a header when it names source_field and target_field."""
    encoding: str = "utf-8"
    encoding_errors: str = "strict"
    quoting: str = "none"
    bad_lines: str = "error"


# (key, test, what it must be) for what the types above cannot say; each `what` completes "<key>=<value> must be".
RANGES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("data.batch_size", lambda v: v >= 1, "an integer >= 1"),
    ("data.eval_batch_size", lambda v: v >= 1, "an integer >= 1"),
    ("data.batch_tokens", lambda v: v is None or v >= 1, "an integer >= 1 or null"),
    ("data.max_length", lambda v: v >= 1, "an integer >= 1"),
    ("data.max_tokens", lambda v: v >= 1, "an integer >= 1"),
    ("data.vocab_size", lambda v: v >= 1, "an integer >= 1"),
    ("data.eval_batches", lambda v: v is None or v >= 1, "an integer >= 1 or null"),
    ("data.num_workers", lambda v: v >= 0, "an integer >= 0"),
    ("data.mask_prob", lambda v: 0 < v < 1, "a number in (0, 1)"),
    ("data.corpus.val_max_mb", lambda v: v is None or v > 0, "a positive number of MB or null (no cap)"),
    ("data.corpus.test_max_mb", lambda v: v is None or v > 0, "a positive number of MB or null (no cap)"),
]
