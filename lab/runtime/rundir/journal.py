"""A refused command leaves every run directory as it found it.

Between the moment Hydra enters a run's directory and the moment training starts, everything lab (and Hydra)
writes there is recorded: the files' previous bytes, modes and times, the lengths of the logs it appends to,
and whether the directory itself was made by this process, with the folders above it that this launch made
(note_missing: a runs or cache root included). When the run is refused in that span (a user error:
one `error:` line, exit 2), `undo` puts it all back: a directory this launch made is removed whole, one that
belonged to another run (hydra.run.dir=<a finished run> ckpt_path=auto) keeps its status.json, config.yaml,
.hydra/ and train.log byte for byte. `keep` ends the span: from the first training step on a run's own failure
is recorded in its own status.json. A sweep job keeps its record always (the sweep's summary reads it).

    note_missing(dir)     Hydra is about to make dir with its parents (lab.runtime.cli.errors hooks run_job)
    begin(dir)            Hydra entered dir (lab.runtime.cli.errors hooks Hydra's job start)
    before_write(path)    lab or Hydra is about to replace path
    before_append(path)   ... or to append to it
    take_back_cache_entries(root)   lab.prepare: the cache entries this launch publishes are its output
    keep()                training starts (keep_from_first_step): what is written from here on stays
    undo() -> bool        refused: restore; True when something was restored

W&B begins its run when training starts (lab.runtime.trainer.loggers), after every refusal; should anything
else have written into <run dir>/wandb/ since begin, it is removed and its links (latest-run, debug*.log) point
back where they did. lab.train keeps its prepared data when refused (it is content-addressed in lab's cache and
reused by the next run, which may have taken long to prepare); lab.prepare, whose whole output it is, does not.
"""
from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("lab")
STARTED_NS = time.time_ns()  # a directory modified after this (and empty when entered) was made by this process


@dataclass
class _Journal:
    run_dir: Path | None = None
    made_here: bool = False  # run_dir was created by this process: undo removes it whole
    run_dir_stat: os.stat_result | None = None  # another run's directory: its times, put back after the lock file went
    made_parents: list[Path] = field(default_factory=list)  # folders above it this launch made, innermost first
    files: dict[Path, tuple[bytes, os.stat_result] | None] = field(default_factory=dict)  # None: did not exist
    lengths: dict[Path, tuple[int, os.stat_result]] = field(default_factory=dict)
    new_dirs: list[Path] = field(default_factory=list)
    # <run dir>/wandb/ at begin: ({name: link target, None if not a link}, its stat), None if there was none
    tool_dir: tuple[dict[str, str | None], os.stat_result] | None = None
    cache: tuple[Path, int] | None = None  # (cache root, len(lab.data.cache.published) when it was asked)


_journal: _Journal | None = None
_missing: list[Path] = []  # what note_missing found missing, innermost first
TOOL_DIR = "wandb"  # W&B's folder in the run directory (conf/logger/default.yaml: its save_dir is the run directory)


def _listing(folder: Path) -> dict[str, str | None]:
    """{name: link target or None} of what is in folder."""
    return {p.name: os.readlink(p) if p.is_symlink() else None for p in folder.iterdir()} if folder.is_dir() else {}


def note_missing(run_dir: str | Path | None) -> None:
    """run_dir is about to be made with its parents: the folders of it that do not exist yet are this launch's
    (a user's empty folder that was there is not, though nothing else tells them apart afterwards). None: not known."""
    path = Path(run_dir).absolute() if run_dir is not None else None
    _missing[:] = [p for p in (path, *path.parents) if not p.exists()] if path is not None else []


def begin(run_dir: str | Path) -> None:
    """Start recording for the run directory Hydra has just entered (made if it was missing)."""
    global _journal
    path = Path(run_dir)
    made_here = path.is_dir() and not any(path.iterdir()) and path.stat().st_mtime_ns >= STARTED_NS
    _journal = _Journal(path, made_here)
    if not made_here and path.is_dir():
        _journal.run_dir_stat = path.stat()
    if not made_here and (path / TOOL_DIR).is_dir():
        _journal.tool_dir = (_listing(path / TOOL_DIR), (path / TOOL_DIR).stat())
    if made_here:  # <runs_dir>/<name>/, and runs_dir itself when the launch made it
        _journal.made_parents = [p for p in _missing if p in path.absolute().parents]
    _missing.clear()  # noted for this directory only
    before_append(path / "train.log")  # Hydra's log file handler appends to an earlier run's log


def _watched(path: Path) -> bool:
    return _journal is not None and not (_journal.made_here and path.is_relative_to(_journal.run_dir))


def before_write(path: str | Path) -> None:
    """path is about to be written (created or replaced)."""
    path = Path(path)
    if not _watched(path) or path in _journal.files or path in _journal.lengths:
        return
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    _journal.new_dirs.extend(missing[::-1][:1])  # the outermost missing directory goes, with what is in it
    _journal.files[path] = (path.read_bytes(), path.stat()) if path.is_file() else None


def before_append(path: str | Path) -> None:
    """path (a log) is about to be appended to: undo cuts it back to its present length."""
    path = Path(path)
    if not _watched(path) or path in _journal.files or path in _journal.lengths:
        return
    if path.is_file():
        _journal.lengths[path] = (path.stat().st_size, path.stat())
    else:
        before_write(path)


def take_back_cache_entries(root: str | Path) -> None:
    """The cache entries this launch publishes from now on (lab.data.cache.published) are removed by undo,
    with the folders under root they leave empty."""
    from lab.data import cache  # noqa: PLC0415 - only lab.prepare asks

    if _journal is not None:
        _journal.cache = (Path(root).expanduser(), len(cache.published))


def keep() -> None:
    """The run has started: what it writes from here on is its own."""
    global _journal
    _journal = None


def keep_from_first_step(trainer) -> None:
    """keep() when `trainer` starts its first training step: model.init_from, a resumed checkpoint's state and
    the sanity validation are still setup (refused by undo); the first step is the run's own."""
    from lightning.pytorch.callbacks import Callback  # noqa: PLC0415 - only a training run needs it

    class KeepOnTrainStart(Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            keep()

    trainer.callbacks.append(KeepOnTrainStart())


def _restore_times_and_mode(path: Path, st: os.stat_result) -> None:
    os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def undo() -> bool:
    """Put back what this launch changed since begin(); True when it had changed anything."""
    from lab.runtime.rundir import lock  # noqa: PLC0415 - lock imports nothing of this module; released first

    global _journal
    journal, _journal = _journal, None
    if journal is None:
        return False
    lock.release_run_dirs()
    _close_log_files_under([journal.run_dir, *journal.files, *journal.lengths])
    if journal.made_here:
        shutil.rmtree(journal.run_dir, ignore_errors=True)
    for path, before in journal.files.items():
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before[0])
            _restore_times_and_mode(path, before[1])
    for path, (length, st) in journal.lengths.items():
        if path.is_file():
            os.truncate(path, length)
            _restore_times_and_mode(path, st)
    for d in journal.new_dirs:
        shutil.rmtree(d, ignore_errors=True)
    tool_dir = _restore_tool_dir(journal)
    if journal.cache is not None:
        _remove_published(*journal.cache)
    for folder in journal.made_parents:  # after the cache entries, which may lie under a made cache root
        try:
            folder.rmdir()
        except OSError:  # something else is in it (or appeared there meanwhile): not ours to remove
            break
    if journal.run_dir_stat is not None and journal.run_dir.is_dir():
        _restore_times_and_mode(journal.run_dir, journal.run_dir_stat)
    return journal.made_here or tool_dir or bool(journal.files or journal.lengths)


def _restore_tool_dir(journal: _Journal) -> bool:
    """<run dir>/wandb/ as begin found it: new entries removed (the whole folder if it is new), links
    W&B re-pointed at its new run pointed back. -> True when anything had changed."""
    folder = journal.run_dir / TOOL_DIR
    if journal.made_here or not folder.is_dir():
        return False
    if journal.tool_dir is None:
        shutil.rmtree(folder, ignore_errors=True)
        return True
    (before, st), now = journal.tool_dir, _listing(folder)
    if now == before:
        return False
    for name, target in now.items():
        path = folder / name
        if name not in before:
            if target is None and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        elif target != before[name] and before[name] is not None:
            path.unlink(missing_ok=True)
            path.symlink_to(before[name])
    _restore_times_and_mode(folder, st)
    return True


def _remove_published(root: Path, start: int) -> None:
    from lab.data import cache  # noqa: PLC0415 - as take_back_cache_entries

    root = root.resolve()
    for path in reversed(cache.published[start:]):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        for folder in path.resolve().parents:  # made for it (lm/, sources/<name>/): removed when nothing else is in them
            if folder == root or not folder.is_relative_to(root):
                break
            try:
                folder.rmdir()
            except OSError:
                break
    del cache.published[start:]


def _close_log_files_under(paths: list[Path]) -> None:
    """Log file handlers writing into what undo restores: closed, so nothing is written there after it."""
    targets = {Path(p).resolve() for p in paths}
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for handler in list(logger.handlers):
            if isinstance(handler, logging.FileHandler):
                file = Path(handler.baseFilename).resolve()
                if file in targets or any(file.is_relative_to(t) for t in targets if t.is_dir()):
                    logger.removeHandler(handler)
                    handler.close()
