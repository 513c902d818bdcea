"""Writing checkpoints so that a kill or a full disk at any moment leaves every checkpoint loadable.

A checkpoint goes to a hidden temporary name in its own directory, is flushed and fsynced, then renamed over
the final name (rename is atomic within one filesystem) and the directory entry is fsynced: a reader sees
the old complete file or the new complete file, never half of one. A write that fails (ENOSPC, EDQUOT) removes
its temporary file and ends the run with one line naming the directory and the space it needs.
"""
from __future__ import annotations

import errno
import io
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from lab.errors import LabError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
TMP_GLOB = ".*.tmp*"  # temporary names: hidden and never ending in .ckpt, so globbing *.ckpt only finds whole files


def tmp_name(path: Path, per_process: bool = True) -> Path:
    """.last.ckpt.tmp-<pid> (a file: one writer per process), or .last.ckpt.tmp (a sharded directory all ranks write)."""
    return path.with_name(f".{path.name}.tmp" + (f"-{os.getpid()}" if per_process else ""))


def is_tmp(path: Path) -> bool:
    return path.match(TMP_GLOB)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_full_error(directory: Path, needed_bytes: int, cause: OSError) -> LabError:
    free = shutil.disk_usage(directory).free
    return LabError(f"disk full: cannot write a checkpoint into {directory} ({cause.strerror}): it needs about "
                    f"{needed_bytes / 2**20:.0f} MiB, {free / 2**20:.0f} MiB are free. Earlier checkpoints there are "
                    f"intact; free space (or set paths.runs_dir to a larger disk) and rerun with ckpt_path=auto")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """path <- data, all or nothing."""
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in DISK_FULL:
            raise disk_full_error(path.parent, len(data), e) from e
        raise
    fsync_dir(path.parent)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save IO, made atomic (see the module docstring). Installed by RunCheckpoint."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()  # serialise in memory first: the file is written in one go, and its size is known
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getbuffer())


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a completely written directory `tmp` to `final` (the FSDP2 sharded checkpoint). A directory cannot
    be renamed over a non-empty one, so the old one is first renamed aside and deleted after: at every moment
    either `final` or `<final>.old` is a complete checkpoint (readers look for both, see autoresume)."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)
