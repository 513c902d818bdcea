"""A .safetensors file checked before it is read: safetensors' own error for a damaged file is a
SafetensorError traceback ("incomplete metadata, file not fully covered"); this says which file and what is
wrong with it, in one line. The format: 8 bytes (little-endian header length n), n bytes of JSON header naming
each tensor's data_offsets, then the data; a file shorter than the header says was cut off (a copy or download
that did not finish)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from lab.errors import LabError


def check_safetensors(path: Path) -> None:
    """Refuse a file that is not a whole .safetensors file, naming it and why."""
    size = path.stat().st_size
    fix = "copy or download it again (or export it again with lab.export)"
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise LabError(f"{path} is {size} bytes, too short for a .safetensors file; {fix}")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise LabError(f"{path} is truncated: {size:,} bytes, its header alone needs {8 + n:,}; {fix}")
        try:
            header = json.loads(f.read(n))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise LabError(f"{path} is not a .safetensors file (its header does not parse: {e}); {fix}") from e
    if 8 + n + end > size:
        raise LabError(f"{path} is truncated: {size:,} bytes of the {8 + n + end:,} its header describes; {fix}")
