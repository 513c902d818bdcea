"""Checkpoints that bound lost work: when last.ckpt is written, atomic writes, full disks, stop signals."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import ROOT, TINY_LM, metric_by_step, read_metrics, run_module
from lightning.pytorch.demos.boring_classes import BoringModel

from lab.checkpoints import atomic as checkpoint_io
from lab.errors import LabError
from lab.runtime.callbacks import RunCheckpoint
from lab.runtime.rundir import signals


class ValMetric(BoringModel):
    """Logs val/m = the given sequence, one value per validation (so the metric can get worse)."""

    def __init__(self, values):
        super().__init__()
        self.values, self.n_val = values, 0

    def validation_step(self, batch, batch_idx):
        return super().validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        self.log("val/m", float(self.values[min(self.n_val, len(self.values) - 1)]))
        self.n_val += 1


class Recording(RunCheckpoint):
    """RunCheckpoint that remembers the step of every last.ckpt write."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last_writes: list[int] = []

    def _save_last_checkpoint(self, trainer, monitor_candidates):
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.last_writes.append(trainer.global_step)


def fit(tmp_path, values=(1.0,), max_steps=20, val_every=5, accumulate=1, extra_callbacks=(), **ckpt_kwargs):
    ckpt = Recording(dirpath=str(tmp_path / "ckpt"), filename="best-step{step}", monitor="val/m", mode="min", **ckpt_kwargs)
    trainer = L.Trainer(max_steps=max_steps, val_check_interval=val_every * accumulate, check_val_every_n_epoch=None,
                        limit_val_batches=1, accumulate_grad_batches=accumulate, callbacks=[ckpt, *extra_callbacks],
                        logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(ValMetric(values))
    return ckpt, trainer


def step_of(path: Path) -> int:
    return torch.load(path, weights_only=False)["global_step"]


def test_last_is_the_final_step_when_the_metric_gets_worse(tmp_path):
    """val/m rises after the first validation: best stays at step 5; last.ckpt follows every validation and
    ends at step 20 (Lightning's own save_last left it at step 5)."""
    ckpt, _ = fit(tmp_path, values=[1.0, 2.0, 3.0, 4.0])
    assert [p.name for p in sorted((tmp_path / "ckpt").glob("best-*.ckpt"))] == ["best-step5.ckpt"]
    assert step_of(tmp_path / "ckpt" / "last.ckpt") == 20
    assert ckpt.last_writes == [5, 10, 15, 20]


@pytest.mark.parametrize("accumulate", [1, 2], ids=["no-accumulation", "accumulate-2"])
def test_last_every_n_optimizer_steps_besides_validation(tmp_path, accumulate):
    """every_n_steps=3 counts optimizer steps; a step that validates writes once, after validation."""
    ckpt, _ = fit(tmp_path, values=[3.0, 2.0], max_steps=20, val_every=10, accumulate=accumulate, every_n_steps=3, every_minutes=None)
    assert ckpt.last_writes == [3, 6, 9, 10, 12, 15, 18, 20]
    assert step_of(tmp_path / "ckpt" / "last.ckpt") == 20
    assert [p.name for p in (tmp_path / "ckpt").glob("best-*.ckpt")] == ["best-step20.ckpt"]


def test_last_every_m_minutes(tmp_path, monkeypatch):
    """A clock where each optimizer step takes 25 s: with every_minutes=1 last.ckpt is written as soon as
    60 s have passed since the previous write (steps 3, 6, ...; validations at 10 and 20 reset the clock)."""
    import lab.runtime.callbacks.checkpointing as module

    steps = {"n": 0}

    class Clock:
        @staticmethod
        def monotonic():
            return 25.0 * steps["n"]

    class Step(L.Callback):
        def on_train_batch_start(self, trainer, *args):
            steps["n"] = trainer.global_step + 1  # the step being taken

    monkeypatch.setattr(module, "time", Clock)
    ckpt, _ = fit(tmp_path, values=[1.0], max_steps=20, val_every=10, every_minutes=1, extra_callbacks=[Step()])
    assert ckpt.last_writes == [3, 6, 9, 10, 13, 16, 19, 20]


def test_stop_request_writes_the_current_step_and_stops(tmp_path):
    class Signal(L.Callback):
        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == 7:
                signals.request_stop(signal.SIGTERM)

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    signals.reset()
    try:
        with pytest.raises(SIGTERMException):
            fit(tmp_path, max_steps=20, val_every=5, every_minutes=None, extra_callbacks=[Signal()])
    finally:
        signals.reset()
    assert step_of(tmp_path / "ckpt" / "last.ckpt") == 8  # the step in flight when the signal came, completed


def test_second_ctrl_c_interrupts_at_once():
    previous = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    signals.reset()
    try:
        signals.install()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert signals.received() == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    finally:
        signals.reset()
        for s, h in previous.items():
            signal.signal(s, h)


# --- atomic writes and full disks -----------------------------------------------------------------------------
def test_atomic_write_leaves_the_previous_file_whole_on_a_full_disk(tmp_path, monkeypatch):
    io = checkpoint_io.AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.arange(10.0)}}, path)

    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(checkpoint_io, "open", lambda p, mode="r": FullDisk(real_open(p, mode)), raising=False)
    with pytest.raises(LabError, match=rf"disk full: cannot write a checkpoint into {tmp_path} .*needs about \d+ MiB"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(1000)}}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"], "a temporary file was left behind"
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.arange(10.0))


FULL_DISK_AFTER = """
import errno, runpy, sys
import lab.checkpoints.atomic as c
limit, real_open, calls = int(sys.argv[1]), open, {"n": 0}
class FullDisk:  # writes half of what it is given, then the disk is full
    def __init__(self, f): self.f = f
    def write(self, data):
        self.f.write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")
    def __getattr__(self, name): return getattr(self.f, name)
    def __enter__(self): return self
    def __exit__(self, *exc): self.f.close()
def failing_open(path, mode="r"):
    if ".ckpt.tmp" in str(path):  # a checkpoint being written
        calls["n"] += 1
        if calls["n"] > limit:
            return FullDisk(real_open(path, mode))
    return real_open(path, mode)
c.open = failing_open
sys.argv = ["lab.train", *sys.argv[2:]]
runpy.run_module("lab.train", run_name="__main__")
"""


def _checkpoint_every_3_steps(tmp_path):
    """A 12-step LM run in tmp_path/run with a periodic last.ckpt every 3 steps: (run dir, lab.train args, env)."""
    run = tmp_path / "run"
    args = [*TINY_LM, "trainer.max_steps=12", "trainer.val_check_interval=12", "callbacks.checkpoint.every_n_steps=3",
            f"hydra.run.dir={run}", "ckpt_path=auto"]
    return run, args, {**os.environ, "LAB_RUNS_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


def test_full_disk_ends_the_run_with_one_line_and_earlier_checkpoints_resume(tmp_path):
    """The 3rd checkpoint write meets ENOSPC: one `error:` line naming the directory and the space needed, exit
    2; the checkpoints already written load, and ckpt_path=auto continues from the newest of them."""
    run, args, env = _checkpoint_every_3_steps(tmp_path)
    result = subprocess.run([sys.executable, "-c", FULL_DISK_AFTER, "2", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(errors) == 1 and f"into {run}/checkpoints" in errors[0] and "MiB" in errors[0], errors
    assert "Traceback" not in result.stderr
    assert step_of(run / "checkpoints" / "last.ckpt") == 6  # steps 3 and 6 written, step 9 refused
    assert not list((run / "checkpoints").glob(".*.tmp*"))
    resumed = run_module("lab.train", args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert step_of(run / "checkpoints" / "last.ckpt") == 12
    assert sorted(metric_by_step(read_metrics(run), "train/loss")) == list(range(12))


class LoggedLoss(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train/loss", out["loss"])
        return out


def test_a_checkpoint_is_published_after_the_metrics_rows_of_its_steps_are_fsynced(tmp_path, monkeypatch):
    """When last.ckpt of step s is published (every 3 steps; validations at 10, 20), metrics.csv on disk holds
    the train rows of steps 0..s-1 (optimizer steps 1..s), fsynced before the checkpoint's own fsync; the rows
    are those of the same run without periodic checkpoints: same values, each step once."""
    from lab.runtime.trainer.metrics_csv import RunCSVLogger

    events = []  # file names fsynced, and ("published", step)
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name), real_fsync(fd)))

    class Watching(RunCheckpoint):
        def _save_last_checkpoint(self, trainer, monitor_candidates):
            super()._save_last_checkpoint(trainer, monitor_candidates)
            events.append(("published", trainer.global_step, sorted(metric_by_step(read_metrics(self.run), "train/loss"))))

    def rows(run: Path, every_n_steps: int | None) -> list[dict[str, str]]:
        L.seed_everything(0)
        ckpt = Watching(dirpath=str(run / "ckpt"), filename="best", monitor=None, every_n_steps=every_n_steps, every_minutes=None)
        ckpt.run = run
        trainer = L.Trainer(max_steps=20, val_check_interval=10, check_val_every_n_epoch=None, limit_val_batches=1,
                            log_every_n_steps=1, callbacks=[ckpt], logger=RunCSVLogger(str(run)),
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
        trainer.fit(LoggedLoss())
        return read_metrics(run)

    plain = rows(tmp_path / "plain", None)
    events.clear()
    periodic = rows(tmp_path / "periodic", 3)
    published = [e for e in events if isinstance(e, tuple)]
    assert [(step, on_disk) for _, step, on_disk in published] == [(s, list(range(s))) for s in (3, 6, 9, 10, 12, 15, 18, 20)]
    for before, upto in zip([-1, *map(events.index, published)], map(events.index, published)):
        fsynced = events[before + 1:upto]
        assert "metrics.csv" in fsynced and fsynced.index("metrics.csv") < fsynced.index(f".last.ckpt.tmp-{os.getpid()}"), fsynced
    assert periodic == plain
    assert [int(r["step"]) for r in periodic if r.get("train/loss")] == list(range(20))


KILLED_AFTER_PUBLISHING = """
import os, runpy, signal, sys
from lab.runtime.callbacks import RunCheckpoint
kill_at, save_last = int(sys.argv[1]), RunCheckpoint._save_last_checkpoint
def save_then_die(self, trainer, candidates):
    save_last(self, trainer, candidates)
    if trainer.global_step == kill_at:  # last.ckpt of this step is published: nothing after it runs
        os.kill(os.getpid(), signal.SIGKILL)
RunCheckpoint._save_last_checkpoint = save_then_die
sys.argv = ["lab.train", *sys.argv[2:]]
runpy.run_module("lab.train", run_name="__main__")
"""


@pytest.mark.slow  # two training runs (lab.train in subprocesses)
def test_a_kill_right_after_a_periodic_checkpoint_leaves_the_metrics_it_covers_on_disk(tmp_path):
    """SIGKILL the moment last.ckpt of step 6 (every_n_steps=3, between validations) is published: it covers
    optimizer steps 1..6, whose metrics rows are steps 0..5, so all six rows are already in metrics.csv; the
    resumed run adds steps 6..11, each step once and none missing."""
    run, args, env = _checkpoint_every_3_steps(tmp_path)
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_PUBLISHING, "6", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert step_of(run / "checkpoints" / "last.ckpt") == 6
    assert sorted(metric_by_step(read_metrics(run), "train/loss")) == list(range(6))
    resumed = run_module("lab.train", args, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert step_of(run / "checkpoints" / "last.ckpt") == 12
    assert [int(r["step"]) for r in read_metrics(run) if r.get("train/loss")] == list(range(12))
