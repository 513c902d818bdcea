"""Shared test helpers: run the CLI in a subprocess, read what a run wrote."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Two xdist workers share CI's 2 cores: one intra-op thread per process (and per subprocess a test starts, which
# inherits it), else each process's OpenMP threads spin against the other's at every barrier. Set before torch
# is imported; pytest_configure covers a torch a plugin imported first.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from lab.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
# The warm corpus cache, named explicitly for subprocesses: a test that gives a run its own HOME (no W&B
# credentials) would otherwise fetch and tokenize every corpus again into that HOME's empty ~/.cache/lab.
CACHE_DIR = os.environ.get("LAB_CACHE_DIR") or str(Path.home() / ".cache" / "lab")

# A tiny GPT's sizes for in-process model tests: GPT(vocab_size, **TINY_GPT).
TINY_GPT = dict(d_model=16, n_layers=2, n_heads=2, max_seq_len=16)

# A small, fast slice of the real corpus: 4 plays for training, 1 held out, character level.
TINY_LM = [
    "+experiment=gpt_nano_char",
    "data.corpus.max_works=4",
    "data.corpus.val_works=[tempest]",
    "data.corpus.test_works=[phoenix_and_the_turtle]",  # 2 kB: the full-pass test stays fast
    "data.eval_batches=2",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=1",
    "logger.wandb.mode=disabled",
    "task.samples.max_new_tokens=16",
]


# A user's mistake is one short error line: at most LIMIT characters (tests of the data and entry points' messages).
LIMIT = 300


def one_short_line(message: str) -> str:
    assert "\n" not in message and len(message) <= LIMIT, (len(message), message[:500])
    return message


def refused(fn, *args, **kwargs) -> str:
    """fn(*args, **kwargs) raises DataError -> its message, checked to be one short line."""
    with pytest.raises(DataError) as e:
        fn(*args, **kwargs)
    return one_short_line(str(e.value))


def run_module(module: str, args: list[str], runs_dir: Path, timeout: int = 300, env: dict | None = None):
    """python -m <module> <args> in a subprocess with runs under runs_dir; returns CompletedProcess."""
    full_env = {**os.environ, "LAB_RUNS_DIR": str(runs_dir), "LAB_CACHE_DIR": CACHE_DIR, "PYTHONUNBUFFERED": "1",
                **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def train(args: list[str], runs_dir: Path, **kw):
    result = run_module("lab.train", args, runs_dir, **kw)
    assert result.returncode == 0, f"lab.train failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def run_dirs(runs_dir: Path) -> list[Path]:
    """Every run directory (one with a config.yaml) under runs_dir, oldest first."""
    return sorted((p.parent for p in runs_dir.rglob("config.yaml") if ".hydra" not in p.parts), key=lambda p: p.stat().st_mtime)


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def metric_by_step(rows: list[dict[str, str]], name: str) -> dict[int, float]:
    return {int(r["step"]): float(r[name]) for r in rows if r.get(name)}


# A tiny translator on the Ding pairs: 6 steps, validations after steps 3 and 6, 40 validation and 40 test pairs.
TINY_TRANSLATOR = [
    "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "data.vocab_size=600",
    "data.valid_size=40", "data.test_size=40", "data.batch_size=16", "data.eval_batch_size=20",
    "trainer.max_steps=6", "trainer.val_check_interval=3", "trainer.log_every_n_steps=1",
    "task.scheduler.warmup_steps=2", "task.test_decoding.max_len_offset=2", "task.val_decoding.max_len_offset=2",
    "logger.wandb.mode=disabled", "callbacks.progress=null",
]


@pytest.fixture(scope="session")
def translator_run(tmp_path_factory) -> tuple[Path, Path]:
    """One tiny translator_small run with the recipe's options (the best checkpoint by val/bleu on the first 30
    validation sentences), shared by the command-line tests of test_translation:
    a subprocess's start is most of their time. -> (runs dir, run dir)."""
    tmp = tmp_path_factory.mktemp("translator")
    train(["+experiment=translator_small", *TINY_TRANSLATOR, "task.val_bleu_sentences=30", "optimized_metric=val/bleu",
           "optimized_mode=max"], tmp, env={"OMP_NUM_THREADS": "1"})
    (run,) = run_dirs(tmp)
    return tmp, run


def translator_eval(translator_run, *args: str) -> subprocess.CompletedProcess:
    """python -m lab.eval on translator_run's last checkpoint (beam search limited as in training's test)."""
    tmp, run = translator_run
    return run_module("lab.eval", [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "+task.test_decoding.max_len_offset=2",
                                   *args], tmp, env={"OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def translator_tested(translator_run) -> tuple[subprocess.CompletedProcess, Path]:
    """lab.eval of translator_run's last checkpoint with outputs_dir, run once. -> (the process, outputs dir)."""
    out_dir = translator_run[0] / "test_outputs"
    return translator_eval(translator_run, f"outputs_dir={out_dir}"), out_dir


@pytest.fixture(scope="session")
def compose():
    """compose(overrides) -> resolved-able DictConfig of conf/train.yaml, without running anything."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def _compose(overrides: list[str], config_name: str = "train"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name, overrides=overrides, return_hydra_config=True)

    return _compose


# ---- running on two pytest-xdist workers (`make test`: -n 2 --dist loadfile --no-loadscope-reorder) ----
# A worker takes a whole module at a time (its module- and session-scoped training runs are built once), the
# next one in collection order when it is free. These modules take minutes (subprocess training runs; measured
# with --durations, longest first); starting with them keeps the run from ending on one long module while the
# other worker waits. The order changes nothing else: each module's tests keep their order. Paths are relative
# to tests/; a name here that is no file fails the collection (below), so a moved module cannot drop out silently.
LONG_MODULES = ["runtime/trainer/test_resume.py", "runtime/inference/test_inference_cli.py", "runtime/rundir/test_autoresume.py",
                "runtime/trainer/test_strategies.py", "entry/test_encoder_cli.py", "runtime/sweeps/test_sweeps.py", "nn/test_moe.py",
                "runtime/trainer/test_wandb.py", "runtime/rundir/test_signals.py", "runtime/rundir/test_launch.py",
                "tasks/test_translation.py", "tasks/test_translation_bleu.py", "report/test_report.py",
                "runtime/sweeps/test_sweeps_jobs.py", "runtime/cli/test_config_errors.py", "checkpoints/test_preemption.py",
                "runtime/sweeps/test_sweeps_optuna.py", "hf/test_against_hf_export.py", "entry/test_train_cli.py",
                "runtime/trainer/test_global_metrics.py", "entry/test_ladder_cli.py"]


def pytest_collection_modifyitems(items):
    first = {name: i for i, name in enumerate(LONG_MODULES)}
    here = Path(__file__).parent
    missing = [name for name in LONG_MODULES if not (here / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: LONG_MODULES names no file: {', '.join(missing)}")
    items.sort(key=lambda item: first.get(item.path.relative_to(here).as_posix(), len(first)))  # stable


@pytest.fixture(autouse=True)
def _wandb_mode_stays_with_its_test(monkeypatch):
    """lab's W&B decision sets WANDB_MODE in its own process, for DDP ranks and sweep jobs to inherit
    (lab.runtime.trainer.loggers, lab.report.wandb_table): an entry point one test runs in-process must not hand
    its mode (say, disabled) to the subprocesses of the next test on the same worker."""
    if "WANDB_MODE" in os.environ:
        monkeypatch.setenv("WANDB_MODE", os.environ["WANDB_MODE"])
    else:
        monkeypatch.delenv("WANDB_MODE", raising=False)


def pytest_configure(config):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
