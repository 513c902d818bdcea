"""Text in and lines out for the inference entry points (generate, classify, fill_mask, translate).

Free text never goes through Hydra: its override grammar reads a comma as a list, `[..]` as a list, strips
quotes and rejects `?`, `'` and non-ASCII. `take_text_arguments` removes `text=...` / `prompt=...` (and the
file paths) from sys.argv before Hydra parses it, so they reach the model exactly as the shell passed them,
while every setting keeps its `key=value` override form.

Inputs: `text=` (one text), `file=` (one text per line), else stdin (one text per line). Outputs keep one line
per input line, in input order: a blank input line gives a blank output line, and an output that would span
lines is written on one.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from lab.data.sources.reading import NUL, refuse_binary
from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit

PROGRESS_FROM = 32  # more input lines than this get a progress bar on stderr
_taken: dict[str, str] = {}


@user_errors_exit
def take_text_arguments(*keys: str, argv: list[str] | None = None) -> dict[str, str]:
    """Remove every `key=<anything>` for the given keys from argv (default sys.argv, in place) and keep the
    text after the first `=` verbatim; -> {key: text}, also what `taken(key)` returns later."""
    argv = sys.argv if argv is None else argv
    _taken.clear()
    rest = argv[:1]
    for arg in argv[1:]:
        key, eq, value = arg.partition("=")
        if not eq or key not in keys:
            rest.append(arg)
        elif key in _taken:
            raise LabError(f"{key}= is given twice; give one {key}=, or put the texts in a file, one per line")
        else:
            _taken[key] = value
    argv[:] = rest
    return dict(_taken)


def taken(key: str) -> str | None:
    """The verbatim value of `key=` from the command line, or None if it was not given."""
    return _taken.get(key)


def split_lines(data: str) -> list[str]:
    """Lines as line-numbering tools count them (wc -l, sacreBLEU, paste): split at "\\n", a final newline
    ends the last line rather than starting an empty one, "\\r\\n" is a line end. Blank lines are kept."""
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_texts(text: str | None, file: str | None, file_key: str = "file", text_key: str = "text") -> list[str]:
    """The texts to process: [text], the lines of file, or the lines of stdin when neither is given."""
    if text is not None and file is not None:
        raise LabError(f"give {text_key}=... or {file_key}=<path>, not both")
    if text is not None:
        if not text.strip():
            raise LabError(f'{text_key}="{text}" is empty; give the text to process, or leave {text_key}= out to '
                           "read texts from stdin, one per line")
        return [text]
    if file is not None:
        path = Path(file).expanduser()
        if path.is_dir():
            raise LabError(f"{file_key}={path} is a directory; give a UTF-8 text file with one text per line")
        if not path.is_file():
            raise LabError(f"{file_key}={path} does not exist; give a UTF-8 text file with one text per line")
        data, where = path.read_bytes(), f"{file_key}={path}"
        refuse_binary(path, data, f"convert it: iconv -f {{codec}} -t utf-8 {path} > {path.stem}.utf8.txt")
    else:
        if sys.stdin.isatty():
            print(f"reading texts from stdin, one per line (Ctrl-D ends; or give {text_key}=... / {file_key}=...)",
                  file=sys.stderr)
        data, where = sys.stdin.buffer.read(), "stdin"
        if NUL in data:
            raise LabError(f"stdin holds NUL bytes (byte offset {data.index(NUL)}): binary data, not text; pipe text, "
                           f"one per line (a .gz file: zcat it into the command), or give {file_key}=<path>")
    try:
        return split_lines(data.decode("utf-8-sig"))  # -sig: a byte-order mark is not part of the first text
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise LabError(f"{where} is not UTF-8 (line {line}, byte {e.start}: {e.reason}); convert it, e.g. "
                       "iconv -f latin1 -t utf-8") from e


def check_output_file(file: str | None, key: str) -> None:
    """A file the command writes when its work is done, checked before the work: a file name in a directory
    that exists (not a directory itself)."""
    if file is None:
        return
    path = Path(file).expanduser()
    if path.is_dir():
        raise LabError(f"{key}={file} is a directory; give a file name to write, e.g. {key}={path / 'out.txt'}")
    if not path.parent.is_dir():
        raise LabError(f"{key}={file}: its directory does not exist; create it (mkdir -p {path.parent}) or give "
                       "another path")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def say_blank(blank: int, total: int) -> None:
    if blank:
        warn(f"{blank} of {total} input lines are blank: each gives a blank output line")


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator:
    """-> advance(n): a progress bar on stderr when there are more than PROGRESS_FROM items, else a no-op."""
    if total <= PROGRESS_FROM:
        yield lambda n=1: None
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn  # noqa: PLC0415

    bar = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=False)
    task = bar.add_task(what, total=total)
    with bar:
        yield lambda n=1: bar.advance(task, n)


def write_lines(lines: list[str], out=None) -> None:
    """One line each, in order; a line break inside an output (a decoded "\\n") becomes a space, said once."""
    out = out or sys.stdout
    broken = sum("\n" in line or "\r" in line for line in lines)
    if broken:
        warn(f"{broken} outputs contained a line break, written as a space to keep one output line per input line")
    for line in lines:
        out.write(line.replace("\r\n", " ").replace("\n", " ").replace("\r", " ") + "\n")
    out.flush()
