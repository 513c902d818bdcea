"""Reading text files as a stream of decoded chunks, in memory bounded by the chunk size, never the file's.

The rules are lab.data.sources.reading.decode's, applied chunk by chunk: strict decoding as `encoding` (a bad byte is
one error naming its byte offset), or U+FFFD replacements counted with encoding_errors=replace; a BOM stripped
and said; \\r\\n read as \\n; NUL bytes or many control characters refused as binary. `.gz` files are
decompressed on the fly, `.zst` too with the `zstandard` package (pip install 'lab[zstd]').

A file can be cut into consecutive parts at byte positions (the held-out tail of a training file); each part
is a document of its own. Hugging Face `datasets` files (`.arrow` as save_to_disk writes them, `.parquet`) are
read a record batch at a time with pyarrow (pip install 'lab[hf-datasets]'): each row's text field is a
document. `safe_cuts` splits text where a tokenizer's pre-tokenization splits anyway, so
tokenizing the pieces one by one gives exactly the ids of tokenizing the whole.
"""
from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lab.data.sources.reading import CONTROL, NUL, DataReport, FileFormat, bad_line, refuse_binary
from lab.errors import DataError

CHUNK = 8 << 20  # bytes read (and decoded) at a time
WHITESPACE = " \n\t"  # where safe cuts are looked for (any whitespace is safe; these are where text has it)
BOUNDARY = re.compile(r"\S\s")


@dataclass(frozen=True)
class Stat:
    """What identifies a file's content cheaply: the cache key of a prepared corpus (data.verify=stat), and
    what must still hold after reading it (a file that changed while being prepared is refused)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> Stat:
        try:
            s = os.stat(path)
        except OSError as e:
            raise DataError(f"cannot read {path}: {e}") from e
        return cls(str(path), s.st_size, s.st_mtime_ns)

    def check_unchanged(self) -> None:
        now = Stat.of(Path(self.path))
        if now != self:
            raise DataError(f"{self.path} changed while it was being prepared (size {self.size} -> {now.size}); "
                            "run again once nothing writes to it (the finished files are kept)")


def content_hash(path: Path) -> str:
    """sha256 of a file's bytes (data.verify=content), read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def open_bytes(path: Path) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """-> (the decompressed stream, the raw file): the raw file's position says how far into it the stream is."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from e
    try:
        if path.suffix == ".gz":
            yield gzip.GzipFile(fileobj=raw, mode="rb"), raw
        elif path.suffix == ".zst":
            try:
                import zstandard  # noqa: PLC0415 - an optional extra
            except ImportError as e:
                raise DataError(f"{path} is zstandard-compressed; install the reader: pip install 'lab[zstd]'") from e
            yield zstandard.ZstdDecompressor().stream_reader(raw), raw
        else:
            yield raw, raw
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"cannot read {path}: {e}") from e
    finally:
        raw.close()


def decompressed_size(path: Path) -> int:
    """Bytes of a compressed file's content, by decompressing it once (in chunks, nothing kept)."""
    with open_bytes(path) as (f, _):
        return sum(len(data) for data in iter(lambda: f.read(CHUNK), b""))


def stream_text(path: Path, fmt: FileFormat, split: str, report: DataReport, cuts: tuple[int, ...] = (),
                chunk: int | None = None, at_lines: bool = False) -> Iterator[tuple[int, str]]:
    """-> (part, text) in file order; part i is the text of the raw file's bytes [cuts[i-1], cuts[i]); of a
    compressed file, the same fractions of its decompressed bytes (found by a first pass that only
    decompresses, ~100x faster than tokenizing), so a small .gz has held-out parts too. at_lines: each cut moves on
    to the end of the line it falls in (just after the first newline at or after it), which goes to the part
    before the cut: parts of whole lines (not for UTF-16/32, whose newline is not one byte). Facts and events go to report as decode() puts them."""
    wide = codecs.lookup(fmt.encoding).name.startswith(("utf-16", "utf-32"))  # where NUL bytes are text
    errors = "strict" if fmt.encoding_errors == "strict" else "replace"
    dec = codecs.getincrementaldecoder(fmt.encoding)(errors=errors)
    ignoring = codecs.getincrementaldecoder(fmt.encoding)(errors="ignore") if errors == "replace" else None
    fed = replaced = crlf = cr = control = chars = lines = 0
    bom, pending, part, tail, snapped = False, "", 0, "", 0

    def count_not_nfc(text: str) -> None:
        """Lines not in Unicode NFC, noted as decode() notes them; a line cut by the chunk is checked with the
        end of its first half (composition never reaches further back than a few characters)."""
        nonlocal lines, tail
        if not unicodedata.is_normalized("NFC", tail + text):
            for n, line in enumerate((tail + text).split("\n")):
                if not unicodedata.is_normalized("NFC", line):
                    report.note("changed", split, "lines not in Unicode NFC, read as NFC (as the model sees them)",
                                f"{path.name}:{lines + n + 1}")
        lines += text.count("\n")
        tail = (tail + text).rsplit("\n", 1)[-1][-16:]

    def text_of(data: bytes, at: int, final: bool) -> str:
        """The text of data, which starts at byte `at` of the (decompressed) stream."""
        nonlocal replaced, crlf, cr, control, chars, bom, pending
        buffered = len(dec.getstate()[0])  # undecoded bytes kept from the previous chunk
        try:
            text = dec.decode(data, final)
        except UnicodeDecodeError as e:
            raise DataError(f"{path} is not valid {fmt.encoding} at byte offset {at - buffered + e.start} "
                            f"({e.reason}); set {fmt.prefix}encoding= to the file's encoding (e.g. latin-1, cp1252, "
                            f"utf-16), or {fmt.prefix}encoding_errors=replace to replace undecodable bytes with U+FFFD") from e
        if ignoring is not None:
            replaced += text.count("\ufffd") - ignoring.decode(data, final).count("\ufffd")
        if chars == 0 and not bom and text.startswith("\ufeff"):
            text, bom = text[1:], True
        text, pending = pending + text, ""
        if text.endswith("\r") and not final:  # a \r\n may straddle two chunks
            text, pending = text[:-1], "\r"
        crlf += text.count("\r\n")
        text = text.replace("\r\n", "\n")
        cr += text.count("\r")  # old-Mac line ends (or a stray \r): a line end, as the model's text has it
        text = text.replace("\r", "\n")
        if "\0" in text:
            raise DataError(f"{path} holds NUL characters (as {fmt.encoding}): it is binary, not text")
        control += sum(text.count(c) for c in CONTROL)
        chars += len(text)
        count_not_nfc(text)
        return text

    chunk = chunk or CHUNK
    with open_bytes(path) as (f, raw):
        # a plain file is read up to the size it had when opened: one that grows while read ends, then is refused
        left = os.fstat(raw.fileno()).st_size if f is raw else None
        if f is not raw and cuts:
            size = os.fstat(raw.fileno()).st_size
            cuts = tuple(c * decompressed_size(path) // max(size, 1) for c in cuts)
        while data := f.read(chunk if left is None else min(chunk, left)):
            left = None if left is None else left - len(data)
            if fed == 0:
                bom16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))  # (and UTF-32-LE's)
                if bom16 and not wide:
                    raise DataError(f"{path} starts with a UTF-16 byte order mark; set {fmt.prefix}encoding=utf-16 "
                                    "(utf-32 if it is that)")
                if not wide:  # a known binary format by its first bytes, or NUL bytes
                    refuse_binary(path, data, f"set {fmt.prefix}encoding={{codec}}")
                bom = bom16  # the utf-16/32 codecs consume the BOM themselves
            elif not wide and NUL in data:  # binary content anywhere, not only at the start
                raise DataError(f"{path} holds NUL bytes (byte offset {fed + data.index(NUL)}): a binary file, not "
                                "text; give the text file")
            fed += len(data)
            while part < len(cuts) and fed > cuts[part]:  # split this chunk at the cut
                at, cut = fed - len(data), cuts[part] - (fed - len(data))
                if at_lines and not wide and cuts[part] < snapped:  # its line ended at the previous cut: an empty part
                    cut = 0
                elif at_lines and not wide:  # (a cut whose line ends in a later chunk waits for it: cut < 0 there)
                    cut = data.find(b"\n", max(cut, 0)) + 1
                    if not cut:
                        break
                    snapped = at + cut
                head, data = data[:cut], data[cut:]
                yield part, text_of(head, at, False) if head else ""
                part += 1
            yield part, text_of(data, fed - len(data), False)
        yield part, text_of(b"", fed, True)
    if control > max(8, chars // 100):
        raise DataError(f"{path} holds {control} control characters in {chars}: it is binary, not text")
    report.file(split, path, bytes=fed, encoding=fmt.encoding, bom_stripped=bom, crlf_read_as_lf=crlf, cr_read_as_lf=cr)
    if control:
        report.note("kept", split, "control characters (e.g. ESC, backspace) in the text", path.name, count=control)
    if replaced:
        report.note("changed", split, f"undecodable bytes replaced by U+FFFD ({path.name}, {fmt.prefix}encoding_errors=replace)",
                    count=replaced)


TABLES = (".arrow", ".parquet")  # Hugging Face datasets' files: Arrow IPC streams (save_to_disk), Parquet


def table_rows(plan, report: DataReport, cuts: tuple[int, ...]) -> Iterator[tuple[int, str | None]]:
    """-> (part, text), (part, None) per row of an .arrow / .parquet file: its text_field, a document of the part
    in which the row's share of the file's bytes ends (row i of n ends at byte (i + 1) * size / n, so the held-out
    tail is cut at a row, however small the file). A null or non-string value is an error naming the row, or
    skipped and counted (bad_lines=skip)."""
    try:
        import pyarrow as pa  # noqa: PLC0415 - an optional extra
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError as e:
        raise DataError(f"{plan.path} is a {plan.path.suffix} table (Hugging Face datasets); install the reader: "
                        "pip install 'lab[hf-datasets]'") from e
    field, size = plan.text_field, Stat.of(plan.path).size
    try:
        if plan.path.suffix == ".parquet":
            table = pq.ParquetFile(plan.path)
            names, rows = table.schema_arrow.names, table.metadata.num_rows
            batches = lambda: table.iter_batches(batch_size=1024, columns=[field])  # noqa: E731
        else:
            with pa.memory_map(str(plan.path)) as source:  # counting rows reads the batches' headers only
                reader = pa.ipc.open_stream(source)
                names, rows = reader.schema.names, sum(b.num_rows for b in reader)
            batches = lambda: pa.ipc.open_stream(pa.memory_map(str(plan.path)))  # noqa: E731
        if field not in names:
            raise DataError(f"{plan.path} has no column {field!r} (its columns: {', '.join(names)}); set "
                            f"{plan.fmt.prefix}text_field= to the column that holds the text")
        part, i, chars = 0, 0, 0
        for batch in batches():
            column = batch.column(batch.schema.get_field_index(field))
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise DataError(f"{plan.path}: column {field!r} holds {column.type}, not text; set "
                                f"{plan.fmt.prefix}text_field= to the column that holds the text")
            for value in column.to_pylist():
                i += 1
                while part < len(cuts) and i * size / rows > cuts[part]:
                    part += 1
                if value is None:
                    bad_line(plan.fmt, report, plan.field, plan.path, i, f"rows whose {field!r} is null",
                             f"row {i} has no {field!r} value (null)")
                    continue
                chars += len(value)
                yield part, value
                yield part, None
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"cannot read {plan.path} as a {plan.path.suffix} table: {e}") from e
    report.file(plan.field, plan.path, bytes=size, rows=rows, characters=chars)


def documents_of(plan, report: DataReport, cuts: tuple[int, ...]) -> Iterator[tuple[int, str | None]]:
    """-> (part, text) of a FilePlan (lab.data.corpora): a text file's parts are its documents; a JSON-lines
    file's records are, each followed by (part, None), its text field read as a document of the part in
    which its line ends. A line that is not a JSON object with a string text field is an error naming it, or
    skipped and counted (bad_lines=skip); a blank line is no record. An .arrow / .parquet file: table_rows."""
    if plan.path.suffix in TABLES:
        yield from table_rows(plan, report, cuts)
        return
    chunks = stream_text(plan.path, plan.fmt, plan.field, report, cuts, at_lines=plan.lines)
    if plan.text_field is None:
        yield from chunks
        return
    carry, number = "", 0
    for part, text in _with_end(chunks):
        lines = (carry + text).split("\n")
        carry = lines.pop()
        for line in lines:
            number += 1
            if not line.strip():
                continue
            try:
                value = json.loads(line)
                value = value[plan.text_field] if isinstance(value, dict) else None
            except (ValueError, KeyError):
                value = None
            if not isinstance(value, str):
                bad_line(plan.fmt, report, plan.field, plan.path, number, f"lines without a string {plan.text_field!r}",
                         f"not a JSON object with a string field {plan.text_field!r} (data.corpus.text_field)")
                continue
            if not value.strip():  # no document (the shard drops whitespace): counted, not vanished
                report.note("dropped", plan.field, f"records with an empty {plan.text_field!r}", f"{plan.path.name}:{number}")
            yield part, value
            yield part, None


def _with_end(chunks: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """The chunks, then a newline in the last part (the last line of a file without a final newline ends)."""
    part = 0
    for part, text in chunks:
        yield part, text
    yield part, "\n"


def safe_cuts(text: str, size: int) -> tuple[list[str], str]:
    """Cut text into pieces of about `size` characters, each ending just before whitespace that follows a
    non-space character: byte-level BPE's and WordPiece's pre-tokenizers split there anyway, so the pieces'
    ids concatenated are the whole text's. -> (pieces, the rest after the last cut, carried into the next
    chunk). A run of more than 4 x size characters without whitespace is cut where it is (the only place where
    ids can differ from the whole's)."""
    pieces, start = [], 0
    while len(text) - start > size:
        end = last_boundary(text, start, start + size)
        if end is None:  # a long word: cut after it
            m = BOUNDARY.search(text, start + size, start + 4 * size)
            if m is None and len(text) - start <= 4 * size:
                break  # it may end in the next chunk
            end = m.start() + 1 if m else start + size
        pieces.append(text[start:end])
        start = end
    return pieces, text[start:]


def last_boundary(text: str, lo: int, hi: int) -> int | None:
    """The last i in (lo, hi] with text[i - 1] not whitespace and text[i] whitespace, or None."""
    i = max(text.rfind(c, lo, hi + 1) for c in WHITESPACE)
    while i > lo and text[i - 1].isspace():
        i -= 1
    return i if i > lo else None
