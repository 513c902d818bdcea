"""Reading the user's files exactly as their formats say, and reporting what was done to them.

Shared by every datamodule (LM text, labelled sentences, sentence pairs), so one rule holds for all:
- check_file() / expand_files() / check_distinct(): the files the user named, read as named (a literal name
  with glob characters is that file), each once (the same file listed twice is read once, and said), a
  held-out file that is the training file refused.
- decode(): strict UTF-8 by default (a file that is not is one error naming the byte offset), `encoding` /
  `encoding_errors` when asked, a BOM stripped and said, binary content anywhere refused (compressed and
  archive files by name), \r\n and old-Mac \r line ends read as \n and text not in Unicode NFC counted.
- read_table(): .tsv split on tabs with no quote processing (quoting=csv to opt into CSV quotes), .csv via the
  csv module; every row must have the header's (or the first row's) number of columns.
- read_jsonl(): one JSON object a line; a bad line names its line in the file.
  A bad line is an error naming file and line, or, with bad_lines=skip, skipped and counted.
- label_of(): labels are compared as the model's text is (normalize_sentence: NFC, whitespace collapsed), and
  as written otherwise; only plain integers / decimals are numbers (1 == 1.0 == "1.0", exactly, never through
  float) and ordered numerically (label_order).
- drop_overlap(): rows of an evaluation split that also occur in an earlier split are removed (or refused);
  callers key rows by the text the model sees (normalize_sentence / normalize_document).
- DataReport: files read, rows and characters per split, what was dropped / truncated / changed by reason
  with counts and the first few line numbers, labels with counts. Logged once at setup and saved in the run
  directory (data_report.json) and the loggers' config by lab.runtime.training.
"""
from __future__ import annotations

import codecs
import csv
import errno
import glob
import io
import json
import logging
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from lab.data.sources.text import normalize_sentence
from lab.errors import DataError

log = logging.getLogger("lab")
FIRST = 5  # line numbers kept per reason
BAD_LINES = ("error", "skip")
OVERLAP = ("drop", "error")
QUOTING = ("none", "csv")
ERRORS = ("strict", "replace")
NUL = b"\0"


@dataclass(frozen=True)
class FileFormat:
    """How the user's files are read. prefix names the config node these fields live in (for error messages).
    encoding: any Python codec (utf-8, latin-1, utf-16, cp1252, ...); encoding_errors: strict | replace.
    quoting: .tsv only: none (tabs separate, quotes are text) | csv (CSV quoting with a tab delimiter).
    header: .tsv/.csv first row: true | false | null (a header when it names the configured fields).
    bad_lines: error | skip (a row with the wrong column count, an empty field or bad JSON: counted).
    eval_overlap: drop | error: rows of val/test that also occur in train (or test rows in val)."""

    encoding: str = "utf-8"
    encoding_errors: str = "strict"
    quoting: str = "none"
    header: bool | None = None
    bad_lines: str = "error"
    eval_overlap: str = "drop"
    prefix: str = "data."

    def __post_init__(self):
        for name, allowed in (("encoding_errors", ERRORS), ("quoting", QUOTING), ("bad_lines", BAD_LINES),
                              ("eval_overlap", OVERLAP)):
            if getattr(self, name) not in allowed:
                raise DataError(f"{self.prefix}{name}={getattr(self, name)!r} is not valid; choose one of {', '.join(allowed)}")
        try:
            codecs.lookup(self.encoding)
        except LookupError as e:
            raise DataError(f"{self.prefix}encoding={self.encoding!r} is not a known text encoding; e.g. utf-8, latin-1, "
                            "utf-16, cp1252") from e

    @property
    def key(self) -> str:  # goes into cache keys: other options, other data
        return f"{self.encoding}|{self.encoding_errors}|{self.quoting}|{self.header}|{self.bad_lines}|{self.eval_overlap}"


class DataReport:
    """What a datamodule read and did, for the user: see the module docstring. to_dict()/from_dict() round-trip
    through JSON so that a cached split carries the report of the run that made it."""

    def __init__(self, task: str = ""):
        self.task = task
        self.files: list[dict] = []
        self.splits: dict[str, dict] = {}
        self.events: dict[tuple[str, str, str], dict] = {}  # (action, split, reason) -> {count, first}

    def file(self, split: str, path: Path | str, **facts) -> None:
        self.files.append({"split": split, "path": str(path), **facts})

    def file_facts(self, path: Path | str, **facts) -> None:
        """Add facts (e.g. rows kept) to the entry of a file already read."""
        next(f for f in reversed(self.files) if f["path"] == str(path)).update(facts)

    def note(self, action: str, split: str, reason: str, where: str | None = None, count: int = 1) -> None:
        """action: dropped | truncated | changed | skipped; where: "file:line" of the row."""
        e = self.events.setdefault((action, split, reason), {"count": 0, "first": []})
        e["count"] += count
        if where is not None and len(e["first"]) < FIRST:
            e["first"].append(where)

    def split(self, name: str, **facts) -> None:
        self.splits.setdefault(name, {}).update(facts)

    def count(self, action: str, split: str | None = None, reason: str | None = None) -> int:
        return sum(e["count"] for (a, s, r), e in self.events.items()
                   if a == action and split in (None, s) and reason in (None, r))

    def merge(self, other: DataReport) -> None:
        """Take in what another report read and did (one corpus of several)."""
        self.files += other.files
        for k, e in other.events.items():
            mine = self.events.setdefault(k, {"count": 0, "first": []})
            mine["count"] += e["count"]
            mine["first"] = (mine["first"] + e["first"])[:FIRST]

    def summary(self, action: str, split: str) -> str:
        """e.g. "3 dropped: 2 rows with an empty label (first x.tsv:4), 1 lines that are not valid JSON (...)"."""
        found = [(r, e) for (a, s, r), e in self.events.items() if a == action and s == split]
        parts = [f"{e['count']} {r} (first {', '.join(e['first'][:2])})" for r, e in found]
        return f"{sum(e['count'] for _, e in found)} {action}" + (f": {'; '.join(parts)}" if parts else "")

    def dropped_hint(self, prefix: str) -> str | None:
        """Why a split came out too small when lines were dropped: "300 lines were dropped (300 lines without a
        string 'text', first a.jsonl:1); set <prefix>text_field to the field holding the text"; None if none were."""
        found = sorted(((e["count"], r, e["first"]) for (a, _, r), e in self.events.items() if a == "dropped"), reverse=True)
        if not found:
            return None
        count, reason, first = found[0]
        lacked = re.search(r"without a string '([^']*)'", reason)
        fix = (f"set {prefix}text_field to the field that holds the text (not {lacked.group(1)!r})" if lacked
               else "fix those lines")
        where = f", first {first[0]}" if first else ""
        return f"{sum(c for c, _, _ in found):,} lines were dropped ({count:,} {reason}{where}); {fix}"

    def to_dict(self) -> dict:
        events = [{"action": a, "split": s, "reason": r, **e} for (a, s, r), e in self.events.items()]
        return {"task": self.task, "files": self.files, "splits": self.splits, "events": events}

    @classmethod
    def from_dict(cls, d: dict) -> DataReport:
        r = cls(d.get("task", ""))
        r.files, r.splits = list(d.get("files", [])), dict(d.get("splits", {}))
        for e in d.get("events", []):
            r.events[(e["action"], e["split"], e["reason"])] = {"count": e["count"], "first": list(e["first"])}
        return r

    def lines(self) -> list[str]:
        out = []
        for f in self.files:
            facts = ", ".join(f"{k} {v}" if not isinstance(v, bool) else k for k, v in f.items()
                              if k not in ("split", "path") and v not in (None, False))
            out.append(f"data: read {f['path']} ({f['split']}): {facts}")
        for name, s in self.splits.items():
            facts = ", ".join(f"{v:,} {k}" for k, v in s.items() if isinstance(v, int))
            labels = s.get("labels")
            out.append(f"data: {name}: {facts}" + (f"; labels {', '.join(f'{k}: {v}' for k, v in labels.items())}" if labels else ""))
        for (action, split, reason), e in self.events.items():
            first = f" (first: {', '.join(e['first'])}{', ...' if e['count'] > len(e['first']) else ''})" if e["first"] else ""
            out.append(f"data: {action} in {split}: {e['count']:,} {reason}{first}")
        return out

    def log(self) -> None:
        for line in self.lines():
            log.info("%s", line)


def check_file(file: str | None, field: str) -> Path:
    """The path of a file the user named in config field `field`, which must exist, be a file and be readable."""
    path = Path(str(file)).expanduser()
    if path.is_dir():
        raise DataError(f"{field}={file} is a directory; give a file")
    if not path.is_file():
        if path.is_symlink():  # a link to nowhere: "does not exist" would send the user looking for the link
            try:
                target = os.path.realpath(path, strict=True)
            except OSError as e:  # ELOOP: the link points (through others) back at itself; else: missing target
                raise DataError(f"{field}={file} is a symbolic link loop; point it at the file it should name"
                                if e.errno == errno.ELOOP else
                                f"{field}={file} is a symbolic link to {os.readlink(path)}, which does not exist; "
                                "fix the link or give the file itself") from None
            raise DataError(f"{field}={file} is a symbolic link to {target}, which is not a file; give a file")
        if str(file) != str(file).strip() and Path(str(file).strip()).expanduser().is_file():
            raise DataError(f"{field}={str(file)!r} does not exist, {str(file).strip()!r} does: remove the spaces around "
                            "the name")
        raise DataError(f"{field}={file} does not exist; give an existing file")
    if not os.access(path, os.R_OK):
        raise DataError(f"{field}={file} cannot be read (permission denied); make it readable (chmod u+r {file})")
    return path


def expand_files(patterns: list[str], field: str, report: DataReport, split: str) -> list[Path]:
    """The files named in config field `field`: a pattern naming an existing file is that file (brackets and
    all), else a glob; each file once (the same file listed twice, or through a link, is read once: said)."""
    paths, seen = [], set()
    for pattern in patterns:
        path = Path(pattern).expanduser()
        matches = [str(path)] if path.is_file() else sorted(glob.glob(str(path), recursive=True))
        if not matches:
            raise DataError(f"{field}: no file matches {pattern!r}; give existing .txt paths or globs")
        dirs = [m for m in matches if Path(m).is_dir()]
        if dirs:
            raise DataError(f"{field}: {dirs[0]} is a directory; give files or a glob such as '{dirs[0]}/*.txt'")
        for m in matches:
            real = os.path.realpath(m)
            if real in seen:
                report.note("skipped", split, "files listed more than once (read once)", m)
                continue
            seen.add(real)
            paths.append(check_file(m, field))
    return paths


def check_distinct(files: dict[str, str | None], prefix: str, pool: str) -> None:
    """Refuse a held-out file that is (the same file as) an earlier one: {config field: file or None}, in
    order, the training file first; pool names the split that missing held-out splits are cut from."""
    given = [(k, f) for k, f in files.items() if f]
    for i, (name, file) in enumerate(given):
        for other, earlier in given[:i]:
            if os.path.realpath(Path(file).expanduser()) == os.path.realpath(Path(earlier).expanduser()):
                raise DataError(f"{prefix}{name}={file} is the same file as {prefix}{other}: the model would be evaluated "
                                f"on what it trained on; give a held-out file, or leave {prefix}{name} out (a seeded "
                                f"part of {prefix}{pool} is held out)")


# First bytes of files that are not text, and what to do with them (checked before NUL bytes: a gzip header
# has NULs, and "holds NUL bytes" would not say what the file is)
MAGIC = ((rb"\x1f\x8b", "gzip-compressed", "zcat {path} > {plain} and give that file"),
         (rb"PK\x03\x04", "zip archive (or .xlsx / .docx)", "unzip {path} (or export the sheet as .csv) and give that file"),
         (rb"BZh[1-9]1AY&SY", "bzip2-compressed", "bzcat {path} > {plain} and give that file"),
         (rb"\xfd7zXZ\x00", "xz-compressed", "xzcat {path} > {plain} and give that file"),
         (rb"\x28\xb5\x2f\xfd", "zstd-compressed", "zstdcat {path} > {plain} and give that file"),
         (rb"%PDF-", "PDF document", "export its text (pdftotext {path} {plain}) and give that file"),
         (rb"\x80[\x02-\x05]", "Python pickle", "write the data as text (.tsv, .csv, .jsonl or .txt) and give that"))
CONTROL = "\0\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x7f"


def refuse_binary(path: Path | str, data: bytes, utf16_fix: str) -> None:
    """A file that is not text (a known binary format, or NUL bytes anywhere) -> one error saying what it is.
    utf16_fix: what to do about UTF-16 without a byte order mark, with {codec} (e.g. "set data.encoding={codec}")."""
    for magic, what, fix in MAGIC:
        if re.match(magic, data):
            name = Path(path)  # the text is written where the user is: x.tsv.gz -> x.tsv, x.tsv -> x.plain.tsv
            plain = name.stem if name.suffix in (".gz", ".bz2", ".xz", ".zst") else name.stem + ".plain" + name.suffix
            raise DataError(f"{path} is a {what} file, not text; {fix.format(path=path, plain=plain)}")
    at = data.find(NUL)
    if at < 0:
        return
    head = data[:65536]
    odd, even = head[1::2].count(NUL), head[0::2].count(NUL)  # UTF-16 text of Latin script: every other byte
    if max(odd, even) > 0.3 * len(head) / 2:
        codec = "utf-16-le" if odd > even else "utf-16-be"
        raise DataError(f"{path} holds NUL bytes (byte offset {at}) at every other byte: UTF-16 text without a byte "
                        f"order mark? then {utf16_fix.format(codec=codec)}")
    raise DataError(f"{path} holds NUL bytes (byte offset {at}): a binary file, not text; give the text file")


def decode(path: Path, fmt: FileFormat, split: str, report: DataReport, **facts) -> str:
    """The text of a file: decoded as fmt says, BOM stripped, \\r\\n and lone \\r -> \\n; binary files refused.
    Lines not in Unicode NFC are counted (every task's model sees NFC: lab.data.sources.text)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}; check that it is a readable file") from e
    wide = codecs.lookup(fmt.encoding).name.startswith(("utf-16", "utf-32"))  # where NUL bytes are text
    bom16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))  # (and UTF-32-LE's)
    if bom16 and not wide:
        raise DataError(f"{path} starts with a UTF-16 byte order mark; set {fmt.prefix}encoding=utf-16 (utf-32 if it is that)")
    if not wide:
        refuse_binary(path, data, f"set {fmt.prefix}encoding={{codec}}")
    try:
        text = data.decode(fmt.encoding, errors="strict")
        replaced = 0
    except UnicodeDecodeError as e:
        if fmt.encoding_errors == "strict":
            raise DataError(f"{path} is not valid {fmt.encoding} at byte offset {e.start} ({e.reason}); set "
                            f"{fmt.prefix}encoding= to the file's encoding (e.g. latin-1, cp1252, utf-16), or "
                            f"{fmt.prefix}encoding_errors=replace to replace undecodable bytes with U+FFFD") from e
        text = data.decode(fmt.encoding, errors="replace")
        replaced = text.count("\ufffd") - data.decode(fmt.encoding, errors="ignore").count("\ufffd")
    bom = text.startswith("\ufeff") or bom16  # (the utf-16/32 codecs consume the BOM themselves)
    crlf = text.count("\r\n")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    cr = text.count("\r")  # old-Mac line ends (or a stray \r): a line end, as the model's text has it
    text = text.replace("\r", "\n")
    control = sum(text.count(c) for c in CONTROL)
    if control > max(8, len(text) // 100) or "\0" in text:
        raise DataError(f"{path} holds {control} control characters in {len(text)}: it is binary, not text")
    report.file(split, path, bytes=len(data), encoding=fmt.encoding, bom_stripped=bom, crlf_read_as_lf=crlf,
                cr_read_as_lf=cr, **facts)
    if replaced:
        report.note("changed", split, f"undecodable bytes replaced by U+FFFD ({path.name}, {fmt.prefix}encoding_errors=replace)",
                    count=replaced)
    if control:
        report.note("kept", split, "control characters (e.g. ESC, backspace) in the text", path.name, count=control)
    if not unicodedata.is_normalized("NFC", text):
        lines = [n for n, line in enumerate(text.split("\n"), 1) if not unicodedata.is_normalized("NFC", line)]
        for n in lines:
            report.note("changed", split, "lines not in Unicode NFC, read as NFC (as the model sees them)", f"{path.name}:{n}")
    return text


def bad_line(fmt: FileFormat, report: DataReport, split: str, path: Path, line: int, reason: str, detail: str) -> None:
    """A row that cannot be read as the format says: an error naming file and line, or skipped and counted."""
    if fmt.bad_lines == "error":
        raise DataError(f"{path}:{line}: {detail}; fix the line, or set {fmt.prefix}bad_lines=skip to skip such lines (they are counted)")
    report.note("dropped", split, reason, f"{path.name}:{line}")


EXCEL_SEP = re.compile(r"sep=[^\w\s]")


def csv_delimiter(text: str, names: tuple[str, ...]) -> str:
    """The delimiter of a .csv file: a comma, or the one of ; | tab that splits its first line into cells naming
    every one of `names` (a spreadsheet's "CSV" in locales whose decimal mark is a comma uses ';')."""
    line = text.split("\n", 1)[0]
    if EXCEL_SEP.fullmatch(line.strip()):  # Excel's own "sep=;" line: the file says it
        return line.strip()[4]
    wanted = {x.lower() for x in names}
    for d in (",", ";", "|", "\t"):
        cells = next(csv.reader([line], delimiter=d), [])
        if wanted and wanted <= {c.strip().lower() for c in cells}:
            return d
    return ","


# Words of column headers in parallel / labelled files: ISO 639-1 codes, some ISO 639-2 codes and language
# names, and the usual column names. A first row made only of them is a header (said in the report).
HEADER_WORDS = frozenset(re.findall(r"\w+", """aa ab af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv
dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu
ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne
ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv
sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
eng deu ger fra fre spa ita por nld rus zho chi jpn kor ara tur pol swe ces ell hin
english german deutsch french spanish italian portuguese dutch russian chinese japanese korean arabic turkish polish
swedish czech greek hindi danish finnish norwegian hungarian romanian ukrainian
source target src tgt trg text texts sentence sentences translation translations input output original reference
ref hyp hypothesis lang language from to label labels id"""))


def looks_like_header(cells: list[str]) -> bool:
    """Whether a first row's cells are column names: each distinct and made only of HEADER_WORDS (and digits),
    e.g. de / en, source_text / target_text, "German sentence" / "English sentence"."""
    words = [[w for w in re.split(r"[\W_\d]+", c.lower()) if w] for c in cells]
    return len(set(cells)) == len(cells) > 1 and all(ws and set(ws) <= HEADER_WORDS for ws in words)


Row = tuple[int, list[str]]  # (line number in the file, cells)


def read_table(path: Path, fmt: FileFormat, split: str, report: DataReport, names: tuple[str, ...] = (),
               header: bool | None = None) -> tuple[list[str] | None, list[Row]]:
    """(header, rows) of a .tsv or .csv file. header: True / False / None = detected (the first row is a header
    when its cells include every one of `names`, case-insensitively). Rows must have the header's (or the first
    row's) number of columns; blank lines are skipped and counted."""
    text = decode(path, fmt, split, report, format=path.suffix.lower().lstrip("."))
    tsv = path.suffix.lower() in (".tsv", ".txt")
    rows: list[Row] = []
    if tsv and fmt.quoting == "none":
        rows = [(n, line.split("\t")) for n, line in enumerate(text.split("\n"), 1)]
        if rows and rows[-1][1] == [""]:
            rows.pop()  # the final newline
    else:
        delimiter = "\t" if tsv else csv_delimiter(text, names)
        if delimiter not in ",\t":
            report.file_facts(path, delimiter=repr(delimiter) + " (its header line names the fields so)")
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        start = 1
        try:
            for cells in reader:
                rows.append((start, cells if cells else [""]))
                start = reader.line_num + 1
        except csv.Error as e:
            raise DataError(f"{path}:{start}: {e} (a quote opened on line {start} is never closed?); fix the quoting"
                            + (f", or set {fmt.prefix}quoting=none to read quotes as text" if tsv else "")) from e
    if not tsv and rows and EXCEL_SEP.fullmatch(text.split("\n", 1)[0].strip()):
        report.note("skipped", split, "Excel 'sep=' lines (the delimiter they name is used)", f"{path.name}:1")
        rows = rows[1:]
    blank = [n for n, cells in rows if not "".join(cells).strip()]
    for n in blank:
        report.note("skipped", split, "blank lines", f"{path.name}:{n}")
    rows = [(n, cells) for n, cells in rows if "".join(cells).strip()]
    if not rows:
        raise DataError(f"{path} holds no rows")
    first = [c.strip() for c in rows[0][1]]
    reason = "header line"
    if header is None:
        header = bool(names) and {x.lower() for x in names} <= {c.lower() for c in first}
        if not header and len(rows) > 1 and looks_like_header(first):
            header, reason = True, f"header lines guessed from their words ({fmt.prefix}header=false reads them as data)"
    head = None
    if header:
        head = first
        report.note("skipped", split, reason, f"{path.name}:{rows[0][0]}")
        rows = rows[1:]
    width = len(head) if head else len(rows[0][1]) if rows else 0
    kept = []
    for n, cells in rows:
        if len(cells) != width:
            sep = "tab-separated, no quote processing" if tsv and fmt.quoting == "none" else "tab-separated" if tsv else "comma-separated"
            bad_line(fmt, report, split, path, n, "rows with the wrong number of columns",
                     f"has {len(cells)} columns, the {'header' if head else 'first row'} has {width} ({sep})")
            continue
        if head and [c.strip() for c in cells] == head:
            report.note("dropped", split, "repeated header lines", f"{path.name}:{n}")
            continue
        kept.append((n, cells))
    return head, kept


def read_jsonl(path: Path, fmt: FileFormat, split: str, report: DataReport) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a .jsonl file."""
    text = decode(path, fmt, split, report, format="jsonl")
    if text.lstrip().startswith("["):
        raise DataError(f"{path} holds a JSON array, not JSON lines (one object a line); convert it, e.g. "
                        f"jq -c '.[]' {path} > {path.stem}.lines.jsonl")
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            if n < text.count("\n") + 1:
                report.note("skipped", split, "blank lines", f"{path.name}:{n}")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            bad_line(fmt, report, split, path, n, "lines that are not valid JSON", f"is not valid JSON ({e.msg} at column {e.colno})")
            continue
        if not isinstance(obj, dict):
            bad_line(fmt, report, split, path, n, "lines that are not JSON objects", f"is a JSON {type(obj).__name__}, not an object")
            continue
        out.append((n, obj))
    if not out:
        raise DataError(f"{path} holds no records")
    return out


def text_of(value) -> str | None:
    """A field's text: strings as they are, numbers and booleans as JSON writes them; None for null/missing
    and for lists / objects (not text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return None


NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")  # a plain integer or decimal; "1_0", "1e3", "nan" are words


def label_of(value) -> str | None:
    """A label: its text as the model's text is normalised (NFC, whitespace runs as one space, none at the
    ends) and without invisible format characters (a stray BOM, zero-width space), compared as written; a plain integer or decimal in canonical form, exactly (1, 1.0, "1.0", " +1" ->
    "1"; 0.50 -> "0.5"; 9007199254740993 stays itself). None when empty."""
    text = text_of(value)
    if text is None:
        return None
    text = normalize_sentence("".join(c for c in text if unicodedata.category(c) != "Cf"))  # invisible: a BOM, ZWSP
    if not text or not NUMBER.fullmatch(text):
        return text or None
    x = Decimal(text)
    return str(int(x)) if x == x.to_integral_value() else format(x.normalize(), "f")


def label_order(labels) -> list[str]:
    """Numeric labels in numeric order (2 before 10), then the others alphabetically."""
    def key(y: str):
        return (0, Decimal(y), "") if NUMBER.fullmatch(y) else (1, Decimal(0), y)
    return sorted(set(labels), key=key)


def label_counts(labels) -> dict[str, int]:
    counts = Counter(labels)
    return {y: counts[y] for y in label_order(counts)}


def drop_overlap(splits: dict[str, list], key, policy: str, report: DataReport, prefix: str = "data.",
                 order: tuple[str, ...] = ("train", "val", "test"), where=lambda row: None, unit: str = "row",
                 what: str = "input", repeats: bool = True) -> dict[str, list]:
    """Evaluation splits without the rows whose key (the model's input) occurs in an earlier split of `order`:
    val loses what train has, test what train or val has. policy error: refuse instead, naming the rows.
    repeats: note rows repeating another's key in the same split (kept); False for a second, finer pass."""
    seen: dict[object, str] = {}
    out = {}
    for name in order:
        rows = splits.get(name)
        if rows is None:
            continue
        kept, dupes, mine = [], [], set()
        for row in rows:
            k = key(row)
            if k in seen:
                dupes.append((row, seen[k]))
                continue
            if k in mine and repeats:  # within one split a repeat is the user's choice (e.g. weighting): kept, but said
                report.note("kept", name, f"{unit}s repeating an earlier {unit}'s {what} in the same split", where(row))
            mine.add(k)
            kept.append(row)
        if dupes and policy == "error":
            first = ", ".join(str(where(r)) for r, _ in dupes[:FIRST])
            raise DataError(f"{len(dupes)} {name} {unit}(s) also occur in an earlier split ({first}): the model would be "
                            f"evaluated on what it trained on; remove them, or set {prefix}eval_overlap=drop")
        for row, other in dupes:
            report.note("dropped", name, f"{unit}s whose {what} also occurs in {other}", where(row))
        for row in kept:
            seen.setdefault(key(row), name)
        out[name] = kept
    return {**splits, **out}
