"""The user's own files, read exactly (issue 20): a table of small crafted files per task, each asserting the
exact rows read / kept / dropped, the labels, and the report line or the one error line; a cold cache raced
by 4 processes; and the CLI turning a data mistake into one `error:` line, exit 2, before training."""
from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import run_dirs, run_module, train

from lab.data.classification import LabelledFilesDataModule, load_split
from lab.data.corpora import TextFiles
from lab.data.lm import LMDataModule
from lab.data.parallel import ParallelTextDataModule
from lab.errors import DataError

BOM = "\ufeff"


def events(dm) -> dict[tuple[str, str, str], tuple[int, list[str]]]:
    return {(e["action"], e["split"], e["reason"]): (e["count"], e["first"]) for e in dm.report["events"]}


def event(dm, action: str, split: str, reason_part: str) -> tuple[int, list[str]]:
    """(count, first locations) of the one report event whose reason contains reason_part; (0, []) if none."""
    found = [v for (a, s, r), v in events(dm).items() if a == action and s == split and reason_part in r]
    assert len(found) <= 1, found
    return found[0] if found else (0, [])


def write(tmp_path: Path, files: dict[str, str | bytes]) -> dict[str, Path]:
    out = {}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        out[name] = tmp_path / name
    return out


# ---------------------------------------------------------------- classification (text_classification)

BASE = "text\tlabel\n" + "".join(f"good film {i}\tpos\nbad film {i}\tneg\n" for i in range(10))  # lines 2-21
VAL = "text\tlabel\nfresh good\tpos\nfresh bad\tneg\n"
TEST = "text\tlabel\nnew good\tpos\nnew bad\tneg\n"
CSV = "text,label\r\n" + "".join(f"good film {i},pos\r\nbad film {i},neg\r\n" for i in range(10))


def jsonl(*rows) -> str:
    return "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows)


# id, files (the first is train_file; val.* / test.* are valid_file / test_file), options, expected:
#   an error regex, or {"rows": [train, val, test], "labels": {...train counts}, "texts": [in train],
#                       "events": {(action, split, reason part): (count, first locations)}}
CLASSIFY_CASES = [
    ("tsv-quote-is-text", {"train.tsv": BASE + '"unclosed quote\tpos\n', "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [21, 2, 2], "labels": {"neg": 10, "pos": 11}, "texts": ['"unclosed quote']}),
    ("tsv-extra-tab-is-an-error", {"train.tsv": BASE + "a tab\tinside\tpos\n", "val.tsv": VAL, "test.tsv": TEST}, {},
     r"train.tsv:22: has 3 columns, the header has 2 \(tab-separated, no quote processing\); fix the line, or set "
     r"data.bad_lines=skip"),
    ("tsv-extra-tab-skipped-when-asked", {"train.tsv": BASE + "a tab\tinside\tpos\n", "val.tsv": VAL, "test.tsv": TEST},
     {"bad_lines": "skip"}, {"rows": [20, 2, 2], "labels": {"neg": 10, "pos": 10},
                             "events": {("dropped", "train_file", "wrong number of columns"): (1, ["train.tsv:22"])}}),
    ("tsv-csv-quoting-when-asked", {"train.tsv": BASE + '"a tab\tinside"\tpos\n', "val.tsv": VAL, "test.tsv": TEST},
     {"quoting": "csv"}, {"rows": [21, 2, 2], "labels": {"neg": 10, "pos": 11}, "texts": ["a tab\tinside"]}),
    ("labels-stripped-and-numeric", {"train.jsonl": jsonl(*[(f"t{i}", y) for i, y in enumerate([1, 1.0, "1 ", "2", 2.0, "10", 10, " 10.0"])]),
                                     "val.jsonl": jsonl(("v1", "1"), ("v2", 10)), "test.jsonl": jsonl(("x", 2))}, {},
     {"rows": [8, 2, 1], "labels": {"1": 3, "2": 2, "10": 3},  # numeric order: 2 before 10
      "events": {("changed", "train_file", "labels normalised"): (4, ["train.jsonl:2", "train.jsonl:3", "train.jsonl:5", "train.jsonl:8"])}}),
    ("csv-bom-header-and-quoted-comma", {"train.csv": BOM + CSV + '"hello, world",pos\r\n', "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [21, 2, 2], "labels": {"neg": 10, "pos": 11}, "texts": ["hello, world"], "bom": True}),
    ("csv-unclosed-quote-is-an-error", {"train.csv": CSV + '"never closed,pos\r\nbad film,neg\r\n'}, {},
     r"train.csv:22: unexpected end of data \(a quote opened on line 22 is never closed\?\)"),
    ("bom-header-tsv", {"train.tsv": BOM + BASE, "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [20, 2, 2], "labels": {"neg": 10, "pos": 10}, "bom": True}),
    ("empty-label-is-an-error", {"train.tsv": BASE + "no label here\t \n", "val.tsv": VAL, "test.tsv": TEST}, {},
     r"train.tsv:22: has an empty 'label' field; fix the line, or set data.bad_lines=skip"),
    ("empty-text-skipped-when-asked", {"train.tsv": BASE + "\tpos\n", "val.tsv": VAL, "test.tsv": TEST}, {"bad_lines": "skip"},
     {"rows": [20, 2, 2], "events": {("dropped", "train_file", "empty text"): (1, ["train.tsv:22"])}}),
    ("jsonl-bad-line-names-its-line", {"train.jsonl": jsonl(*[(f"t{i}", i % 2) for i in range(49)]) + '{"text": "x", "label": }\n'}, {},
     r"train.jsonl:50: is not valid JSON \(Expecting value at column 24\)"),
    ("jsonl-missing-field-is-an-error", {"train.jsonl": jsonl(("a", 1)) + '{"text": "b"}\n'}, {},
     r"train.jsonl:2: has no 'label' field \(fields: 'text'\)"),
    ("single-class-is-one-error", {"train.tsv": "text\tlabel\n" + "".join(f"t{i}\tpos\n" for i in range(10)),
                                   "val.tsv": "text\tlabel\nv\tpos\n", "test.tsv": "text\tlabel\nw\tpos \n"}, {},
     r"the training data has a single label 'pos' \(10 rows\): a classifier needs at least two classes"),
    ("header-without-the-fields", {"train.tsv": BASE.replace("text\tlabel", "review\tsentiment", 1)}, {},
     r"train.tsv: the header line has no 'text' / 'label' column \(columns: 'review', 'sentiment'\); set data.text_field"),
    ("repeated-header-dropped", {"train.tsv": BASE + "text\tlabel\nlast one\tpos\n", "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [21, 2, 2], "events": {("dropped", "train_file", "repeated header"): (1, ["train.tsv:22"])}}),
    ("latin1-is-an-error-with-offset", {"train.tsv": ("text\tlabel\ncafé\tpos\n" + BASE[11:]).encode("latin-1")}, {},
     r"train.tsv is not valid utf-8 at byte offset 14 \(invalid continuation byte\); set data.encoding="),
    ("latin1-read-when-asked", {"train.tsv": ("text\tlabel\ncafé\tpos\n" + BASE[11:]).encode("latin-1"),
                                "val.tsv": VAL, "test.tsv": TEST}, {"encoding": "latin-1"},
     {"rows": [21, 2, 2], "texts": ["café"]}),
    ("utf16-without-option-is-an-error", {"train.tsv": BASE.encode("utf-16")}, {},
     r"train.tsv starts with a UTF-16 byte order mark; set data.encoding=utf-16"),
    ("utf16-read-when-asked", {"train.tsv": BASE.encode("utf-16"), "val.tsv": VAL.encode("utf-16"),
                               "test.tsv": TEST.encode("utf-16")}, {"encoding": "utf-16"},
     {"rows": [20, 2, 2], "labels": {"neg": 10, "pos": 10}, "bom": True}),
    ("zip-refused-by-name", {"train.tsv": b"PK\x03\x04\x00\x00" + bytes(range(256)) * 4}, {},
     r"train.tsv is a zip archive \(or .xlsx / .docx\) file, not text; unzip \S*train.tsv \(or export the sheet as .csv\)"),
    ("binary-refused", {"train.tsv": b"text\tlabel\x00\x00" + bytes(range(256)) * 4}, {},
     r"train.tsv holds NUL bytes \(byte offset 10\): a binary file, not text"),
    ("overlap-dropped-from-eval", {"train.tsv": BASE, "val.tsv": VAL + "good film 1\tpos\n",
                                   "test.tsv": TEST + "bad film 2\tneg\nfresh good\tpos\n"}, {},
     {"rows": [20, 2, 2], "events": {("dropped", "val", "also occurs in train"): (1, ["val.tsv:4"]),
                                     ("dropped", "test", "also occurs in train"): (1, ["test.tsv:4"]),
                                     ("dropped", "test", "also occurs in val"): (1, ["test.tsv:5"])}}),
    ("overlap-refused-when-asked", {"train.tsv": BASE, "val.tsv": VAL + "good film 1\tpos\n", "test.tsv": TEST},
     {"eval_overlap": "error"}, r"1 val row\(s\) also occur in an earlier split \(val.tsv:4\).*set data.eval_overlap=drop"),
    ("repeats-within-train-kept-and-said", {"train.tsv": BASE + "good film 3\tpos\n", "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [21, 2, 2], "events": {("kept", "train", "repeating"): (1, ["train.tsv:22"])}}),
    ("nothing-left-after-skipping", {"train.tsv": "text\tlabel\na\tb\tc\n\tpos\nx\t\n"}, {"bad_lines": "skip"},
     r"train.tsv: no usable rows are left \(3 dropped: 1 rows with the wrong number of columns \(first train.tsv:2\); "
     r"1 rows with an empty text \(first train.tsv:3\); 1 rows with an empty label \(first train.tsv:4\)\)"),
    ("split-cut-from-train", {"train.tsv": BASE}, {}, {"rows": [16, 2, 2], "labels": {"neg": 8, "pos": 8}}),
]


def classify(tmp_path: Path, files: dict, **options):
    paths = write(tmp_path, files)
    names = list(paths)
    val = next((str(p) for n, p in paths.items() if n.startswith("val.")), None)
    test = next((str(p) for n, p in paths.items() if n.startswith("test.")), None)
    dm = LabelledFilesDataModule(str(paths[names[0]]), val, test, cache_dir=str(tmp_path / "cache"),
                                 **{"tokenizer": "char", "max_length": 16, "batch_size": 2, **options})
    dm.setup()
    return dm


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in CLASSIFY_CASES], ids=[c[0] for c in CLASSIFY_CASES])
def test_classifier_reads_the_users_file_exactly(tmp_path, files, options, expected):
    if isinstance(expected, str):
        with pytest.raises(DataError, match=expected):
            classify(tmp_path, files, **options)
        return
    dm = classify(tmp_path, files, **options)
    splits = dm.report["splits"]
    assert [splits[s]["rows"] for s in ("train", "val", "test")] == expected["rows"]
    assert [len(dm.encoded[s][0]) for s in ("train", "val", "test")] == expected["rows"]
    if "labels" in expected:
        assert splits["train"]["labels"] == expected["labels"]
        assert dm.labels == list(expected["labels"])
    texts = {t for t, _, _ in load_split(dm.source, dm.cache_dir, dm.split_seed)[0]["train"]}
    assert set(expected.get("texts", [])) <= texts
    assert not any(t.startswith(BOM) for t in texts)
    assert any(f.get("bom_stripped") for f in dm.report["files"]) == expected.get("bom", False)
    for (action, split, reason), value in expected.get("events", {}).items():
        assert event(dm, action, split, reason) == value


def test_unclosed_quote_no_longer_merges_rows_and_a_tab_no_longer_makes_a_class(tmp_path):
    """The issue's two TSV cases: 100 rows with one unclosed quote stay 100 rows with their own labels."""
    rows = [("\"" if i == 10 else "") + f"review {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(100)]
    dm = classify(tmp_path, {"train.tsv": "text\tlabel\n" + "".join(rows)})
    assert sum(dm.report["splits"][s]["rows"] for s in ("train", "val", "test")) == 100
    assert [dm.report["splits"][s]["labels"] for s in ("train", "val", "test")] == [{"neg": 40, "pos": 40}, {"neg": 5, "pos": 5}, {"neg": 5, "pos": 5}]
    assert dm.labels == ["neg", "pos"]


def test_missing_or_directory_train_file_names_the_field(tmp_path):
    with pytest.raises(DataError, match=r"data.train_file=\S*nope.tsv does not exist"):
        LabelledFilesDataModule(str(tmp_path / "nope.tsv"), cache_dir=str(tmp_path)).setup()
    with pytest.raises(DataError, match=r"data.train_file=\S* is a directory"):
        LabelledFilesDataModule(str(tmp_path), cache_dir=str(tmp_path)).setup()


# ---------------------------------------------------------------- translation (parallel_text)

PAIRS = "".join(f"das ist satz {i}.\tthis is sentence {i}.\n" for i in range(20))
LONG = " ".join(["wort"] * 60)
VALID, TESTP = "ein neuer satz.\ta new sentence.\n", "noch ein satz.\tanother sentence.\n"


def pairs_jsonl(*rows) -> str:
    return "".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in rows)


PARALLEL_CASES = [
    ("three-columns-is-an-error", {"train.tsv": PAIRS + "a\tb\tc\n"}, {},
     r"train.tsv:21: has 3 columns, the first row has 2 \(tab-separated, no quote processing\)"),
    ("three-columns-skipped-when-asked", {"train.tsv": PAIRS + "a\tb\tc\n", "valid.tsv": VALID, "test.tsv": TESTP},
     {"bad_lines": "skip"}, {"pairs": [20, 1, 1], "events": {("dropped", "train_file", "wrong number of columns"): (1, ["train.tsv:21"])}}),
    ("jsonl-null-target-is-an-error", {"train.jsonl": pairs_jsonl(("a b.", "c d."), ("e f.", None))}, {},
     r"train.jsonl:2: has an empty or non-text target \(null\)"),
    ("jsonl-bad-line-names-its-line", {"train.jsonl": pairs_jsonl(*[("a.", "b.")] * 6) + "{oops\n"}, {},
     r"train.jsonl:7: is not valid JSON"),
    ("empty-sides-skipped-when-asked", {"train.tsv": PAIRS + "\tonly a target.\nnur eine quelle.\t \n",
                                        "valid.tsv": VALID, "test.tsv": TESTP}, {"bad_lines": "skip"},
     {"pairs": [20, 1, 1], "events": {("dropped", "train_file", "empty or non-text side"): (2, ["train.tsv:21", "train.tsv:22"])}}),
    ("bom-and-header-detected", {"train.tsv": BOM + "source\ttarget\n" + PAIRS, "valid.tsv": VALID, "test.tsv": TESTP}, {},
     {"pairs": [20, 1, 1], "first": "das ist satz 0.", "events": {("skipped", "train_file", "header"): (1, ["train.tsv:1"])}}),
    ("header-configured", {"train.tsv": "de\ten\n" + PAIRS, "valid.tsv": "de\ten\n" + VALID, "test.tsv": "de\ten\n" + TESTP},
     {"header": True},
     {"pairs": [20, 1, 1], "first": "das ist satz 0."}),
    ("overlap-dropped-from-eval", {"train.tsv": PAIRS, "valid.tsv": VALID + "das ist satz 3.\tanother translation.\n",
                                   "test.tsv": TESTP + VALID}, {},
     {"pairs": [20, 1, 1], "events": {("dropped", "valid", "also occurs in train"): (1, ["valid.tsv:2"]),
                                      ("dropped", "test", "also occurs in valid"): (1, ["test.tsv:2"])}}),
    ("overlap-in-a-cut-split", {"train.tsv": PAIRS + PAIRS}, {"valid_size": 2, "test_size": 2},
     {"pairs": [36, 0, 0]}),  # every held-out pair repeats a training one: nothing would be left (checked below)
    ("long-pairs-dropped-and-truncated", {"train.tsv": PAIRS + f"{LONG}.\tshort.\n", "valid.tsv": VALID,
                                          "test.tsv": TESTP + f"{LONG} zwei.\tshort.\n"}, {"max_tokens": 16},
     {"pairs": [20, 1, 2], "events": {("dropped", "train", "longer than data.max_tokens=16"): (1, ["train.tsv:21"]),
                                      ("truncated", "test", "sources longer than data.max_tokens=16"): (1, ["test.tsv:2"])}}),
    ("source-column-out-of-range", {"train.tsv": PAIRS}, {"source_column": 2},
     r"train.tsv:1: has 2 tab-separated columns, too few for data.source_column / target_column = \(2, 1\)"),
    ("missing-valid-file", {"train.tsv": PAIRS}, {"valid_file": "nope.tsv"}, r"data.valid_file=nope.tsv does not exist"),
    ("latin1-is-an-error-with-offset", {"train.tsv": "straße.\tstreet.\n".encode("latin-1")}, {},
     r"train.tsv is not valid utf-8 at byte offset 4"),
]


def translate(tmp_path: Path, files: dict, **options):
    paths = write(tmp_path, files)
    named = {f"{n.split('.')[0]}_file": str(p) for n, p in paths.items()}
    settings = {"valid_size": 1, "test_size": 1, "batch_size": 2, **options}
    dm = ParallelTextDataModule(**{**named, **{k: v for k, v in settings.items() if k.endswith("_file")}},
                                **{k: v for k, v in settings.items() if not k.endswith("_file")},
                                cache_dir=str(tmp_path / "cache"), vocab_size=300, eval_batch_size=2)
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in PARALLEL_CASES], ids=[c[0] for c in PARALLEL_CASES])
def test_translator_reads_the_users_pairs_exactly(tmp_path, files, options, expected):
    if isinstance(expected, str):
        with pytest.raises(DataError, match=expected):
            translate(tmp_path, files, **options)
        return
    if expected["pairs"][1] == 0:
        with pytest.raises(DataError, match="nothing is left of the valid split: all 2 of its pairs have a source"):
            translate(tmp_path, files, **options)
        return
    dm = translate(tmp_path, files, **options)
    assert [dm.report["splits"][s]["pairs"] for s in ("train", "valid", "test")] == expected["pairs"]
    assert [len(dm.datasets[s]) for s in ("train", "valid", "test")] == expected["pairs"]
    sources = [s for s, _ in dm.datasets["train"].pairs]
    if "first" in expected:
        assert expected["first"] in sources and not any(s.startswith((BOM, "source", "de")) for s in sources)
    for (action, split, reason), value in expected.get("events", {}).items():
        assert event(dm, action, split, reason) == value
    if "long" in str(expected):
        assert dm.dropped_long == 1


# ---------------------------------------------------------------- language modelling (text_files)

TEXT = "to be or not to be, that is the question.\n" * 10  # 420 characters


def lm(tmp_path: Path, files: dict, val: list[str] | None = None, **options):
    write(tmp_path, files)
    corpus = TextFiles([str(tmp_path / n) for n in files if n not in (val or [])],
                       [str(tmp_path / n) for n in val] if val else None, **options)
    dm = LMDataModule(corpus, tokenizer="char", block_size=8, batch_size=2, cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup()
    return dm


LM_CASES = [
    ("latin1-is-an-error-with-offset", {"a.txt": "café au lait\n".encode("latin-1") * 50}, {},
     r"a.txt is not valid utf-8 at byte offset 3 \(invalid continuation byte\); set data.corpus.encoding="),
    ("latin1-read-when-asked", {"a.txt": "café au lait\n".encode("latin-1") * 50}, {"encoding": "latin-1"},
     {"characters": 650, "has": "é"}),
    ("replaced-only-when-asked", {"a.txt": "café au lait\n".encode("latin-1") * 50}, {"encoding_errors": "replace"},
     {"characters": 650, "has": "\ufffd", "events": {("changed", "train_files", "replaced by U+FFFD"): (50, [])}}),
    ("utf16-without-bom-is-refused", {"a.txt": TEXT.encode("utf-16-le")}, {}, r"a.txt holds NUL bytes \(byte offset 1\)"),
    ("utf16-read-when-asked", {"a.txt": TEXT.encode("utf-16")}, {"encoding": "utf-16"}, {"characters": 420, "bom": True}),
    ("control-bytes-refused", {"a.txt": bytes(range(1, 32)) * 40}, {}, r"a.txt holds 880 control characters in 1240: it is binary"),
    ("bom-stripped", {"a.txt": BOM + TEXT}, {}, {"characters": 420, "bom": True}),
    ("crlf-read-as-lines", {"a.txt": TEXT.replace("\n", "\r\n")}, {}, {"characters": 420}),
    ("empty-file-skipped", {"a.txt": TEXT, "b.txt": "  \n"}, {},
     {"characters": 420, "events": {("skipped", "train_files", "empty files"): (1, ["b.txt"])}}),
    ("val-file-identical-to-train-dropped", {"a.txt": TEXT, "v.txt": TEXT, "w.txt": TEXT.upper()}, {"val": ["v.txt", "w.txt"]},
     {"characters": 840, "val_documents": 1, "events": {("dropped", "val", "also occurs in train"): (1, ["v.txt"])}}),
    ("val-only-duplicates-is-an-error", {"a.txt": TEXT, "v.txt": TEXT}, {"val": ["v.txt"]},
     r"nothing is left for validation: every val file is identical to a training file"),
    ("val-duplicates-refused-when-asked", {"a.txt": TEXT, "v.txt": TEXT, "w.txt": TEXT.upper()},
     {"val": ["v.txt", "w.txt"], "eval_overlap": "error"}, r"1 val file\(s\) also occur in an earlier split \(\S*v.txt\)"),
    ("too-few-tokens-names-file-and-split", {"a.txt": TEXT, "v.txt": "hi\n"}, {"val": ["v.txt"]},
     r"the val split \(\S*v.txt\) is 4 tokens, too few for windows of data.block_size=8"),
    # the issue's case: half the records' text is "", once vanished from every count
    ("empty-records-counted", {"a.jsonl": ('{"text": "some text here"}\n{"text": ""}\n') * 200}, {},
     {"characters": 200 * 14, "documents": 200, "empty": 200}),
    # the case: every record's field is `content`; said with the count and the setting that fixes it
    ("skipped-records-name-the-field-setting", {"a.jsonl": '{"content": "some words"}\n' * 300},
     {"bad_lines": "skip"}, r"^the train split is 0 tokens, too few .*; 300 lines were dropped \(300 lines without a string "
                           r"'text', first a.jsonl:1\); set data.corpus.text_field to the field that holds the text"),
]


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in LM_CASES], ids=[c[0] for c in LM_CASES])
def test_language_model_reads_the_users_text_exactly(tmp_path, files, options, expected):
    val = options.pop("val", None)
    if isinstance(expected, str):
        with pytest.raises(DataError, match=expected):
            lm(tmp_path, files, val, **options)
        return
    dm = lm(tmp_path, files, val, **options)
    splits = dm.report["splits"]
    assert splits["train"]["characters"] + splits["val"]["characters"] == expected["characters"]
    assert splits["train"]["tokens"] + splits["val"]["tokens"] == len(dm.train_tokens) + len(dm.val_tokens)
    if "documents" in expected:  # every record either a document or counted as dropped, over the splits
        assert splits["train"]["documents"] + splits["val"]["documents"] == expected["documents"]
        assert sum(c for (a, _, r), (c, _) in events(dm).items() if a == "dropped" and "records with an empty" in r) == expected["empty"]
    if "val_documents" in expected:
        assert splits["val"]["documents"] == expected["val_documents"]
    chars = set(dm.tokenizer.itos)
    assert "\r" not in chars and BOM not in chars and (expected.get("has", "t") in chars)
    assert any(f.get("bom_stripped") for f in dm.report["files"]) == expected.get("bom", False)
    for (action, split, reason), (count, first) in expected.get("events", {}).items():
        assert event(dm, action, split, reason) == (count, [str(tmp_path / f) for f in first])  # documents by path


def test_a_symbolic_link_loop_or_a_dangling_link_is_named_as_such(tmp_path):
    """Not "does not exist": the link is there; what is wrong is where it points."""
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "moved.txt")
    with pytest.raises(DataError, match=r"loop.txt is a symbolic link loop; point it at the file"):
        TextFiles([str(tmp_path / "loop.txt")]).files(tmp_path)
    with pytest.raises(DataError, match=r"gone.txt is a symbolic link to \S*moved.txt, which does not exist"):
        TextFiles([str(tmp_path / "gone.txt")]).files(tmp_path)


# ---------------------------------------------------------------- concurrent cold caches

def _build_everything(cache: Path, inputs: Path) -> dict[str, str]:
    """Every cache writer of lab.data on tiny inputs -> a hash of what each left in the cache."""
    from lab.data.classification import LabelledFiles
    from lab.data.sources.packages import extract_once
    from lab.data.tokenizers import load_or_train

    digest = lambda data: hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()[:12]  # noqa: E731
    out = {}
    tok = load_or_train(cache / "tok" / "t.json", "bpe", [TEXT] * 3, ["<s>"], 300)
    out["tokenizer"] = digest(tok.to_json())
    extracted = extract_once(inputs / "a.tar", cache / "extracted")
    out["extract"] = digest((extracted / "a.txt").read_bytes())
    dm = LMDataModule(TextFiles(str(inputs / "a.txt")), tokenizer="char", block_size=8, cache_dir=str(cache))
    dm.prepare_data()
    dm.setup()
    out["lm"] = digest(np.asarray(dm.train_tokens).tobytes()) + digest(json.dumps(dm.meta))
    splits, _ = load_split(LabelledFiles(str(inputs / "train.tsv")), cache, 0)
    out["split"] = digest(json.dumps(splits))
    pm = ParallelTextDataModule(str(inputs / "pairs.tsv"), valid_size=2, test_size=2, vocab_size=300, cache_dir=str(cache))
    pm.prepare_data()
    pm.setup()
    out["parallel"] = digest(pm.tokenizer.to_json()) + digest(json.dumps(pm.datasets["test"].pairs))
    return out


def _racer(rounds: int, base: str, inputs: str, barrier, results) -> None:
    for r in range(rounds):
        barrier.wait()  # all 4 start on the same empty cache directory at once
        try:
            results.put((r, _build_everything(Path(base) / f"round{r}", Path(inputs))))
        except Exception as e:  # reported to the test, which fails naming it
            results.put((r, f"{type(e).__name__}: {e}"))


def test_four_processes_on_one_cold_cache_all_succeed_with_identical_data(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    write(inputs, {"a.txt": TEXT, "train.tsv": BASE, "pairs.tsv": PAIRS})
    with tarfile.open(inputs / "a.tar", "w") as tar:
        data = TEXT.encode()
        info = tarfile.TarInfo("a.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    rounds, n = 20, 4
    ctx = multiprocessing.get_context("fork")  # the children start with lab imported: the test measures the races, not imports
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(rounds, str(tmp_path / "cache"), str(inputs), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in range(rounds * n)]
    for p in procs:
        p.join(timeout=60)
    failures = [(r, x) for r, x in got if isinstance(x, str)]
    assert not failures, failures[:3]
    by_round = {}
    for r, x in got:
        by_round.setdefault(r, []).append(x)
    assert all(len(v) == n and all(x == v[0] for x in v) for v in by_round.values())
    assert len({json.dumps(v[0], sort_keys=True) for v in by_round.values()}) == 1  # and every round built the same
    assert not list((tmp_path / "cache").rglob("*.tmp")) and not list((tmp_path / "cache").rglob(".build-*"))


# ---------------------------------------------------------------- through the CLI

TINY_CLASSIFIER = ["+experiment=encoder_classifier", "data=text_classification", "data.tokenizer=char",
                   "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=32", "data.batch_size=4",
                   "trainer.max_steps=2", "trainer.val_check_interval=2", "logger.wandb.mode=disabled", "callbacks.progress=null"]


@pytest.mark.parametrize("content,message", [
    (None, r"data.train_file=\S*train.tsv does not exist"),
    ("text\tlabel\n" + "".join(f"t{i}\tpos\n" for i in range(20)), r"a single label 'pos' \(16 rows\)"),  # the 80% that trains
    ("text\tlabel\nok\tpos\na\ttab\tneg\n", "train.tsv:3: has 3 columns, the header has 2"),
], ids=["missing-file", "single-class", "wrong-columns"])
def test_a_data_mistake_is_one_error_line_and_exit_2_before_training(tmp_path, content, message):
    if content is not None:
        (tmp_path / "train.tsv").write_text(content)
    out = run_module("lab.train", [*TINY_CLASSIFIER, f"data.train_file={tmp_path / 'train.tsv'}",
                                   f"paths.cache_dir={tmp_path / 'cache'}"], tmp_path / "runs")
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


def test_the_run_directory_and_the_log_carry_the_data_report(tmp_path):
    (tmp_path / "train.tsv").write_text(BASE + "good film 3\tpos \nx\t1\tpos\n")
    train([*TINY_CLASSIFIER, f"data.train_file={tmp_path / 'train.tsv'}", "data.bad_lines=skip",
           f"paths.cache_dir={tmp_path / 'cache'}"], tmp_path / "runs")
    run = run_dirs(tmp_path / "runs")[-1]
    report = json.loads((run / "data_report.json").read_text())
    assert sum(report["splits"][s]["rows"] for s in ("train", "val", "test")) == 21 - sum(
        e["count"] for e in report["events"] if e["action"] == "dropped" and e["split"] in ("val", "test"))
    assert {(e["action"], e["reason"], e["count"]) for e in report["events"] if e["split"] == "train_file"} >= {
        ("dropped", "rows with the wrong number of columns", 1), ("changed", "labels normalised (Unicode NFC, whitespace, numbers as 1 / 0.5)", 1)}
    log = (run / "train.log").read_text()
    assert "data: dropped in train_file: 1 rows with the wrong number of columns (first: train.tsv:23)" in log
    assert "data_report" in (run / "csv" / "hparams.yaml").read_text()


def test_a_text_given_as_a_number_is_read_as_json_writes_it_and_counted(tmp_path):
    """A JSON-lines text or pair side that is a number or true/false becomes its JSON text ("12", "true"): a value
    replaced, so counted as changed (it was silent) in the labelled-file and the parallel readers."""
    from lab.data.classification import LabelledFiles
    from lab.data.parallel import ParallelFiles
    from lab.data.sources.reading import DataReport

    rows = [{"text": f"review number {i}", "label": "a" if i % 2 else "b"} for i in range(6)]
    rows[2]["text"], rows[4]["text"] = 12, True
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = DataReport()
    read = LabelledFiles(str(tmp_path / "c.jsonl")).load(tmp_path, report)["all"]
    assert [t for t, _, _ in read][2:5:2] == ["12", "true"]
    changed = [(k, e["count"], e["first"]) for k, e in report.events.items() if k[0] == "changed"]
    assert changed == [(("changed", "train_file", "texts given as a number or true/false (read as JSON writes them)"), 2,
                        ["c.jsonl:3", "c.jsonl:5"])]
    pairs = [{"source": f"Satz {i}.", "target": f"sentence {i}."} for i in range(4)]
    pairs[1]["target"] = 7
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    report = DataReport()
    read = ParallelFiles(str(tmp_path / "p.jsonl")).load(tmp_path, report)["train"]
    assert read[1][:2] == ("Satz 1.", "7")
    assert report.count("changed", "train_file") == 1
