"""Helpers the inference entry points share: device choice, and reading inputs from text= or a file."""
from __future__ import annotations

from pathlib import Path

import torch

from lab.errors import LabError


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def read_inputs(text: str | None, file: str | None, file_key: str = "file") -> list[str]:
    """The texts to process: `text="..."` or a file with one text per line (blank lines skipped)."""
    if (text is None) == (file is None):
        raise LabError(f'give exactly one of text="..." or {file_key}=<path with one text per line>')
    if text is not None:
        return [str(text)]
    path = Path(str(file)).expanduser()
    if not path.is_file():
        raise LabError(f"{file_key}={path} does not exist")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
