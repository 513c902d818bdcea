"""Reading the user's messy files (lab.data.sources.reading, through the three tasks' datamodules): each case
read exactly and reported with its counts, or refused in one short `error:` line that names the problem and a
fix. A seeded fuzz test over randomly damaged files holds every outcome to the same rule, with the lines of each
file accounted for."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import random
import re
import shutil
import time
import unicodedata
from pathlib import Path

import pytest
from conftest import one_short_line, refused
from test_data_files import BASE, PAIRS, TEST, TESTP, TEXT, VAL, VALID, classify, event, translate, write

from lab.data.classification import LabelledFilesDataModule
from lab.data.sources.reading import label_of, label_order
from lab.errors import DataError

NFD = unicodedata.normalize("NFD", "café")
CSV_TEXT = "text,label\n" + "".join(f"good film {i},pos\nbad film {i},neg\n" for i in range(10))


def padded(rows: int) -> str:
    """BASE and `rows` more training rows: a file larger than 8 KB (where the binary check used to stop)."""
    return BASE + "".join(f"filler review number {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(rows))


NUL_LATE = padded(400)
NUL_LATE = (NUL_LATE[:9016] + "\0" + NUL_LATE[9016:]).encode()

# ---------------------------------------------------------------- classification

# id, files (train first; val.* / test.* are valid_file / test_file), options,
#   an error regex or {"rows": [train, val, test], "labels": {train counts}, "events": {(action, split, part): count}}
CLASSIFY = [
    ("nul-after-8kb", {"train.tsv": NUL_LATE}, {}, r"train.tsv holds NUL bytes \(byte offset 9016\): a binary file"),
    ("gzip-named-tsv", {"train.tsv": gzip.compress(BASE.encode())}, {},
     r"train.tsv is a gzip-compressed file, not text; zcat \S*train.tsv > train.plain.tsv and give that file$"),
    ("pickle-named-jsonl", {"train.jsonl": pickle.dumps([("a", 1)])}, {}, r"train.jsonl is a Python pickle file, not text"),
    ("utf16-without-bom", {"train.tsv": BASE.encode("utf-16-le")}, {},
     r"at every other byte: UTF-16 text without a byte order mark\? then set data.encoding=utf-16-le"),
    ("nfc-and-nfd-label-one-class", {"train.tsv": "text\tlabel\n" + "".join(
        f"row {i}\t{('café', NFD, 'bad')[i % 3]}\n" for i in range(30)), "val.tsv": f"text\tlabel\nv\t{NFD}\nw\tbad\n",
        "test.tsv": "text\tlabel\nx\tcafé\ny\tbad\n"}, {},
     {"rows": [30, 2, 2], "labels": {"bad": 10, "café": 20}, "events": {("changed", "train_file", "lines not in Unicode NFC"): 10}}),
    ("underscore-number-is-not-ten", {"train.tsv": "text\tlabel\n" + "".join(f"r{i}\t{('1_0', '10')[i % 2]}\n" for i in range(8)),
                                      "val.tsv": "text\tlabel\nv\t1_0\nw\t10\n", "test.tsv": "text\tlabel\nx\t10.0\n"}, {},
     {"rows": [8, 2, 1], "labels": {"10": 4, "1_0": 4}}),
    ("integers-past-2-53-stay-distinct", {"train.jsonl": "".join(json.dumps({"text": f"t{i}", "label": 9007199254740992 + i % 2}) + "\n"
                                                             for i in range(8)),
                                          "val.jsonl": json.dumps({"text": "v", "label": "9007199254740993"}) + "\n",
                                          "test.jsonl": json.dumps({"text": "w", "label": 9007199254740992}) + "\n"}, {},
     {"rows": [8, 1, 1], "labels": {"9007199254740992": 4, "9007199254740993": 4}}),
    ("decimals-exact-and-words-as-written", {"train.tsv": "text\tlabel\n" + "".join(
        f"r{i}\t{y}\n" for i, y in enumerate(["0.50", "0.5", ".5", "1e3", "1000", "1000.0", "NaN", "nan"])),
        "val.tsv": "text\tlabel\nv\t0.5\n", "test.tsv": "text\tlabel\nw\t1000\n"}, {},
     {"rows": [8, 1, 1], "labels": {"0.5": 3, "1000": 2, "1e3": 1, "NaN": 1, "nan": 1}}),
    ("whitespace-variants-overlap-dropped", {"train.tsv": BASE, "val.tsv": VAL + "good  film 1\tpos\n bad film\u00a02 \tneg\n",
                                             "test.tsv": TEST + " bad film 3 \tneg\ngood film 4\tpos\n"}, {},
     {"rows": [20, 2, 2], "events": {("dropped", "val", "also occurs in train"): 2, ("dropped", "test", "also occurs in train"): 2}}),
    ("whitespace-repeat-in-train-said", {"train.tsv": BASE + "good\tfilm 3\tpos\n", "val.tsv": VAL, "test.tsv": TEST},
     {"quoting": "csv"}, r"train.tsv:22: has 3 columns"),
    ("valid-file-is-train-file", {"train.tsv": BASE, "val.tsv": BASE}, {"valid_file": "SAME"},
     r"data.valid_file=\S*train.tsv is the same file as data.train_file: the model would be evaluated on what it "
     r"trained on; give a held-out file, or leave data.valid_file out"),
    ("semicolon-csv-read-by-its-header", {"train.csv": "text;label\r\n" + "".join(
        f'"good; film {i}";pos\r\nbad film {i};neg\r\n' for i in range(10)), "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [20, 2, 2], "labels": {"neg": 10, "pos": 10}}),
    ("excel-sep-line", {"train.csv": "sep=;\r\nreview;label\r\n" + "".join(f"r {i};{('a', 'b')[i % 2]}\r\n" for i in range(10)),
                        "val.tsv": "review\tlabel\nv\ta\n", "test.tsv": "review\tlabel\nw\tb\n"}, {"text_field": "review"},
     {"rows": [10, 1, 1], "labels": {"a": 5, "b": 5}, "events": {("skipped", "train_file", "Excel 'sep='"): 1}}),
    ("semicolon-csv-other-names", {"train.csv": "review;sentiment\n" + "".join(f"r{i};pos\n" for i in range(10))}, {},
     r"the header line has no 'text' / 'label' column \(columns: 'review;sentiment'\); set data.text_field"),
    ("jsonl-object-text", {"train.jsonl": json.dumps({"text": {"title": "x", "body": "y" * 500}, "label": 1}) + "\n"}, {},
     r"train.jsonl:1: has a JSON object as its 'text' field \(\{\"title\": \"x\", \"body\": \"y+\), not text; fix the line"),
    ("jsonl-list-label-skipped", {"train.jsonl": "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(10))
                                  + json.dumps({"text": "t", "label": [1, 2]}) + "\n",
                                  "val.jsonl": json.dumps({"text": "v", "label": 0}) + "\n",
                                  "test.jsonl": json.dumps({"text": "w", "label": 1}) + "\n"}, {"bad_lines": "skip"},
     {"rows": [10, 1, 1], "events": {("dropped", "train_file", "JSON object or list"): 1}}),
    ("no-newline-header-not-echoed", {"train.tsv": "x" * 200_000}, {}, r"the header line has no 'text' / 'label' column \('x+'\.\.\.\)|columns: 'x+'\.\.\."),
    ("cr-only-line-ends", {"train.tsv": BASE.replace("\n", "\r"), "val.tsv": VAL, "test.tsv": TEST}, {},
     {"rows": [20, 2, 2], "labels": {"neg": 10, "pos": 10}, "facts": {"cr_read_as_lf": 21}}),
    ("batch-larger-than-the-data", {"train.tsv": BASE, "val.tsv": VAL, "test.tsv": TEST}, {"batch_size": 10000},
     {"rows": [20, 2, 2], "events": {("changed", "train", "data.batch_size=10000 is more than the 20 training rows"): 1}}),
    ("header-only", {"train.tsv": "text\tlabel\n"}, {}, r"train.tsv: no usable rows are left"),
    ("no-header-line", {"train.tsv": BASE.split("\n", 1)[1]}, {},
     r"train.tsv: the header line has no 'text' / 'label' column \(columns: 'good film 0', 'pos'\); set data.text_field / "
     r"data.label_field to its column names, or add a first line naming the columns \(text<TAB>label\)$"),
    ("label-unseen-in-training", {"train.tsv": BASE, "val.tsv": "text\tlabel\nv\tneutral\n", "test.tsv": TEST}, {},
     r"^the val split has label\(s\) 'neutral' that never occur in the training data \(first at val.tsv:2\); fix those"),
    ("too-few-rows-to-split", {"train.tsv": "text\tlabel\na\tpos\nb\tneg\nc\tpos\n"}, {},
     r"^the val split is empty \(3 training rows are too few to split 80/10/10\); give more rows, or data.valid_file"),
    ("case-variants-are-one-input-for-wordpiece", {"train.tsv": BASE, "val.tsv": VAL + "GOOD Film 1\tpos\n",
                                                  "test.tsv": TEST + "Bäd fîlm 2\tneg\n"}, {"tokenizer": "wordpiece", "vocab_size": 60},
     {"rows": [20, 2, 2], "events": {("dropped", "val", "tokens also occurs in train"): 1,
                                     ("dropped", "test", "tokens also occurs in train"): 1}}),
    ("case-variants-differ-for-char", {"train.tsv": BASE, "val.tsv": VAL + "GOOD Film 1\tpos\n", "test.tsv": TEST}, {},
     {"rows": [20, 3, 2], "events": {("dropped", "val", "also occurs in train"): 0}}),
    ("invisible-characters-in-labels", {"train.tsv": "text\tlabel\n" + "".join(f"r{i}\t{('pos', chr(0xfeff) + 'pos', 'p' + chr(0x200b) + 'os', 'neg')[i % 4]}\n" for i in range(8)),
                                        "val.tsv": "text\tlabel\nv\tpos\n", "test.tsv": "text\tlabel\nw\tneg\n"}, {},
     {"rows": [8, 1, 1], "labels": {"neg": 2, "pos": 6}}),
    ("json-array-named-jsonl", {"train.jsonl": json.dumps([{"text": "a", "label": 1}], indent=2)}, {},
     r"train.jsonl holds a JSON array, not JSON lines \(one object a line\); convert it, e.g. jq -c '.\[\]' \S*train.jsonl > "),
    ("comma-separated-named-tsv", {"train.tsv": CSV_TEXT}, {},
     r"train.tsv: its header line 'text,label' is ','-separated, not tab-separated; give it a .csv name \(mv \S+train.tsv train.csv\)$"),
    ("xlsx-named-csv", {"train.csv": b"PK\x03\x04" + bytes(100)}, {}, r"train.csv is a zip archive \(or .xlsx / .docx\) file"),
    ("empty-file", {"train.tsv": b""}, {}, r"train.tsv holds no rows"),
    ("label-with-inner-whitespace", {"train.tsv": "text\tlabel\n" + "".join(f"r{i}\t{('very  good', 'very good', 'bad')[i % 3]}\n" for i in range(9)),
                                     "val.tsv": "text\tlabel\nv\tvery\u00a0good\n", "test.tsv": "text\tlabel\nw\tbad\n"}, {},
     {"rows": [9, 1, 1], "labels": {"bad": 3, "very good": 6}}),
]


def classify_case(tmp_path, files, options):
    if options.get("valid_file") == "SAME":
        paths = write(tmp_path, {k: v for k, v in files.items() if not k.startswith("val.")})
        dm = LabelledFilesDataModule(str(paths["train.tsv"]), str(paths["train.tsv"]), cache_dir=str(tmp_path / "cache"),
                                     tokenizer="char")
        dm.setup()
        return dm
    return classify(tmp_path, files, **options)


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in CLASSIFY], ids=[c[0] for c in CLASSIFY])
def test_classifier_long_tail(tmp_path, files, options, expected):
    if isinstance(expected, str):
        assert re.search(expected, refused(classify_case, tmp_path, files, options))
        return
    dm = classify_case(tmp_path, files, options)
    splits = dm.report["splits"]
    assert [splits[s]["rows"] for s in ("train", "val", "test")] == expected["rows"]
    if "labels" in expected:
        assert splits["train"]["labels"] == expected["labels"] and dm.labels == list(expected["labels"])
    for (action, split, part), count in expected.get("events", {}).items():
        assert event(dm, action, split, part)[0] == count
    for fact, value in expected.get("facts", {}).items():
        assert dm.report["files"][0][fact] == value


def test_a_copy_of_a_file_is_reported_under_its_own_name(tmp_path):
    """The split cache is keyed by content: a second run on a copy (or a link) must still name the copy."""
    write(tmp_path, {"train.tsv": BASE, "val.tsv": VAL, "test.tsv": TEST})
    shutil.copy(tmp_path / "train.tsv", tmp_path / "copy.tsv")
    (tmp_path / "link.tsv").symlink_to(tmp_path / "train.tsv")
    for name in ("train.tsv", "copy.tsv", "link.tsv"):
        dm = LabelledFilesDataModule(str(tmp_path / name), str(tmp_path / "val.tsv"), str(tmp_path / "test.tsv"),
                                     cache_dir=str(tmp_path / "cache"), tokenizer="char")
        dm.setup()
        assert dm.report["files"][0]["path"] == str(tmp_path / name)
        assert event(dm, "changed", "train_file", "labels") == (0, [])


def test_a_file_name_with_stray_spaces_is_named(tmp_path):
    write(tmp_path, {"train.tsv": BASE})
    message = refused(lambda: LabelledFilesDataModule(f"{tmp_path / 'train.tsv'} ", cache_dir=str(tmp_path / "cache")).setup())
    assert message.endswith("train.tsv' does: remove the spaces around the name") and "train.tsv ' does not exist" in message


def test_a_held_out_link_to_the_training_file_is_refused(tmp_path):
    write(tmp_path, {"train.tsv": BASE})
    (tmp_path / "test.tsv").symlink_to(tmp_path / "train.tsv")
    message = refused(lambda: LabelledFilesDataModule(str(tmp_path / "train.tsv"), None, str(tmp_path / "test.tsv"),
                                                      cache_dir=str(tmp_path / "cache")).setup())
    assert "data.test_file=" in message and "is the same file as data.train_file" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_one_line(tmp_path):
    write(tmp_path, {"train.tsv": BASE})
    (tmp_path / "train.tsv").chmod(0)
    assert "cannot be read (permission denied); make it readable (chmod u+r" in refused(classify, tmp_path, {})


def test_a_read_failure_is_one_line(tmp_path, monkeypatch):
    """What the OS refuses while reading (permissions as root cannot show it) is one DataError naming the file."""
    def fail(self):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_bytes", fail)
    monkeypatch.setattr("lab.data.parallel.sha256_of", lambda path: "x")
    message = refused(translate, tmp_path, {"train.tsv": PAIRS})
    assert re.fullmatch(r"cannot read \S*train.tsv: Permission denied; check that it is a readable file", message)


def test_labels_are_exact_and_normalised_like_the_text():
    cases = {"1": "1", " 1.0 ": "1", "+1": "1", "01": "1", "1_0": "1_0", "1e3": "1e3", "0.50": "0.5", ".5": "0.5",
             "-0": "0", "9007199254740993": "9007199254740993", NFD: "café", "a \t b": "a b", "  ": None, "inf": "inf"}
    assert {k: label_of(k) for k in cases} == cases
    assert label_of(1.0) == "1" and label_of(True) == "true" and label_of(None) is None
    assert label_order(["10", "9007199254740993", "2", "b", "9007199254740992", "a", "0.5"]) == [
        "0.5", "2", "10", "9007199254740992", "9007199254740993", "a", "b"]


# ---------------------------------------------------------------- translation

NUL_PAIRS = (PAIRS * 30).encode()
NUL_PAIRS = NUL_PAIRS[:9100] + b"\0" + NUL_PAIRS[9100:]

TRANSLATE = [
    ("language-code-header-guessed", {"train.tsv": "de\ten\n" + PAIRS, "valid.tsv": VALID, "test.tsv": TESTP}, {},
     {"pairs": [20, 1, 1], "events": {("skipped", "train_file", "header lines guessed"): 1}}),
    ("language-name-header-guessed", {"train.tsv": "German sentence\tEnglish sentence\n" + PAIRS, "valid.tsv": VALID,
                                      "test.tsv": TESTP}, {}, {"pairs": [20, 1, 1], "events": {("skipped", "train_file", "header"): 1}}),
    ("header-false-reads-it-as-a-pair", {"train.tsv": "de\ten\n" + PAIRS, "valid.tsv": VALID, "test.tsv": TESTP}, {"header": False},
     {"pairs": [21, 1, 1], "events": {("skipped", "train_file", "header"): 0}}),
    ("a-word-pair-is-no-header", {"train.tsv": "Haus\thouse\n" + PAIRS, "valid.tsv": VALID, "test.tsv": TESTP}, {},
     {"pairs": [21, 1, 1], "events": {("skipped", "train_file", "header"): 0}}),
    ("whitespace-variants-overlap-dropped", {"train.tsv": PAIRS, "valid.tsv": VALID + "das ist  satz 3.\tx.\n",
                                             "test.tsv": TESTP + " das ist satz 4. \ty.\ndas ist\u00a0satz 5.\tz.\n"}, {},
     {"pairs": [20, 1, 1], "events": {("dropped", "valid", "also occurs in train"): 1, ("dropped", "test", "also occurs in train"): 2}}),
    ("valid-file-is-train-file", {"train.tsv": PAIRS}, {"valid_file": "train.tsv"},
     r"data.valid_file=\S*train.tsv is the same file as data.train_file"),
    ("gzip-named-tsv", {"train.tsv": gzip.compress(PAIRS.encode())}, {}, r"train.tsv is a gzip-compressed file, not text"),
    ("nul-after-8kb", {"train.tsv": NUL_PAIRS}, {}, r"train.tsv holds NUL bytes \(byte offset 9100\)"),
    ("jsonl-object-source", {"train.jsonl": json.dumps({"source": {"a": "b" * 300}, "target": "x."}) + "\n"}, {},
     r"train.jsonl:1: has an empty or non-text source \(\{\"a\": \"b+\)"),
    ("cr-only-line-ends", {"train.tsv": PAIRS.replace("\n", "\r"), "valid.tsv": VALID, "test.tsv": TESTP}, {},
     {"pairs": [20, 1, 1]}),
    ("batch-larger-than-the-data", {"train.tsv": PAIRS, "valid.tsv": VALID, "test.tsv": TESTP}, {"batch_size": 10000},
     {"pairs": [20, 1, 1], "events": {("changed", "train", "data.batch_size=10000 is more than the 20 training pairs"): 1}}),
]


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in TRANSLATE], ids=[c[0] for c in TRANSLATE])
def test_translator_long_tail(tmp_path, files, options, expected):
    if "valid_file" in options:
        options = {**options, "valid_file": str(tmp_path / options["valid_file"])}
    if isinstance(expected, str):
        assert re.search(expected, refused(translate, tmp_path, files, **options))
        return
    dm = translate(tmp_path, files, **options)
    assert [dm.report["splits"][s]["pairs"] for s in ("train", "valid", "test")] == expected["pairs"]
    sources = {s for s, _ in dm.datasets["train"].pairs}
    assert ("de" in sources) == (options.get("header") is False)
    for (action, split, part), count in expected.get("events", {}).items():
        assert event(dm, action, split, part)[0] == count


# ---------------------------------------------------------------- language modelling

LM = [
    ("same-file-twice-read-once", {"a.txt": TEXT}, {"train": ["a.txt", "a.txt", "*.txt"]},
     {"characters": 420, "documents": 1, "events": {("skipped", "train_files", "more than once"): 2}}),
    ("a-link-is-the-same-file", {"a.txt": TEXT}, {"train": ["a.txt", "link.txt"], "link": True},
     {"characters": 420, "documents": 1, "events": {("skipped", "train_files", "more than once"): 1}}),
    ("brackets-in-a-real-name", {"notes[2020].txt": TEXT}, {"train": ["notes[2020].txt"]}, {"characters": 420, "documents": 1}),
    ("cr-only-line-ends-counted", {"a.txt": TEXT.replace("\n", "\r")}, {"train": ["a.txt"]},
     {"characters": 420, "documents": 1, "facts": {"cr_read_as_lf": 10}}),
    ("nfd-lines-counted", {"a.txt": TEXT + f"un {NFD} noir\n" * 3}, {"train": ["a.txt"]},
     {"characters": 420 + 3 * 13, "documents": 1, "events": {("changed", "train_files", "not in Unicode NFC"): 3}}),
    ("nul-after-8kb", {"a.txt": (TEXT * 30).encode()[:9016] + b"\0" + (TEXT * 30).encode()[9016:]}, {"train": ["a.txt"]},
     r"a.txt holds NUL bytes \(byte offset 9016\): a binary file"),
    ("gzip-named-txt", {"a.txt": gzip.compress(TEXT.encode())}, {"train": ["a.txt"]}, r"a.txt is a gzip-compressed file"),
    # (a small .gz / .zst corpus has held-out tails cut at exact fractions of its text, as a plain file has:
    # tests/data/test_corpora_stream.py::test_compressed_file_gives_the_plain_files_tokens)
    ("no-match-names-the-pattern", {"a.txt": TEXT}, {"train": ["b*.txt"]}, r"data.corpus.train_files: no file matches"),
]


@pytest.mark.parametrize("files,options,expected", [c[1:] for c in LM], ids=[c[0] for c in LM])
def test_language_model_long_tail(tmp_path, files, options, expected):
    write(tmp_path, files)
    if options.get("link"):
        (tmp_path / "link.txt").symlink_to(tmp_path / "a.txt")
    from lab.data.corpora import TextFiles
    from lab.data.lm import LMDataModule

    corpus = TextFiles([str(tmp_path / n) for n in options["train"]], val_fraction=0.25)
    dm = LMDataModule(corpus, tokenizer="char", block_size=8, batch_size=2, cache_dir=str(tmp_path / "cache"))
    if isinstance(expected, str):
        assert re.search(expected, refused(lambda: (dm.prepare_data(), dm.setup())))
        return
    dm.prepare_data()
    dm.setup()
    splits = dm.report["splits"]
    assert splits["train"]["characters"] + splits["val"]["characters"] == expected["characters"]
    assert splits["train"]["documents"] == expected["documents"]
    for (action, split, part), count in expected.get("events", {}).items():
        assert event(dm, action, split, part)[0] == count
    for fact, value in expected.get("facts", {}).items():
        assert dm.report["files"][0][fact] == value
    assert "\r" not in dm.tokenizer.itos and NFD[-1] not in dm.tokenizer.itos  # the model sees NFC and \n


# ---------------------------------------------------------------- fuzz: random damage, every outcome accounted for

def damaged(rng: random.Random, clean: str) -> bytes:
    """clean text with 1-4 random kinds of damage users' files have."""
    text = clean
    for _ in range(rng.randint(1, 4)):
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        kind = rng.randrange(12)
        if kind == 0:
            lines[i] = lines[i].replace("\t", "  ", 1)  # a lost tab
        elif kind == 1:
            lines[i] += "\textra"  # a stray column
        elif kind == 2:
            lines.insert(i, "")  # a blank line
        elif kind == 3:
            lines[i] = unicodedata.normalize("NFD", lines[i] + " café")
        elif kind == 4:
            lines[i] = '"' + lines[i]  # an unclosed quote
        elif kind == 5:
            lines[i] = lines[i].replace(" ", "  ")  # doubled spaces: the same text for the model
        elif kind == 6:
            lines.insert(i, lines[rng.randrange(len(lines))])  # a duplicate row
        elif kind == 7:
            lines[i] = "\t" + lines[i].split("\t")[-1]  # an empty text
        elif kind == 8:
            text = "\r".join(lines) if rng.random() < 0.5 else "\r\n".join(lines)
            continue
        elif kind == 9:
            lines[i] += " \u00a0 "
        elif kind == 10:
            lines[i] = lines[i].upper()
        else:
            data = "\n".join(lines).encode()
            at = rng.randrange(len(data))
            return data[:at] + rng.choice([b"\0", b"\xff", b"\x1f\x8b"]) + data[at:]
        text = "\n".join(lines)
    return text.encode()


def lines_in(data: bytes) -> int:
    """Lines of a file as lab reads them, counted independently: \\r\\n and \\r end lines, the last newline ends one."""
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return len(text.split("\n")) - text.endswith("\n")


def accounted(report: dict, field: str) -> int:
    """Lines of one file the report accounts for: rows kept + lines skipped + lines dropped."""
    rows = next(f for f in report["files"] if f["split"] == field)
    kept = rows.get("rows", rows.get("pairs", 0))
    return kept + sum(e["count"] for e in report["events"] if e["split"] == field and e["action"] in ("skipped", "dropped"))


def test_fuzz_damaged_files_are_read_exactly_or_refused_in_one_line(tmp_path):
    rng = random.Random(33)
    clean = BASE + "".join(f"review {i} is fine\t{('pos', 'neg', 'meh')[i % 3]}\n" for i in range(40))
    deadline, tries, outcomes = time.monotonic() + 30, 0, {"read": 0, "refused": 0}  # 150 files: 2-5 s
    while time.monotonic() < deadline and tries < 150:
        tries += 1
        case = tmp_path / f"case{tries}"
        case.mkdir()
        data, skip = damaged(rng, clean), rng.random() < 0.5
        translator = rng.random() < 0.3
        files = {"train.tsv": data, "valid.tsv": VALID, "test.tsv": TESTP} if translator else {
            "train.tsv": data, "val.tsv": VAL, "test.tsv": TEST}
        try:
            if translator:
                dm = translate(case, files, bad_lines="skip" if skip else "error")
            else:
                dm = classify(case, files, bad_lines="skip" if skip else "error", quoting=rng.choice(["none", "csv"]))
        except DataError as e:
            one_short_line(str(e))
            outcomes["refused"] += 1
            continue
        outcomes["read"] += 1
        report = dm.report
        if translator or dm.source.format.quoting == "none":  # every line accounted for (CSV quotes may join lines)
            assert accounted(report, "train_file") == lines_in(data), (tries, data[:300])
        held = ("valid", "test") if translator else ("val", "test")
        sizes = [len(dm.datasets[s]) for s in ("train", *held)] if translator else [len(dm.encoded[s][0]) for s in ("train", *held)]
        unit = "pairs" if translator else "rows"
        assert sizes == [report["splits"][s][unit] for s in ("train", *held)]
    assert outcomes["read"] >= 10 and outcomes["refused"] >= 10, outcomes
