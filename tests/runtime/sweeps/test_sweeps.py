"""Sweeps: W&B sweep files are valid and compose with Hydra; Optuna search config; (slow) a DDP grid makes
exactly its job dirs, one W&B run each, and Optuna runs, persists and resumes its study."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY_LM, run_dirs, train
from omegaconf import OmegaConf

import lab.runtime.cli.errors  # noqa: F401 - registers the resolvers the configs use (${lab.sqlite:...}, ${lab.direction:...})

SWEEPS = sorted((ROOT / "experiments").glob("*/sweep.yaml"))
# The documented W&B sweep schema (https://docs.wandb.ai/guides/sweeps/sweep-config-keys); wandb validates
# on the server, so the parts lab relies on are checked here.
METHODS = {"grid", "random", "bayes"}
DISTRIBUTIONS = {"constant", "categorical", "int_uniform", "uniform", "q_uniform", "log_uniform", "log_uniform_values",
                 "q_log_uniform", "q_log_uniform_values", "inv_log_uniform", "inv_log_uniform_values", "normal",
                 "q_normal", "log_normal", "q_log_normal", "beta", "q_beta"}


def _example_value(spec: dict):
    if "value" in spec:
        return spec["value"]
    if "values" in spec:
        return spec["values"][-1]
    return spec["max"] if "max" in spec else spec.get("mu", 0.0)


def test_there_are_sweep_files():
    assert SWEEPS


@pytest.mark.parametrize("path", SWEEPS, ids=[p.parent.name for p in SWEEPS])
def test_sweep_file_is_a_valid_wandb_sweep(path):
    sweep = yaml.safe_load(path.read_text())
    assert sweep["method"] in METHODS
    if sweep["method"] == "bayes":
        assert sweep["metric"]["goal"] in ("minimize", "maximize") and sweep["metric"]["name"]
    for name, spec in sweep["parameters"].items():
        assert {"value", "values", "distribution", "min"} & set(spec), name
        if "distribution" in spec:
            assert spec["distribution"] in DISTRIBUTIONS, name
        if "min" in spec:
            assert spec["min"] < spec["max"], name
        if sweep["method"] == "grid":
            assert "values" in spec or "value" in spec, f"grid sweeps need discrete values: {name}"
    command = sweep["command"]
    assert command[command.index("-m") + 1] == "lab.train" and "${args_no_hyphens}" in command


@pytest.mark.parametrize("path", SWEEPS, ids=[p.parent.name for p in SWEEPS])
def test_sweep_command_composes_with_hydra(path, compose):
    """Expand the command exactly as `wandb agent` does, then compose the resulting overrides."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    sweep = yaml.safe_load(path.read_text())
    params = {name: {"value": _example_value(spec)} for name, spec in sweep["parameters"].items()}
    args = create_sweep_command_args({"args": params})["args_no_hyphens"]
    command = sweep["command"]
    overrides = command[command.index("lab.train") + 1 :]
    overrides = [a for o in overrides for a in (args if o == "${args_no_hyphens}" else [o])]
    cfg = compose(overrides)
    for name, value in params.items():
        node = cfg
        for part in name.split("."):
            node = node[part]
        assert node == pytest.approx(value["value"]), name
    if sweep["method"] == "bayes":
        assert sweep["metric"]["name"] == cfg.optimized_metric


def test_optuna_search_is_seeded_tpe_persisted_in_sqlite(compose, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path))  # resolving the storage URL creates its directory
    cfg = compose(["+experiment=gpt_nano_char", "+hparams_search=optuna"])
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and cfg.hydra.mode.name == "MULTIRUN"
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and sweeper.sampler.seed == cfg.seed
    assert sweeper.direction == "minimize"
    assert sweeper.storage == f"sqlite:///{tmp_path.resolve()}/gpt_nano_char/optuna.db"
    for key in sweeper.params:  # every searched key exists in the composed config
        assert OmegaConf.select(cfg, key) is not None, key


def test_optuna_direction_follows_optimized_mode(compose):
    cfg = compose(["+experiment=gpt_nano_char", "+hparams_search=optuna", "optimized_metric=val/acc", "optimized_mode=max"])
    assert cfg.hydra.sweeper.direction == "maximize"


# ---- real sweeps (slow) -----------------------------------------------------------------------------

SWEEP_ARGS = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval", "logger.wandb"))] + [
    "trainer.max_steps=4", "trainer.val_check_interval=2", "test=false", "callbacks.progress=null"]


def _wandb_run_record(run_dir: Path) -> bytes:
    (offline,) = list((run_dir / "wandb").glob("offline-run-*"))  # exactly one W&B run per job
    (log,) = list(offline.glob("*.wandb"))
    return log.read_bytes()


@pytest.mark.slow
def test_ddp_grid_makes_exactly_its_job_dirs_and_one_wandb_run_each(tmp_path):
    """`-m` with trainer=ddp_cpu: without lab's fix each job's second rank re-runs the whole sweep into a
    new (stray) multirun directory."""
    train(["-m", *SWEEP_ARGS, "trainer=ddp_cpu", "logger.wandb.mode=offline",
           "task.optimizer.lr=1e-3,2e-3", "model.n_layers=1,2"], tmp_path, timeout=900)
    (sweep_dir,) = list((tmp_path / "gpt_nano_char" / "multirun").iterdir())
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_dir() and p.parent == sweep_dir) == ["0", "1", "2", "3"]
    assert sorted(p.name for p in (tmp_path / "gpt_nano_char").iterdir()) == ["multirun"]  # nothing stray
    jobs = run_dirs(tmp_path)
    assert len(jobs) == 4
    for job in jobs:
        assert (job / "csv" / "metrics.csv").is_file()
        record = _wandb_run_record(job)
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        assert f"gpt_nano_char/{sweep_dir.name}".encode() in record  # group = the sweep
        assert b"sweep" in record  # job_type
        for tag in [o for o in overrides if o.startswith(("task.optimizer.lr", "model.n_layers"))]:
            assert tag.encode() in record  # tags = the job's overrides


@pytest.mark.slow
def test_optuna_runs_trials_writes_the_result_and_resumes_the_study(tmp_path):
    args = [*SWEEP_ARGS, "logger.wandb.mode=disabled", "+hparams_search=optuna"]
    train([*args, "hydra.sweeper.n_trials=3"], tmp_path, timeout=900)
    (sweep_dir,) = list((tmp_path / "gpt_nano_char" / "multirun").iterdir())
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert set(result["best_params"]) == {"task.optimizer.lr", "task.optimizer.weight_decay", "model.dropout"}
    assert 1e-4 <= result["best_params"]["task.optimizer.lr"] <= 1e-2
    db = tmp_path / "gpt_nano_char" / "optuna.db"

    def finished_trials() -> list[float]:
        with sqlite3.connect(db) as con:
            return [v for (v,) in con.execute("SELECT value FROM trial_values")]

    values = finished_trials()
    assert len(values) == 3 and result["best_value"] == pytest.approx(min(values))
    train([*args, "hydra.sweeper.n_trials=1"], tmp_path, timeout=600)  # same command: the study continues
    assert len(finished_trials()) == 4
