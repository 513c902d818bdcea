"""Per-rung launcher resources (hydra_plugins/lab_launchers, ladder.rungs.<rung>.launcher): a multirun on
hydra/launcher=submitit_local or slurm submits each rung's jobs with that rung's settings over the launcher's, every
job under its sweep number, results in the sweep's order. Hydra composes each job's config as in a real launch;
submitit's executor is replaced by a recorder, so no process starts and no cluster is needed."""
from __future__ import annotations

import logging
from typing import ClassVar

import pytest
from conftest import CONF

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
import submitit
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.types import HydraContext, RunMode

from lab.runtime.cli.ladder import apply_ladder

NANO = ["+experiment=gpt_nano_char", "+ladder=smoke", "logger.wandb.mode=disabled"]
# the sweep of seed=1,2 over rungs xs and l as Hydra hands it to the launcher: rungs interleaved
SWEEP = [("xs", 1), ("l", 1), ("xs", 2), ("l", 2)]


class Recorder:
    """submitit.AutoExecutor's surface that the launcher uses; each executor made is kept in `made`."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self, cluster: str, folder: str, **init) -> None:
        self.cluster, self.folder, self.init, self.params, self.jobs = cluster, folder, init, {}, []
        Recorder.made.append(self)

    def update_parameters(self, **params) -> None:
        self.params.update(params)

    def map_array(self, fn, *columns):
        self.jobs = list(zip(*columns))
        return [Done(job[2]) for job in self.jobs]


class Done:
    def __init__(self, idx: int) -> None:
        self.idx = idx

    def results(self) -> list[str]:
        return [f"result of job {self.idx}"]


def launch(tmp_path, monkeypatch, launcher: str, overrides: list[str], initial_job_idx: int = 0):
    monkeypatch.setattr(submitit, "AutoExecutor", Recorder)
    monkeypatch.setattr(logging.root, "handlers", [])  # an earlier in-process run's handlers may write to closed streams
    Recorder.made = []
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    common = [*NANO, f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path}", *overrides]
    config = loader.load_configuration("train", overrides=common, run_mode=RunMode.MULTIRUN)
    jobs = [[*common, f"ladder.rung={rung}", f"seed={seed}"] for rung, seed in SWEEP]
    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # restored after the test
    HydraConfig.instance().set_config(config)
    plugin = Plugins.instance().instantiate_launcher(
        hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks()), task_function=lambda cfg: None,
        config=config)
    return jobs, plugin.launch(jobs, initial_job_idx=initial_job_idx)


def test_each_rung_is_submitted_with_its_own_settings(tmp_path, monkeypatch):
    """Rung l asks for 99 minutes and 8 GB, xs keeps the launcher's 60 minutes: two executors, l's jobs (sweep
    numbers 5 and 7 of a batch starting at 4) with l's settings, results back in the sweep's order. Catches the
    rung's settings not applied (one executor, 60 minutes), jobs renumbered within their group, or results in
    submission order (5, 7 before 6)."""
    jobs, results = launch(tmp_path, monkeypatch, "submitit_local",
                     ["+ladder.rungs.l.launcher.timeout_min=99", "+ladder.rungs.l.launcher.mem_gb=8"], 4)
    assert results == [f"result of job {i}" for i in (4, 5, 6, 7)]
    by_timeout = {ex.params["timeout_min"]: ex for ex in Recorder.made}
    assert set(by_timeout) == {60, 99} and all(ex.cluster == "local" for ex in Recorder.made)
    small, large = by_timeout[60], by_timeout[99]
    assert [job[2] for job in small.jobs] == [4, 6] and [job[2] for job in large.jobs] == [5, 7]
    assert [job[0] for job in large.jobs] == [jobs[1], jobs[3]]  # each job's own overrides
    assert large.params["mem_gb"] == 8 and small.params["mem_gb"] is None
    assert small.folder == f"{tmp_path}/.submitit/%j"


def test_slurm_rung_settings_take_the_executors_prefix(tmp_path, monkeypatch):
    """A SLURM-only setting of a rung (partition) reaches submitit as slurm_partition, a shared one (gpus_per_node)
    unprefixed, max_num_timeout when the executor is made. Catches the prefix rule lost for rung settings."""
    launch(tmp_path, monkeypatch, "slurm", ["trainer.devices=1", "+ladder.rungs.l.launcher.partition=big",
                                            "+ladder.rungs.l.launcher.gpus_per_node=4"])
    large = next(ex for ex in Recorder.made if ex.params.get("slurm_partition") == "big")
    small = next(ex for ex in Recorder.made if ex is not large)
    assert large.params["gpus_per_node"] == 4 and small.params["gpus_per_node"] == 1
    assert small.params["slurm_partition"] is None and large.cluster == "slurm"
    assert large.init == {"slurm_max_num_timeout": 0}


def test_without_rung_settings_one_executor_as_upstream(tmp_path, monkeypatch):
    """No rung sets anything: one executor with the launcher's settings for every job (today's behaviour)."""
    launch(tmp_path, monkeypatch, "submitit_local", [])
    assert len(Recorder.made) == 1 and [job[2] for job in Recorder.made[0].jobs] == [0, 1, 2, 3]


def test_unknown_rung_setting_is_one_error_line_before_any_job(tmp_path, monkeypatch, capsys):
    """A misspelt setting (timeot_min) is one `error:` line naming the valid ones, exit 2, nothing submitted.
    Catches an unchecked key reaching submitit (its traceback after some jobs were submitted)."""
    with pytest.raises(SystemExit) as exit_:
        launch(tmp_path, monkeypatch, "submitit_local", ["+ladder.rungs.l.launcher.timeot_min=5"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and Recorder.made == []
    assert len(lines) == 1 and lines[0].startswith("error: ladder.rungs.l.launcher.timeot_min is not a setting"), lines
    assert "timeout_min" in lines[0]


def test_basic_launcher_says_rung_settings_are_not_used(compose, caplog):
    """Outside lab's submitit launchers a rung's settings do nothing: the rung's log says so."""
    cfg = compose([*NANO, "ladder.rung=l", "+ladder.rungs.l.launcher.timeout_min=99"])
    with caplog.at_level(logging.WARNING, logger="lab"):
        apply_ladder(cfg)
    assert any("its launcher settings {'timeout_min': 99} are not used" in r.getMessage() for r in caplog.records)


def test_a_rung_on_more_devices_gets_the_slurm_tasks_and_gpus_that_follow_them(tmp_path, monkeypatch):
    """Rung l sets devices=4 and num_nodes=2: under slurm (tasks_per_node, gpus_per_node and nodes follow the
    trainer's) its jobs ask for 4 tasks and 4 GPUs on 2 nodes, xs's for the run's 1 on 1; a rung's own launcher
    setting wins over the followed one. Catches the launcher reading the sweep's trainer.devices for every job."""
    launch(tmp_path, monkeypatch, "slurm", ["trainer.devices=1", "+ladder.rungs.l.devices=4", "+ladder.rungs.l.num_nodes=2",
                                            "+ladder.rungs.l.launcher.gpus_per_node=8"])
    large = next(ex for ex in Recorder.made if ex.params["tasks_per_node"] == 4)
    small = next(ex for ex in Recorder.made if ex is not large)
    assert (large.params["nodes"], large.params["gpus_per_node"]) == (2, 8)
    assert (small.params["tasks_per_node"], small.params["gpus_per_node"], small.params["nodes"]) == (1, 1, 1)
    assert [job[2] for job in large.jobs] == [1, 3]
