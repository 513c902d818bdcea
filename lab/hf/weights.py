"""A Hugging Face directory's weights as a read-only mapping that reads one tensor when asked for it, in the file's
dtype (safetensors' safe_open: the files are memory-mapped, nothing is read ahead): import takes what it needs
tensor by tensor instead of holding the whole checkpoint in memory."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from lab.checkpoints.safetensors_file import check_safetensors
from lab.errors import LabError

# safetensors' names of the floating dtypes a checkpoint is written in
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
SHARDS = "model.safetensors.index.json"  # a large model's weights in several safetensors files


def weight_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards model.safetensors.index.json names, each checked whole; one LabError for a
    bad index, a missing shard or a truncated file."""
    if not (path / SHARDS).is_file():
        check_safetensors(path / "model.safetensors")  # a truncated file: one line, not safetensors' traceback
        return [path / "model.safetensors"]
    try:
        names = sorted(set(json.loads((path / SHARDS).read_text())["weight_map"].values()))
    except (ValueError, KeyError) as e:
        raise LabError(f"{path / SHARDS} is not a shard index ({e})") from e
    absent = [f for f in names if not (path / Path(f).name).is_file()]
    if absent:
        raise LabError(f"{path} lacks the shard(s) {', '.join(absent[:3])} its {SHARDS} names")
    for f in names:
        check_safetensors(path / Path(f).name)
    return [path / Path(f).name for f in names]


class Weights(Mapping):
    """name -> tensor of a directory's safetensors files, read on access in the file's dtype. Each read maps the
    file only while it copies that tensor out (a mapped page that was read counts in the process's memory until the
    file is unmapped): reading a checkpoint tensor by tensor costs one tensor at a time, whatever its shards' size."""

    def __init__(self, path: Path):
        files = weight_files(path)
        if (path / SHARDS).is_file():
            index = json.loads((path / SHARDS).read_text())["weight_map"]
            self._where = {k: path / Path(f).name for k, f in index.items()}
        else:
            with _opened(files[0]) as f:
                self._where = dict.fromkeys(f.keys(), files[0])

    def __getitem__(self, name: str) -> torch.Tensor:
        with _opened(self._where[name]) as f:
            return f.get_tensor(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape without reading it."""
        with _opened(self._where[name]) as f:
            return tuple(f.get_slice(name).get_shape())

    def dtype(self) -> torch.dtype:
        """The checkpoint's dtype: its floating tensors' most common one."""
        counts = Counter()
        for file in set(self._where.values()):
            with _opened(file) as f:
                counts.update(str(f.get_slice(k).get_dtype()) for k in f.keys())  # noqa: SIM118 - safe_open is no mapping
        floating = [d for d, _ in counts.most_common() if d in DTYPES]
        return DTYPES[floating[0]] if floating else torch.float32

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc) -> None:
        """Nothing stays open between reads: the context marks where the directory is read."""


def _opened(file: Path):
    from safetensors import safe_open  # noqa: PLC0415 - the export extra

    return safe_open(str(file), framework="pt")
