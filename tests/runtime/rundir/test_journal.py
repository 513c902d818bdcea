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
    (tmp_path / "runs").mkdir()
    journal.note_missing(fresh)
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


def test_a_root_this_launch_made_is_removed_and_an_empty_one_that_was_there_is_kept(tmp_path):
    """The runs (or cache) root: made by the refused launch (missing when Hydra was about to make the run
    directory), it goes; the user's own empty root, dated as if made just now (the run directory made in it
    changed its time), stays. Catches: a root removed because it is empty, or kept because it is a root."""
    made = tmp_path / "new_root" / "gpt" / "2026-01-01"
    journal.note_missing(made)
    made.mkdir(parents=True)
    journal.begin(made)
    RunDir(made).write_status(state="failed")
    assert journal.undo() is True and sorted(p.name for p in tmp_path.iterdir()) == []

    users = tmp_path / "users_root"
    users.mkdir()
    run = users / "gpt" / "2026-01-01"
    journal.note_missing(run)
    run.mkdir(parents=True)
    journal.begin(run)
    assert journal.undo() is True and users.is_dir() and list(users.iterdir()) == []


def test_a_refused_train_or_prepare_removes_the_roots_it_made(tmp_path):
    """As a user runs it: lab.train with LAB_RUNS_DIR a folder that does not exist yet, refused by its config,
    leaves no runs folder; lab.prepare refused the same way with a new LAB_CACHE_DIR (its log folder lies
    under it) leaves no cache folder; a runs folder that was there stays. Catches: Hydra's run_job not hooked."""
    args = [*TINY_LM, "data.batch_size=0"]
    refused = run_module("lab.train", args, tmp_path / "new_runs")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith("error: data.batch_size=0")
    refused = run_module("lab.prepare", args, tmp_path / "runs", env={"LAB_CACHE_DIR": str(tmp_path / "new_cache")})
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith("error: data.batch_size=0")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "runs").mkdir()
    assert run_module("lab.train", args, tmp_path / "runs").returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and list((tmp_path / "runs").iterdir()) == []


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
    training starts) leaves no run directory, and one in the finished run's own directory leaves it as it was.
    Catches: undo not called by user_errors_exit; the CSV logger's hparams.yaml rewritten unrecorded."""
    run = tmp_path / "lm"
    train([*TINY_LM, "trainer.max_steps=2", "trainer.val_check_interval=2", "test=false", f"hydra.run.dir={run}"], tmp_path)
    before, modified = snapshot(run), run.stat().st_mtime_ns
    other = run_module("lab.train", ["+experiment=encoder_mlm", f"hydra.run.dir={run}", "ckpt_path=auto",
                                     "logger.wandb.mode=disabled"], tmp_path)
    assert other.returncode == 2, other.stderr[-2000:]
    line = other.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: checkpoint {run}/checkpoints/") and "holds another task (LanguageModelTask; this run: MLMTask)" in line
    one_short_line(line)  # it named all 10 differing settings, 1,497 characters; they are in the log line before it
    assert "model.n_layers 4 -> 1" in other.stdout + other.stderr and "model.n_layers" not in line
    assert snapshot(run) == before and run.stat().st_mtime_ns == modified  # the lock file came and went
    assert OmegaConf.load(run / ".hydra" / "overrides.yaml")[0] == TINY_LM[0]

    # refused later, in Lightning's setup (init_from is read when training starts): the CSV logger had rewritten
    # the run's csv/hparams.yaml with this launch's config
    (tmp_path / "not_a_model.safetensors").write_bytes(b"junk")
    in_setup = run_module("lab.train", [*TINY_LM, "trainer.max_steps=4", "trainer.val_check_interval=2", "test=false",
                                        f"hydra.run.dir={run}", "ckpt_path=auto",
                                        f"model.init_from={tmp_path / 'not_a_model.safetensors'}"], tmp_path)
    assert in_setup.returncode == 2 and "not_a_model.safetensors" in in_setup.stderr.strip().splitlines()[-1]
    assert snapshot(run) == before and run.stat().st_mtime_ns == modified

    refused = run_module("lab.train", [*TINY_LM, f"model.init_from={tmp_path / 'not_a_model.safetensors'}"], tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "not_a_model.safetensors" in refused.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm", "not_a_model.safetensors"], "a refused run left its directory"


def links(folder: Path) -> dict[str, str]:
    return {p.name: os.readlink(p) for p in folder.iterdir() if p.is_symlink()}


def test_a_refused_launch_takes_back_what_wandb_wrote_in_another_runs_directory(tmp_path, monkeypatch):
    """W&B starts when Lightning sets the loggers up, before a refusal in fit's setup can come; in another run's
    directory its new run folder goes and latest-run / debug*.log point back at the earlier run's files (real W&B,
    offline: online writes the same folder). Catches: an undo that restores only the files lab itself recorded."""
    import wandb

    monkeypatch.setenv("WANDB_SILENT", "true")
    theirs = an_earlier_run(tmp_path / "theirs")
    old = theirs / "wandb" / "offline-run-20260101_000000-theirs01"
    (old / "logs").mkdir(parents=True)
    (old / "run-theirs01.wandb").write_bytes(b"their W&B record")
    for name in ("debug.log", "debug-internal.log"):
        (old / "logs" / name).write_text("their W&B log\n")
        (theirs / "wandb" / name).symlink_to(old.relative_to(theirs / "wandb") / "logs" / name)
    (theirs / "wandb" / "latest-run").symlink_to(old.name)
    before, before_links = snapshot(theirs), links(theirs / "wandb")

    journal.begin(theirs)
    run = wandb.init(dir=str(theirs), mode="offline", id="theirs01", resume="allow", project="lab")
    run.finish(exit_code=1)  # lab's fit ends its loggers (finish_loggers) before the refusal reaches undo
    assert len(list((theirs / "wandb").glob("offline-run-*"))) == 2 and links(theirs / "wandb") != before_links
    assert journal.undo() is True
    assert snapshot(theirs) == before and links(theirs / "wandb") == before_links

    journal.begin(theirs := an_earlier_run(tmp_path / "no_wandb_yet"))  # no wandb/ before: it goes whole
    wandb.init(dir=str(theirs), mode="offline", project="lab").finish(exit_code=1)
    assert journal.undo() is True and not (theirs / "wandb").exists()


def test_take_back_cache_entries_removes_what_this_launch_published_and_nothing_else(tmp_path):
    """lab.prepare's output is cache entries: refused, those it published go with the folders made for them; an
    entry that was there before, or that another process published first, stays. Catches: undo that leaves them."""
    from lab.data.cache import publish_dir, write_once

    cache = tmp_path / "cache"
    earlier = cache / "lm" / "earlier"
    earlier.mkdir(parents=True)
    write_once(cache / "classification" / "theirs" / "split.json", "theirs")
    log_dir = cache / "prepare-logs" / "now"
    journal.note_missing(log_dir)  # as Hydra's run_job is hooked to
    log_dir.mkdir(parents=True)
    journal.begin(log_dir)
    journal.take_back_cache_entries(cache)
    build = cache / "lm" / ".build"
    build.mkdir()
    (build / "manifest.json").write_text("{}")
    assert publish_dir(build, cache / "lm" / "mine", "manifest.json")
    write_once(cache / "sources" / "pkg" / "tokenizer.json", "mine")
    assert write_once(cache / "classification" / "theirs" / "split.json", "mine") == "theirs"  # theirs won: not mine
    assert journal.undo() is True
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == [
        "classification", "classification/theirs", "classification/theirs/split.json", "lm", "lm/earlier"]
