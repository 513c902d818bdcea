"""metrics.csv that continues across resumes of a run in the same directory.

Lightning's CSVLogger deletes an existing metrics.csv (`version: ""`), so resuming a run in place erased its
history. Here an existing file is kept: when the resumed run logs its first row at step s, the rows at steps
>= s (written after the checkpoint it resumed from, and about to be redone) are dropped, one line says how
many, and new rows are appended. No step is duplicated; none before s is lost, because RunCheckpoint fsyncs
the rows up to a checkpoint's step before it publishes the checkpoint. Rewrites of the file (new columns) are atomic.
"""
from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from lab.checkpoints.atomic import atomic_write_bytes, fsync_dir
from lab.runtime.rundir import journal

log = logging.getLogger("lab")


def _csv_bytes(fieldnames: list[str], rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


class ContinuingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        self._previous: list[dict[str, str]] | None = None
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                reader = csv.DictReader(f)
                self._previous = list(reader)
                self.metrics_keys = list(reader.fieldnames or [])

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        if self._previous is not None and step is not None:
            self._continue_before(step)
        super().log_metrics(metrics_dict, step)

    def _continue_before(self, step: int) -> None:
        """Keep the earlier rows at steps < step; once, at the first row this process logs."""
        previous, self._previous = self._previous, None
        kept = [r for r in previous if r.get("step", "").isdigit() and int(r["step"]) < step]
        dropped = len(previous) - len(kept)
        if dropped:
            atomic_write_bytes(self._path(), _csv_bytes(self.metrics_keys, kept))
        last = max((int(r["step"]) for r in kept), default=None)
        log.info("metrics.csv: continuing at step %d after %d earlier rows (last step %s); dropped %d rows "
                 "logged after the checkpoint", step, len(kept), last, dropped)

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        with open(self.metrics_file_path, newline="") as f:
            rows = list(csv.DictReader(f))
        atomic_write_bytes(self._path(), _csv_bytes(fieldnames, rows))

    def _path(self):
        return Path(self.metrics_file_path)


class RunCSVLogger(CSVLogger):
    """Lightning's CSVLogger writing <save_dir>/<name>/metrics.csv, continued on resume (module docstring)."""

    def __init__(self, save_dir: str, name: str = "csv", **kwargs):
        super().__init__(save_dir=save_dir, name=name, version="", **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> ContinuingWriter:
        if self._experiment is None:
            for name in (ContinuingWriter.NAME_METRICS_FILE, ContinuingWriter.NAME_HPARAMS_FILE):  # a refused launch
                journal.before_write(Path(self.log_dir) / name)  # in another run's directory puts them back
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuingWriter(log_dir=self.log_dir)
        return self._experiment

    @rank_zero_only
    def save_durably(self) -> None:
        """save(), then fsync metrics.csv and its directory, as checkpoints are (RunCheckpoint calls this before
        it publishes one): a crash of the machine, not only of the process, keeps the rows a checkpoint covers."""
        self.save()
        path = self.experiment._path()
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            fsync_dir(path.parent)
