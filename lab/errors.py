"""User-facing errors: raised for mistakes a user can fix, printed as one message without a traceback."""
from __future__ import annotations

import re

EXCERPT = 40  # characters of the user's data an error quotes: enough to find the line, never the whole line


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """A short quote of user data for a one-line message: repr (control characters visible), cut with '...'."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def excerpts(items, count: int = 6, limit: int = 24) -> str:
    """The first few of a list of user strings (column or field names), each short: "'a', 'b', ..."."""
    items = list(items)
    return ", ".join(excerpt(str(x), limit) for x in items[:count]) + (", ..." if len(items) > count else "")


class LabError(Exception):
    """A problem with the user's input (config, data, checkpoint); the message says what and how to fix it."""


class ConfigError(LabError, ValueError):
    """A config value that cannot work; the message names the key and the fix. (A ValueError too: a value is what
    is wrong, and code that builds lab's objects from Python may catch it as one.)"""


class DataError(LabError):
    """Missing, corrupt or unreadable data."""


class UnsafeFileError(LabError):
    """A file from elsewhere (checkpoint, cache) that would run code if it were unpickled: refused unread.

    Raised when torch.load(weights_only=True) meets a global it does not allow (the pickle names a callable
    such as os.system); `found` is that global as torch reports it."""

    def __init__(self, path, found: str):
        super().__init__(f"{path} holds executable objects ({found}), not only tensors and data: unpickling it "
                         "would run code, so lab refused it; use a checkpoint from lab.train (or a model.safetensors "
                         "export) that you trust")

    @classmethod
    def from_load_error(cls, path, error: BaseException, file=None) -> UnsafeFileError | None:
        """The refusal behind a torch.load(weights_only=True) error, or None when the file is merely damaged.
        file (default: path): read for a raw pickle (not torch.save's format), whose callables torch's loader
        does not name ("Unsupported operand")."""
        found = raw_pickle_callable(file if file is not None else path)
        if found:
            return cls(path, found)
        text = str(error)
        executable = re.search(r"[Uu]nsupported (global|GLOBAL|class)|unrecognized function", text)
        if "Weights only load failed" not in text or not executable:  # e.g. "Unsupported operand": damaged
            return None
        found = re.search(r"(?:GLOBAL|global) ([\w.]+)", text)
        return cls(path, found.group(1) if found else "objects outside torch's allow-list")


TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."  # torch.save(_use_new_zipfile_serialization=False)


def raw_pickle_callable(file) -> str | None:
    """The first callable (module.name) a raw pickle file would import, found by reading its opcodes without
    running them; None for anything else (torch.save's zip or legacy format, a pickle of plain data)."""
    import pickletools  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    try:
        path = Path(str(file))
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except (OSError, ValueError):
        return None
    if not data.startswith(b"\x80") or data.startswith(TORCH_LEGACY_MAGIC):
        return None
    strings: list[str] = []  # STACK_GLOBAL takes its module and name from the two strings pushed before it
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("GLOBAL", "INST"):
                return str(arg).replace(" ", ".")
            if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(arg, str):
                strings.append(arg)
    except Exception:  # truncated or not a pickle after all: damaged, as torch says
        return None
    return None
