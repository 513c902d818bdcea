"""A Hugging Face directory's weights as a read-only mapping that reads one tensor when asked for it, in the file's
dtype (safetensors' safe_open: the files are memory-mapped, nothing is read ahead): import takes what it needs
tensor by tensor instead of holding the whole checkpoint in memory."""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import torch

from lab.errors import LabError

SHARDS = "model.safetensors.index.json"  # a large model's weights in several safetensors files


def weight_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards model.safetensors.index.json names; one LabError for a bad index or a
    missing shard."""
    if not (path / SHARDS).is_file():
        return [path / "model.safetensors"]
    try:
        names = sorted(set(json.loads((path / SHARDS).read_text())["weight_map"].values()))
    except (ValueError, KeyError) as e:
        raise LabError(f"{path / SHARDS} is not a shard index ({e})") from e
    absent = [f for f in names if not (path / Path(f).name).is_file()]
    if absent:
        raise LabError(f"{path} lacks the shard(s) {', '.join(absent[:3])} its {SHARDS} names")
    return [path / Path(f).name for f in names]


class Weights(Mapping):
    """name -> tensor of a directory's safetensors files, read on access; a context manager that closes them."""

    def __init__(self, path: Path):
        from safetensors import safe_open  # noqa: PLC0415 - the export extra

        self._stack = ExitStack()
        self._where = {}
        for f in weight_files(path):
            handle = self._stack.enter_context(safe_open(str(f), framework="pt"))
            self._where |= dict.fromkeys(handle.keys(), handle)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._where[name].get_tensor(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape without reading it."""
        return tuple(self._where[name].get_slice(name).get_shape())

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
