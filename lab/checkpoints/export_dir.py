"""The folder an export writes (`lab.export out_dir=...`, `lab.eval outputs_dir=...`): never anybody else's files.

An export goes into a new or empty folder, or into one that holds only an earlier lab export of the same kind
(named by the marker file lab writes last, MARKER), which it replaces whole: the new files are written into a
sibling folder, then swapped in by rename (lab.checkpoints.atomic.replace_dir), so that at no moment does the
folder hold a mix of old and new files. Any other folder is refused in one line naming the files it would
overwrite, before the model is loaded; `overwrite=true` writes lab's files over those of the same name and
keeps the rest, says which it replaced, and adds no marker (the folder is not lab's alone). Every file and the
folder get the user's umask (safetensors creates its files 0600: colleagues on a shared filesystem could not
read the weights).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.checkpoints.atomic import replace_dir
from lab.errors import LabError

log = logging.getLogger("lab")
MARKER = ".lab_export.json"  # {"kind": ..., "files": [...]}: written last, so only a complete export has one


@dataclass
class ExportConfig:
    """python -m lab.export's settings (conf/export.yaml)."""

    ckpt_path: str = "???"  # a .ckpt file, or a run directory: its best checkpoint, else last.ckpt
    out_dir: str | None = None  # receives model.safetensors, config.json, (generation_config.json), tokenizer files
    # true: write into a folder that holds other files, replacing those of the names lab writes (the rest stay)
    overwrite: bool = False
    device: str = "auto"  # auto | cpu | cuda
    seed: int = 1337


def umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def earlier_export(out: Path, kind: str) -> bool:
    """out holds a complete lab export of this kind and nothing else."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("kind") == kind and {p.name for p in out.iterdir()} <= {*marker.get("files", []), MARKER}


def check_out_dir(out: Path, kind: str, overwrite: bool, key: str = "out_dir", what: str = "a lab export") -> None:
    """Refuse out_dir, before anything is loaded or written, unless the export may write there. key: the setting
    that named the folder; what: the files lab writes there (both for the error lines)."""
    if out.is_symlink() and not out.exists():
        raise LabError(f"{key}={out} is a broken symbolic link (or a loop); give a folder")
    if out.exists() and not out.is_dir():
        raise LabError(f"{key}={out} is a file, not a folder; give a new or empty folder for {what}")
    if not out.is_dir() or overwrite or earlier_export(out, kind):
        return
    theirs = sorted(p.name for p in out.iterdir())
    if theirs:
        shown = ", ".join(theirs[:4]) + (f" and {len(theirs) - 4} more" if len(theirs) > 4 else "")
        raise LabError(f"{key}={out} holds files that are not {what} ({shown}); give a new or empty folder, "
                       "or add overwrite=true to write lab's files over those of the same name")


@contextlib.contextmanager
def writing(out: Path, kind: str, overwrite: bool, key: str = "out_dir", what: str = "a lab export") -> Iterator[Path]:
    """-> a fresh folder to write the export into; on success it becomes `out` (see the module docstring)."""
    check_out_dir(out, kind, overwrite, key, what)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        files = sorted(p.name for p in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps({"kind": kind, "files": files}) + "\n")
        mask = umask()
        for p in tmp.iterdir():
            p.chmod(0o666 & ~mask)
        tmp.chmod(0o777 & ~mask)
        if out.is_dir() and not earlier_export(out, kind) and any(out.iterdir()):  # overwrite=true: theirs stay
            # no MARKER there: the folder is not lab's alone, so it never counts as an earlier export to replace whole
            replaced = sorted(f for f in files if (out / f).exists())
            for f in files:
                os.replace(tmp / f, out / f)
            log.info("overwrite=true: wrote %s into %s beside its other files%s; no %s there, as the folder is not "
                     "lab's alone (writing there again needs overwrite=true)", ", ".join(files), out,
                     f" (replaced {', '.join(replaced)})" if replaced else "", MARKER)
        else:
            replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
