"""A refused command leaves every run directory as it found it (lab.runtime.rundir.journal), on real directories:
another run's directory keeps its files byte for byte, a directory this launch made is removed."""
from __future__ import annotations

import os
from pathlib import Path

from conftest import TINY_LM, one_short_line, run_module, train
from omegaconf import OmegaConf

from lab.runtime.rundir import journal, lock
from lab.runtime.rundir.run_dir import RunDir


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and directory under root: its bytes (files), mode and modification time."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.stat()
        out[str(p.relative_to(root))] = (p.read_bytes() if p.is_file() else None, st.st_mode, st.st_mtime_ns)
    return out


def an_earlier_run(path: Path) -> Path:
    """A finished run's files, as lab writes them, dated before this process started."""
    run = RunDir(path)
    run.save_config({"name": "theirs", "task": {"_target_": "theirs"}})
    run.write_status(state="completed", value=1.5)
    (path / ".hydra").mkdir()
    (path / ".hydra" / "overrides.yaml").write_text("- +experiment=theirs\n")
    (path / "train.log").write_text("their log\n")
    for p in [*path.rglob("*"), path]:
        os.utime(p, ns=(journal.STARTED_NS - 10**10, journal.STARTED_NS - 10**10))
    return path


def test_a_refused_launch_leaves_another_runs_directory_byte_for_byte(tmp_path):
    """Everything this launch writes into an earlier run's directory before training (Hydra's .hydra files, the
    lock, status.json, config.yaml, data_report.json, log lines) is put back by undo; a file it created goes.
    Catches: a write_status that skips journal.before_write (status.json left `failed`)."""
    theirs = an_earlier_run(tmp_path / "theirs")
    before = snapshot(theirs)
    journal.begin(theirs)
    lock.lock_run_dir(theirs)
    run = RunDir(theirs)
    run.write_status(state="running")
    run.save_config({"name": "mine"})
    run.save_data_report({"mine": 1})
    journal.before_write(theirs / ".hydra" / "overrides.yaml")
    (theirs / ".hydra" / "overrides.yaml").write_text("- +experiment=mine\n")
    journal.before_append(theirs / "train.log")
    with open(theirs / "train.log", "a") as f:
        f.write("my refused launch\n")
    run.write_status(state="failed", error="refused")
    assert journal.undo() is True
    assert snapshot(theirs) == before


def test_a_directory_this_launch_made_is_removed_and_one_it_found_empty_is_kept(tmp_path):
    """made here (empty, modified after the process started): removed whole with its <name>/ parent; an empty
    directory that was there before the launch stays. Catches: rmtree of any empty directory entered."""
    fresh = tmp_path / "runs" / "gpt" / "2026-01-01"
    fresh.mkdir(parents=True)
    journal.begin(fresh)
    RunDir(fresh).write_status(state="failed")
    (fresh / "train.log").write_text("x")
    assert journal.undo() is True
    assert not (tmp_path / "runs" / "gpt").exists() and (tmp_path / "runs").is_dir()

    users = tmp_path / "users_empty_dir"
    users.mkdir()
    os.utime(users, ns=(journal.STARTED_NS - 10**10,) * 2)
    journal.begin(users)
    RunDir(users).write_status(state="failed")
    assert journal.undo() is True
    assert users.is_dir() and list(users.iterdir()) == []


def test_after_keep_a_failure_is_the_runs_own(tmp_path):
    """Once training has started (keep), nothing is undone: the run's status.json records its failure."""
    run_dir = an_earlier_run(tmp_path / "run")
    journal.begin(run_dir)
    journal.keep()
    RunDir(run_dir).write_status(state="failed")
    assert journal.undo() is False
    assert RunDir(run_dir).read_status()["state"] == "failed"


def test_train_refused_in_another_tasks_finished_run_rewrites_nothing(tmp_path):
    """The issue's data loss: `lab.train <another task> hydra.run.dir=<a completed LM run> ckpt_path=auto` is
    refused in one line and the run keeps status.json (completed), config.yaml, .hydra/overrides.yaml, train.log
    exactly, with no lock file left; a refusal during setup (model.init_from not a model directory, found when
    training starts) leaves no run directory. Catches: undo not called by user_errors_exit."""
    run = tmp_path / "lm"
    train([*TINY_LM, "trainer.max_steps=2", "trainer.val_check_interval=2", "test=false", f"hydra.run.dir={run}"], tmp_path)
    before = snapshot(run)
    other = run_module("lab.train", ["+experiment=encoder_mlm", f"hydra.run.dir={run}", "ckpt_path=auto",
                                     "logger.wandb.mode=disabled"], tmp_path)
    assert other.returncode == 2, other.stderr[-2000:]
    line = other.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: checkpoint {run}/checkpoints/") and "holds another task (LanguageModelTask; this run: MLMTask)" in line
    one_short_line(line)  # it named all 10 differing settings, 1,497 characters; they are in the log line before it
    assert "model.n_layers 4 -> 1" in other.stdout + other.stderr and "model.n_layers" not in line
    assert snapshot(run) == before
    assert OmegaConf.load(run / ".hydra" / "overrides.yaml")[0] == TINY_LM[0]

    (tmp_path / "not_a_model.safetensors").write_bytes(b"junk")
    refused = run_module("lab.train", [*TINY_LM, f"model.init_from={tmp_path / 'not_a_model.safetensors'}"], tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "not_a_model.safetensors" in refused.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm", "not_a_model.safetensors"], "a refused run left its directory"
