"""Checkpointing that bounds the work a crash or a preemption can cost.

`last.ckpt` always holds the newest step written: after every validation (whether or not the metric
improved), every `every_n_steps` optimizer steps and/or `every_minutes` minutes (independent of validation),
at the end of training, and when a stop signal arrives (lab.runtime.rundir.signals). `best-*.ckpt` holds the best
`monitor` value (top-k). Every file is written atomically (lab.checkpoints.atomic).

Lightning's ModelCheckpoint rewrites last.ckpt only when a top-k file is saved, so after the metric stops
improving last.ckpt goes stale; here the saving decisions are ours and the file handling is Lightning's.
"""
from __future__ import annotations

import logging
import signal
import time
from typing import Protocol, runtime_checkable

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lab.checkpoints.atomic import AtomicCheckpointIO
from lab.runtime.rundir import signals

log = logging.getLogger("lab")


@runtime_checkable
class DurableLogger(Protocol):
    """A logger that can fsync what it logged (lab.runtime.trainer.metrics_csv's CSV logger): before a checkpoint
    is published, the rows it covers are on disk."""

    def save_durably(self) -> None: ...


class RunCheckpoint(ModelCheckpoint):
    """dirpath, filename, monitor, mode, save_top_k: as Lightning's ModelCheckpoint (best files).
    every_n_steps: also write last.ckpt every N optimizer steps (null: off).
    every_minutes: also write last.ckpt when this many minutes passed since the last write (null: off).
    """

    def __init__(self, dirpath: str, filename: str, monitor: str | None, mode: str = "min", save_top_k: int = 1,
                 every_n_steps: int | None = None, every_minutes: float | None = 10.0):
        super().__init__(dirpath=dirpath, filename=filename, monitor=monitor, mode=mode, save_top_k=save_top_k,
                         save_last=True, auto_insert_metric_name=False, every_n_train_steps=0, every_n_epochs=0,
                         enable_version_counter=False)
        for name, value in (("every_n_steps", every_n_steps), ("every_minutes", every_minutes)):
            if value is not None and value <= 0:
                from lab.errors import LabError  # noqa: PLC0415

                raise LabError(f"callbacks.checkpoint.{name}={value} must be > 0, or null to turn it off")
        self.every_n_steps, self.every_minutes = every_n_steps, every_minutes
        self.last_written_step = -1
        self._seen_step = -1
        self._last_write_time = time.monotonic()

    # --- wiring -------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO  # noqa: PLC0415

        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # sharded FSDP2 dirs: FSDP2Strategy.save_checkpoint
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if trainer.received_sigterm:  # arrived while Lightning's handler was in place
            signals.request_stop(signal.SIGTERM)
        signals.install()  # after Lightning registered its handlers in fit: ours decide alone
        self._seen_step = trainer.global_step
        self._last_write_time = time.monotonic()

    # --- when to write ------------------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._seen_step:  # a micro-batch of gradient accumulation: no optimizer step yet
            return
        self._seen_step = step
        stop = signals.received() is not None
        due = bool(self.every_n_steps and step % self.every_n_steps == 0) or bool(
            self.every_minutes and time.monotonic() - self._last_write_time >= 60 * self.every_minutes)
        if trainer.world_size > 1:  # every rank acts at the same step (rank clocks and signals differ)
            flags = torch.tensor([stop, due], dtype=torch.int32, device=trainer.strategy.root_device)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
            stop, due = bool(flags[0]), bool(flags[1])
        if stop:
            signals.request_stop(signal.SIGTERM)  # this rank may not have received it itself
            # Lightning finishes this step's iteration (logging, validation if due) and raises SIGTERMException
            # on every rank; on_exception then writes the checkpoint of this step
            trainer._signal_connector.received_sigterm = True
            return
        if due and step < trainer.max_steps and not self._validates_now(trainer):
            self._log_step_metrics_now(trainer)  # the checkpoint covers this step: its row goes to disk first
            self._save_last(trainer)  # at a validation step on_validation_end writes it, with the new metrics

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._skip(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        pass  # steps, time and validation decide (Lightning's epoch-end save only duplicates them)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step != self.last_written_step:
            self._save_last(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and not self._skip(trainer) and trainer.global_step != self.last_written_step:
            self._save_last(trainer)

    # --- writing ------------------------------------------------------------------------------------------
    def _skip(self, trainer) -> bool:
        from lightning.pytorch.trainer.states import TrainerFn  # noqa: PLC0415

        return bool(trainer.fast_dev_run) or trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking

    @staticmethod
    def _log_step_metrics_now(trainer) -> None:
        """Log this step's metrics row now: Lightning logs it only after every on_train_batch_end hook, so a kill
        between the checkpoint written here and the row would leave a step the checkpoint covers without its row
        (the resumed run starts after it). Lightning's own call for this step then logs nothing: the row is logged
        once, with the same values (this hook runs after every other callback's, as Lightning puts checkpoint
        callbacks last, and lab's tasks log nothing in their own on_train_batch_end)."""
        connector = trainer._logger_connector
        connector.update_train_step_metrics()

        def logged_already() -> None:
            del connector.update_train_step_metrics  # Lightning's method again from the next step on

        connector.update_train_step_metrics = logged_already

    @staticmethod
    def _validates_now(trainer) -> bool:
        """Will Lightning validate right after this batch? (Its own rule, so both agree.)"""
        loop = trainer.fit_loop
        return bool(trainer.enable_validation and loop.epoch_loop._should_check_val_fx(loop._data_fetcher))

    def _save_last(self, trainer) -> None:
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.last_written_step = trainer.global_step
        self._last_write_time = time.monotonic()

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        # metrics logged so far go to disk before the checkpoint that covers them: a resume from it finds
        # metrics.csv complete up to its step (every row of its steps is logged by now: _log_step_metrics_now)
        for logger in trainer.loggers:
            logger.save_durably() if isinstance(logger, DurableLogger) else logger.save()
        super()._save_checkpoint(trainer, filepath)
