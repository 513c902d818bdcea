"""One run's directory, `<runs_dir>/<name>/<time>/` (a job's `<sweep dir>/<n>/` in a multirun), as one object
from its claim to its release. Everything lab writes at the directory's top level is written through RunDir:

    config.yaml        the resolved config                              save_config
    data_report.json   what the datamodule read, dropped, truncated    save_data_report
    status.json        how the run ended (running -> completed | ...)  write_status, read by read_status;
                       its `history` lists every state written (rundir.history)
    wandb_id           the W&B run every launch of this run logs to    pin_wandb_run
    wandb_last_step    the last step that W&B run logged               wandb_last_step, record_wandb_last_step
    .lock              one process per directory                       claim, release (rundir.lock)
    train.log          Hydra's log file, appended to on ckpt_path=auto claim (rundir.lock.move_log_into)

Subdirectories belong to their writers: checkpoints/ (callbacks.RunCheckpoint), csv/ (trainer.metrics_csv),
wandb/ (W&B), .hydra/ (Hydra). Only global rank 0 (`owner`) writes; other ranks of a job read.

    with RunDir.claim(cfg) as run_dir:   # created, or the earlier run found (ckpt_path=auto); locked
        run_dir.save_config(resolved)
        ...                              # released at the end, also when the run fails
"""
from __future__ import annotations

import json
import logging
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf, open_dict

from lab.runtime.rundir import history, journal, lock, signals
from lab.runtime.rundir.process import start_time

log = logging.getLogger("lab")
STATUS_FILE = "status.json"
WANDB_ID_FILE = "wandb_id"  # the W&B run id every launch of this run logs to
LAST_STEP_FILE = "wandb_last_step"  # "<W&B run id> <last step logged>", written when a W&B run ends


def launch_fields() -> dict[str, Any]:
    """status.json's fields for a run this process starts now: running, since when, and which process on which
    host (with the process's start time, so that a reused pid is not taken for the run: lab.runtime.rundir.process)."""
    return dict(state="running", started=now(), error=None, pid=os.getpid(), pid_started=start_time(os.getpid()),
                host=os.uname().nodename)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunDir:
    """path: the directory. owner: this process writes its files (global rank 0; the other ranks of a
    distributed job read only)."""

    # The final metrics (val, test, params/*) of the run this process ran last: training records them, the
    # job's status.json keeps them (lab.runtime.sweeps), and the Optuna sweeper reads its objectives there.
    final_metrics: ClassVar[dict[str, float]] = {}

    def __init__(self, path: str | Path, owner: bool = True):
        self.path = Path(path)
        self.owner = owner

    # ---- its life: claimed (locked) for this process, released at the end -------------------------------
    @classmethod
    def claim(cls, cfg: DictConfig) -> RunDir:
        """This run's directory: the one the config names, or with ckpt_path=auto the earlier run of the same
        name and config (its newest valid checkpoint becomes cfg.ckpt_path). Rank 0 locks it (a live run there
        is one error), and removes the half-written checkpoints a killed process left; cfg.paths.output_dir
        names it from here on."""
        from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415 - rank set by ranks.set_global_rank

        from lab.runtime.rundir import autoresume  # noqa: PLC0415 - reads checkpoints (torch): only when a run starts

        signals.reset()  # a stop requested during an earlier job of this process is not this run's
        owner = rank_zero_only.rank == 0
        auto = cfg.get("ckpt_path") == autoresume.AUTO
        run = cls(autoresume.claim_run_dir(cfg, is_rank_zero=owner), owner)
        if auto and owner:
            run.record_launch(cfg.ckpt_path)
        return run

    def record_launch(self, ckpt: str | None) -> None:
        """With ckpt_path=auto the run's directory (maybe an earlier run's) and checkpoint are known only once
        claimed: status.json there says this process runs it, resumed from the checkpoint's step. A sweep job's
        record, written by this process before (lab.runtime.sweeps.jobs), stays as it is."""
        current = self.read_status() or {}
        if current.get("state") == "running" and current.get("pid") == os.getpid():
            return
        resumed = {}
        if ckpt is not None:
            from lab.checkpoints.reading import read_checkpoint  # noqa: PLC0415 - torch: only when a run resumes

            resumed["resumed_from"] = int(read_checkpoint(ckpt, metadata_only=True).get("global_step", 0))
        self.write_status(**launch_fields(), **resumed)

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Let go of the lock (the next job of a sweep locks its own directory)."""
        lock.release_run_dirs()

    def drop_lock_file(self) -> None:
        """A completed run is never run again: its released lock file goes too."""
        (self.path / lock.LOCK_NAME).unlink(missing_ok=True)

    # ---- its files ---------------------------------------------------------------------------------------
    def save_config(self, resolved: dict[str, Any]) -> None:
        if self.owner:
            journal.before_write(self.path / "config.yaml")
            self.path.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(resolved, self.path / "config.yaml")

    def save_data_report(self, report: dict[str, Any]) -> None:
        """What the datamodule read, dropped, truncated (lab.data.sources.reading.DataReport)."""
        if self.owner:
            journal.before_write(self.path / "data_report.json")
            (self.path / "data_report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))

    def read_status(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.path / STATUS_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:  # cannot happen with write_status's atomic replace; say so if it does
            log.warning("%s/%s is unreadable (%s): treated as a job that never ran", self.path, STATUS_FILE, e)
            return None

    def write_status(self, **fields: Any) -> dict[str, Any]:
        """Update status.json atomically (write a temporary file, then rename over the old one); a new `state`
        is also appended to its history."""
        journal.before_write(self.path / STATUS_FILE)
        self.path.mkdir(parents=True, exist_ok=True)
        before = self.read_status() or {}
        status = {**before, **fields, "updated": now()}
        if "state" in fields:
            status[history.KEY] = [*(before.get(history.KEY) or []), history.entry(before, status, self.path)]
        tmp = self.path / f".{STATUS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(status, indent=1, default=str))
        os.replace(tmp, self.path / STATUS_FILE)
        return status

    @classmethod
    def record_final_metrics(cls, metrics: dict[str, float]) -> None:
        cls.final_metrics.clear()
        cls.final_metrics.update(metrics)

    def pin_wandb_run(self, cfg: DictConfig) -> None:
        """Every launch of one run logs to one W&B run: its id is kept in the run directory (resume="allow"). An
        id already in the config wins and is written there, so status.json, the file and W&B name the same run."""
        wandb_cfg = (cfg.get("logger") or {}).get("wandb")
        if not self.owner or not wandb_cfg or wandb_cfg.get("mode") == "disabled":
            return
        id_file = self.path / WANDB_ID_FILE
        journal.before_write(id_file)
        if wandb_cfg.get("id"):  # given (a sweep job's id, kept in its status.json, or the user's): that one is the run's
            id_file.write_text(f"{wandb_cfg.id}\n")
        elif not id_file.exists():
            id_file.write_text(secrets.token_hex(4) + "\n")  # W&B ids are short [a-z0-9] strings
        with open_dict(cfg):
            wandb_cfg.id = id_file.read_text().strip()
            wandb_cfg.resume = "allow"

    def wandb_last_step(self, run_id: str) -> int:
        """The last step W&B run `run_id` logged in an earlier attempt of this run, or -1."""
        record = self.path / LAST_STEP_FILE
        if record.is_file():
            logged_id, _, step = record.read_text().partition(" ")
            if logged_id == run_id and step.strip().isdigit():
                return int(step)
        return -1

    def record_wandb_last_step(self, run_id: str, step: int) -> None:
        journal.before_write(self.path / LAST_STEP_FILE)
        (self.path / LAST_STEP_FILE).write_text(f"{run_id} {step}\n")
