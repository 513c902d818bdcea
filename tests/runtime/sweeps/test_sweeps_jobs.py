"""Sweep jobs fail, stop and continue alone (lab.runtime.sweeps.jobs): a bad variant fails alone with a summary
and exit code; an interrupted grid continues (completed jobs skipped, the interrupted one resumed from its
own checkpoint, one W&B run id per job, no -v1 files, metrics continuous); W&B records an interrupted job
as non-zero; a launcher that cannot work is one line before any job; submitit_local runs 2 jobs."""
from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import lightning as L
import pytest
from conftest import ROOT, TINY_LM, metric_by_step, read_metrics, run_module

from lab.runtime.sweeps import jobs as sweeps
from lab.runtime.sweeps.jobs import progress, summarize, sweep_size, write_status

SWEEP_ARGS = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval", "logger.wandb"))] + [
    "trainer.max_steps=6", "trainer.val_check_interval=2", "test=false", "callbacks.progress=null", "model.n_layers=1"]
TESTS_ON_PATH = {"PYTHONPATH": os.pathsep.join(map(str, (ROOT, Path(__file__).parent, ROOT / "tests")))}  # the subprocess imports InterruptAt from here, which imports conftest


class InterruptAt(L.Callback):
    """Ctrl-C at a training step, in one job of a sweep, when LAB_TEST_INTERRUPT_JOB names it."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        from hydra.core.hydra_config import HydraConfig

        if trainer.global_step == self.step and os.environ.get("LAB_TEST_INTERRUPT_JOB") == str(HydraConfig.get().job.num):
            raise KeyboardInterrupt

    def setup(self, trainer, pl_module, stage):
        # the job's checkpoints name no test-only class: lab resumes only checkpoints naming its own (issue 19)
        pl_module.lab_metadata["config"]["callbacks"].pop("interrupt", None)


def _states(sweep_dir: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["state"] for p in sweep_dir.glob("*/status.json")}


def wandb_records(run_file: Path) -> list:
    """The protobuf records of a W&B .wandb file (LevelDB log format: 32 KiB blocks of chunks, each with a
    7-byte header crc32/length/type; type 1 = full, 2/3/4 = first/middle/last) after the 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    data, records, pending, pos = run_file.read_bytes(), [], b"", 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # block trailer too short for a header: skip to the next block
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            records.append(wandb_internal_pb2.Record.FromString(pending))
    return records


def wandb_runs(job_dir: Path) -> list[tuple[str, int | None]]:
    """-> [(run id, exit code or None)] of every offline W&B run in a job dir."""
    runs = []
    for run_file in sorted(job_dir.glob("wandb/offline-run-*/run-*.wandb")):
        records = wandb_records(run_file)
        ids = {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"}
        exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
        (run_id,) = ids
        runs.append((run_id, exits[-1] if exits else None))
    return runs


def wandb_segments(job_dir: Path) -> list[dict]:
    """Every offline W&B segment of a job, oldest first: run id, tags, config keys, the `_step` of each row."""
    segments = []
    for run_file in sorted(job_dir.glob("wandb/offline-run-*/run-*.wandb")):
        records = wandb_records(run_file)
        kinds = [(r.WhichOneof("record_type"), r) for r in records]
        (run,) = [r.run for k, r in kinds if k == "run"]
        key = lambda item: item.key or "/".join(item.nested_key)  # noqa: E731 - W&B fills one or the other
        steps = [int(json.loads(i.value_json)) for k, r in kinds if k == "history" for i in r.history.item if key(i) == "_step"]
        config = {key(i): i.value_json for k, r in kinds if k == "config" for i in r.config.update}
        segments.append({"id": run.run_id, "tags": sorted(run.tags), "config": config, "steps": steps})
    return segments


# ---- fast: pure functions and the launcher check --------------------------------------------------

def test_summary_counts_every_state_and_names_each_job_that_did_not_complete(tmp_path):
    write_status(tmp_path / "0", state="completed")
    write_status(tmp_path / "1", state="failed", error="model.moe.top_k=2: must be between 1 and num_experts=1")
    write_status(tmp_path / "2", state="running")  # killed: no end recorded
    write_status(tmp_path / "10", state="completed")
    lines, all_completed = summarize(tmp_path)
    assert not all_completed
    assert lines[0] == f"sweep {tmp_path}: 4 jobs: 2 completed, 1 interrupted, 1 failed"
    assert lines[1] == f"  job 1 failed: model.moe.top_k=2: must be between 1 and num_experts=1 (log: {tmp_path / '1' / 'train.log'})"
    assert lines[2].startswith("  job 2 interrupted: no end recorded (killed)")
    assert f"hydra.sweep.dir={tmp_path}" in lines[-1]


def test_an_interrupted_sweep_counts_the_jobs_it_never_started(tmp_path):
    """A 2 x 3 grid stopped during job 2: the summary counts 6 jobs, 3 of them not started (Hydra's
    multirun.yaml holds the sweep's overrides); progress says k/N and the ETA at the jobs' mean duration."""
    (tmp_path / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - model.positions=learned,rotary\n"
                                            "    - seed=1,2,3\n    - trainer.max_steps=4\n")
    assert sweep_size(tmp_path) == 6
    write_status(tmp_path / "0", state="completed")
    write_status(tmp_path / "1", state="completed")
    write_status(tmp_path / "2", state="interrupted")
    lines, _ = summarize(tmp_path, sweep_size(tmp_path))
    assert lines[0] == f"sweep {tmp_path}: 6 jobs: 2 completed, 1 interrupted, 3 not started"
    assert "  3 jobs not started" in lines
    sweeps._durations[:] = [60.0, 80.0]  # two jobs done in this process: 70 s each on average
    assert progress(2, 6) == " [3/6, sweep ETA 4m40s]"  # 4 jobs left (this one included) x 70 s
    sweeps._durations.clear()
    assert progress(0, 6) == " [1/6]" and progress(0, None) == ""
    sweeps._durations[:] = [9.0]
    assert progress(5, 6) == " [6/6, sweep ETA 9s]"
    sweeps._durations.clear()


def test_slurm_launcher_without_slurm_is_one_line_before_any_job(tmp_path):
    env = {**TESTS_ON_PATH, "PATH": "/usr/bin:/bin"}  # no srun / sbatch
    result = run_module("lab.train", ["-m", "hydra/launcher=slurm", *SWEEP_ARGS, "logger.wandb.mode=disabled",
                                      "task.optimizer.lr=1e-3,2e-3"], tmp_path, timeout=120, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hydra/launcher=slurm needs SLURM"), result.stderr
    assert "srun" in lines[0] and "submitit_local" in lines[0]
    assert not list(tmp_path.rglob("status.json"))  # no job started


# ---- real sweeps (slow) -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_bad_variant_fails_alone_with_a_summary_and_a_nonzero_exit(tmp_path):
    result = run_module("lab.train", ["-m", *SWEEP_ARGS, "logger.wandb.mode=disabled", "+model.moe={num_experts:2,top_k:1}",
                                      "model.moe.top_k=2,1", "model.moe.num_experts=1,2"], tmp_path, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "gpt_nano_char" / "multirun").iterdir()
    assert _states(sweep_dir) == {"0": "failed", "1": "completed", "2": "completed", "3": "completed"}
    error = "model.moe.top_k=2: must be between 1 and num_experts=1"
    assert json.loads((sweep_dir / "0" / "status.json").read_text())["error"] == error
    assert f"sweep {sweep_dir}: 4 jobs: 3 completed, 1 failed" in result.stderr
    assert f"job 0 failed: {error} (log: {sweep_dir / '0' / 'train.log'})" in result.stderr
    assert "Traceback" not in result.stderr
    for job in "123":
        assert (sweep_dir / job / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_an_interrupted_grid_continues_where_it_stopped(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *SWEEP_ARGS, "logger.wandb.mode=offline", "+callbacks.interrupt={_target_:test_sweeps_jobs.InterruptAt,step:5}",
            f"hydra.sweep.dir={sweep_dir}", "task.optimizer.lr=1e-3,2e-3,3e-3"]
    first = run_module("lab.train", args, tmp_path, timeout=600, env={**TESTS_ON_PATH, "LAB_TEST_INTERRUPT_JOB": "1"})
    assert first.returncode != 0
    assert _states(sweep_dir) == {"0": "completed", "1": "interrupted"}  # Ctrl-C stops the sweep: job 2 never started
    (job1_run,) = wandb_runs(sweep_dir / "1")
    assert job1_run[1] not in (0, None)  # W&B: the interrupted run ended with a non-zero exit code
    assert wandb_runs(sweep_dir / "0")[0][1] == 0
    def job0_files():  # what the job wrote (Hydra rewrites .hydra/ and appends the "skipped" line to train.log)
        return {p: p.stat().st_mtime_ns for p in (sweep_dir / "0").rglob("*")
                if p.is_file() and ".hydra" not in p.parts and p.name != "train.log"}

    before = job0_files()

    second = run_module("lab.train", args, tmp_path, timeout=600, env=TESTS_ON_PATH)
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stdout + second.stderr
    assert re.search(r"job 0 \(.*\): skipped, completed", out)
    assert re.search(r"job 1 \(.*\): resumed from .*1/checkpoints/last.ckpt at step 4 \(it was interrupted\)", out)
    assert re.search(r"job 2 \(.*\): started", out)
    assert _states(sweep_dir) == {"0": "completed", "1": "completed", "2": "completed"}
    assert job0_files() == before  # not re-run
    for job in "012":
        ckpts = sorted(p.name for p in (sweep_dir / job / "checkpoints").iterdir())
        assert len(ckpts) == 2 and ckpts[1] == "last.ckpt" and ckpts[0].startswith("best-"), ckpts  # no -v1 copies
        runs = wandb_runs(sweep_dir / job)
        assert len({run_id for run_id, _ in runs}) == 1  # one W&B run id per job
        assert runs[-1][1] == 0
    assert len(wandb_runs(sweep_dir / "1")) == 2  # the interrupted attempt and its continuation, one id
    # W&B across the interruption: the second segment continues the first's steps (after `wandb sync` one
    # run, every row's step increasing and unique), with the tags and config the first had
    first_part, second_part = wandb_segments(sweep_dir / "1")
    steps = first_part["steps"] + second_part["steps"]
    assert first_part["steps"] and second_part["steps"] and steps == sorted(set(steps)), steps
    assert second_part["tags"] == first_part["tags"] and "task.optimizer.lr=0.002" in first_part["tags"]
    assert not any(t.startswith("ckpt_path") for t in second_part["tags"])
    assert second_part["config"] == {k: v for k, v in first_part["config"].items() if k in second_part["config"]}
    assert "ckpt_path" not in second_part["config"] or second_part["config"]["ckpt_path"] == first_part["config"]["ckpt_path"]
    for job in "012":  # status.json names the W&B run that was logged; a completed job leaves no .lock
        assert json.loads((sweep_dir / job / "status.json").read_text())["wandb_id"] == wandb_runs(sweep_dir / job)[0][0]
        assert not (sweep_dir / job / ".lock").exists()
    assert "3 jobs: 1 completed, 1 interrupted, 1 not started" in first.stderr
    assert re.search(r"job 2 \(.*\): started \[3/3, sweep ETA (\d+m)?\d+s\]", out)
    for warning in ("anonymous setting has no effect", "dataloader is not resumable"):
        assert warning not in first.stderr + out
    # the console of a job: its progress and results (about 12 lines), the detail in its train.log (was ~170)
    assert len(out.splitlines()) < 45 and re.search(r"\d+ lines of detail \(config, files read, samples\) are in .*/2/train.log only", out)
    assert "data: read " in (sweep_dir / "2" / "train.log").read_text() and "data: read " not in out
    # job 1's metrics across the interruption: every step exactly once, the same steps as uninterrupted job 0
    rows, reference = read_metrics(sweep_dir / "1"), read_metrics(sweep_dir / "0")
    for name, n in (("train/loss", 6), ("val/loss", 3)):
        steps = [int(r["step"]) for r in rows if r.get(name)]
        assert len(steps) == len(set(steps)) == n and set(steps) == set(metric_by_step(reference, name)), (name, steps)
    assert not (sweep_dir / "1" / "csv" / "metrics.before-resume.csv").exists()
    # job 1's state history: each attempt's process, where the resumed one continued from, the steps reached
    history = json.loads((sweep_dir / "1" / "status.json").read_text())["history"]
    assert [(e["event"], e["attempt"]) for e in history] == [("started", 1), ("interrupted", 1), ("resumed", 2), ("completed", 2)]
    assert history[0]["pid"] == history[1]["pid"] != history[2]["pid"] == history[3]["pid"]
    assert history[2]["from_step"] == 4 and history[1]["step"] >= 4 and history[3]["step"] == max(int(r["step"]) for r in rows)


@pytest.mark.slow
def test_each_job_times_its_first_step_from_its_own_start(tmp_path):
    result = run_module("lab.train", ["-m", *SWEEP_ARGS, "logger.wandb.mode=disabled", "task.optimizer.lr=1e-3,2e-3,3e-3"],
                        tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "gpt_nano_char" / "multirun").iterdir()
    stamp = r"\[(\d\d\d\d-\d\d-\d\d \d\d:\d\d:\d\d),(\d\d\d)\]"

    def seconds(line_match) -> float:
        from datetime import datetime

        return datetime.strptime(line_match.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(line_match.group(2)) / 1000

    job0_start = seconds(re.search(stamp + r".*job 0 \(", (sweep_dir / "0" / "train.log").read_text()))
    log2 = (sweep_dir / "2" / "train.log").read_text()
    first_step = re.search(stamp + r".*first training step ([\d.]+)s after launch", log2)
    since_sweep_start = seconds(first_step) - job0_start  # two whole jobs ran before this one
    assert float(first_step.group(3)) < since_sweep_start / 2, (first_step.group(0), since_sweep_start)


@pytest.mark.slow
def test_submitit_local_runs_two_jobs_in_parallel_processes(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    result = run_module("lab.train", ["-m", "hydra/launcher=submitit_local", *SWEEP_ARGS, "logger.wandb.mode=disabled",
                                      "task.optimizer.lr=1e-3,2e-3"], tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "gpt_nano_char" / "multirun").iterdir()
    assert _states(sweep_dir) == {"0": "completed", "1": "completed"}
    assert "2 jobs: 2 completed" in result.stdout
    pids = {json.loads((sweep_dir / j / "status.json").read_text())["pid"] for j in "01"}
    assert len(pids) == 2  # each job in its own process (submitit)


def test_optuna_search_without_the_sweep_extra_is_one_line_naming_the_install(tmp_path):
    blocked = tmp_path / "blocked"
    (blocked / "optuna").mkdir(parents=True)
    (blocked / "optuna" / "__init__.py").write_text("raise ImportError('No module named optuna')\n")  # as if not installed
    env = {"PYTHONPATH": f"{blocked}{os.pathsep}{ROOT}"}
    result = run_module("lab.train", [*SWEEP_ARGS, "logger.wandb.mode=disabled", "+hparams_search=optuna"], tmp_path / "runs",
                        timeout=120, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip() == "error: +hparams_search=optuna needs Optuna: pip install 'lab[sweep]'"
    assert not list((tmp_path / "runs").rglob("status.json"))  # no trial started
