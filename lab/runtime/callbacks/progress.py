"""The training progress bar: step of max_steps, tokens/s, loss and the ETA of the whole run, with log lines
printed above it. `callbacks.progress=null` turns it off (and Lightning's default bar with it)."""
from __future__ import annotations

import logging
import sys
import time

from lightning.pytorch.callbacks.progress import ProgressBar

log = logging.getLogger("lab")


def _si(value: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


class Progress(ProgressBar):
    """One bar for the whole run (rank 0): `step 1200/2000`, train/loss, tokens/s (perf/tokens_per_s_global,
    from the Throughput callback), elapsed and remaining time over max_steps (so the ETA counts validations
    too); a second, passing bar while validating or testing. Log lines go above the bar (the console log
    handlers are pointed at rich's redirected streams while it is shown).

    refresh_rate: redraw every N optimizer steps (redrawing every step costs ~3% of a small CPU step).
    Not a terminal (a batch job's log file): no bar; one `progress` log line every `log_every_percent` % of
    max_steps instead.

    The end-of-run test pass scores every held-out token once, so it costs what the test split holds, not what
    the run trained: it says so in a line before (its batches, how to skip or defer it), shows its ETA (the bar, or
    a `test progress` line every `log_every_percent` % of its batches), and logs after it the token
    positions it put through the model (an LM's overlapping windows: more than the split's tokens) and its time."""

    def __init__(self, refresh_rate: int = 10, log_every_percent: int = 10):
        super().__init__()
        self.refresh_rate, self.log_every_percent = max(1, refresh_rate), log_every_percent
        self._enabled = True
        self._progress = None  # rich.progress.Progress while shown
        self._train = self._eval = None
        self._streams: list = []  # (handler, original stream) pointed at rich's redirected streams
        self._t0 = 0.0
        self._step0 = 0
        self._next_log = 0
        self._test_t0, self._test_tokens, self._test_next = 0.0, 0, 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _shown(self, trainer) -> bool:
        return self._enabled and trainer.is_global_zero

    def _total(self, trainer) -> int:
        return trainer.max_steps if trainer.max_steps > 0 else int(trainer.estimated_stepping_batches)

    def _log_interval(self, trainer) -> int:
        return max(1, self._total(trainer) * self.log_every_percent // 100)

    def _fields(self, trainer) -> str:
        metrics = trainer.callback_metrics
        parts = []
        if "train/loss" in metrics:
            parts.append(f"loss {float(metrics['train/loss']):.4f}")
        if "perf/tokens_per_s_global" in metrics:
            parts.append(f"{_si(float(metrics['perf/tokens_per_s_global']))} tok/s")
        return " · ".join(parts)

    # ---- the bar ----------------------------------------------------------------------------------------------
    def _start(self, trainer) -> None:
        import rich.progress as rp  # noqa: PLC0415

        self._progress = rp.Progress(
            rp.TextColumn("[bold]{task.description}"), rp.BarColumn(bar_width=30),
            rp.TextColumn("{task.completed}/{task.total}"), rp.TextColumn("{task.fields[info]}"),
            rp.TimeElapsedColumn(), rp.TextColumn("ETA"), rp.TimeRemainingColumn(),
            redirect_stdout=True, redirect_stderr=True,
        )
        self._progress.start()
        self._redirect_log_handlers()

    def _stop(self) -> None:
        if self._progress is not None:
            self._restore_log_handlers()
            self._progress.stop()
            self._progress, self._train, self._eval = None, None, None

    def _redirect_log_handlers(self) -> None:
        """Console log handlers hold the original stdout/stderr; while the bar shows they write to rich's
        redirected streams, so each log line is printed above the bar instead of through it."""
        originals = {id(sys.__stdout__): "stdout", id(sys.__stderr__): "stderr"}
        for handler in logging.getLogger().handlers:
            name = originals.get(id(getattr(handler, "stream", None)))
            if name and not isinstance(handler, logging.FileHandler):
                self._streams.append((handler, handler.stream))
                handler.setStream(getattr(sys, name))

    def _restore_log_handlers(self) -> None:
        for handler, stream in self._streams:
            handler.setStream(stream)
        self._streams = []

    # ---- training ---------------------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        if not self._shown(trainer):
            return
        self._t0, self._step0 = time.perf_counter(), trainer.global_step
        self._next_log = trainer.global_step + self._log_interval(trainer)
        if sys.stdout.isatty():
            self._start(trainer)
            self._train = self._progress.add_task("step", total=self._total(trainer), completed=trainer.global_step, info="")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._shown(trainer):
            return
        step, total = trainer.global_step, self._total(trainer)
        if self._train is not None and (step % self.refresh_rate == 0 or step >= total):
            self._progress.update(self._train, completed=step, info=self._fields(trainer))
        elif self._progress is None and self.log_every_percent and step >= self._next_log:
            self._next_log = step + self._log_interval(trainer)
            rate = (step - self._step0) / max(time.perf_counter() - self._t0, 1e-9)
            eta = (total - step) / rate if rate > 0 else float("nan")
            log.info("progress: step %d/%d · %s · ETA %s", step, total, self._fields(trainer) or "-",
                     time.strftime("%H:%M:%S", time.gmtime(eta)) if eta == eta else "?")

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._stop()

    # ---- validation and test: a passing bar under the training one ----------------------------------------------
    def _eval_start(self, trainer, description: str, total) -> None:
        if not self._shown(trainer) or not sys.stdout.isatty():
            return
        if self._progress is None:
            self._start(trainer)
        total = int(sum(total)) if isinstance(total, list) else total
        self._eval = self._progress.add_task(description, total=total if total != float("inf") else None, info="")

    def _eval_advance(self) -> None:
        if self._eval is not None:
            self._progress.advance(self._eval)

    def _eval_end(self) -> None:
        if self._eval is not None:
            self._progress.remove_task(self._eval)
            self._eval = None
        if self._train is None:
            self._stop()

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._eval_start(trainer, "validate", trainer.num_val_batches)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._eval_advance()

    def on_validation_end(self, trainer, pl_module) -> None:
        self._eval_end()

    def _test_total(self, trainer) -> int | None:
        total = trainer.num_test_batches
        total = int(sum(total)) if isinstance(total, list) else total
        return None if total == float("inf") else int(total)

    def on_test_start(self, trainer, pl_module) -> None:
        self._test_t0, self._test_tokens, self._test_next = time.perf_counter(), 0, 0
        if self._shown(trainer):
            total = self._test_total(trainer)
            log.info("test: scoring the test split, %s batches per device (test=false skips it; python -m lab.eval ckpt_path=<run> "
                     "runs it later)", "?" if total is None else total)
        self._eval_start(trainer, "test", trainer.num_test_batches)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._test_tokens += pl_module.count_tokens(batch)
        self._eval_advance()
        if not self._shown(trainer) or self._progress is not None or not self.log_every_percent:
            return
        done, total = batch_idx + 1, self._test_total(trainer)
        if not total or done >= total or done < self._test_next:
            return
        self._test_next = done + max(1, total * self.log_every_percent // 100)
        eta = (total - done) * (time.perf_counter() - self._test_t0) / done
        log.info("test progress: batch %d/%d · ETA %s", done, total, time.strftime("%H:%M:%S", time.gmtime(eta)))

    def on_test_end(self, trainer, pl_module) -> None:
        self._eval_end()
        if self._shown(trainer):
            tokens = self._test_tokens * trainer.world_size  # this device's count x world size, as perf/tokens_seen
            log.info("test: %s token positions through the model in %.1f s (an LM's test windows overlap: about "
                     "block_size / data.eval_stride positions per test token, each token scored once)", _si(tokens),
                     time.perf_counter() - self._test_t0)


def progress_bar_setting(trainer_cfg, callbacks: list) -> dict:
    """Trainer kwargs for the bar: `callbacks.progress=null` must mean no bar, but a Trainer without a
    ProgressBar callback adds Lightning's default one unless enable_progress_bar=False."""
    if "enable_progress_bar" in trainer_cfg:
        return {}
    return {"enable_progress_bar": any(isinstance(c, ProgressBar) for c in callbacks)}
