"""hydra-submitit-launcher's local and SLURM launchers, with each job's resources its own: a model ladder's rung
may set launcher settings (`ladder.rungs.<rung>.launcher`, docs/ladders.md), so the largest rung asks for more time,
memory or GPUs than the smallest. The upstream launcher submits every job of a sweep with one set of settings.

Each job's config is composed before anything is submitted (a bad setting is one `error:` line, no job started);
jobs with the same settings are submitted together (one SLURM array each), every job keeps its sweep number, and
the results come back in the sweep's order (an Optuna sweeper matches them to its trials)."""
from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from omegaconf import OmegaConf

from lab.errors import ConfigError
from lab.runtime.cli.ladder import rung_launcher

log = logging.getLogger(__name__)

# Settings given to submitit's executor when it is made, not per job.
INIT_KEYS = ("submitit_folder", "max_num_timeout")


class _PerJobLauncher(BaseSubmititLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit  # noqa: PLC0415 - as upstream: plugin discovery stays fast

        assert self.config is not None and self.hydra_context is not None
        groups: dict[str, tuple[dict[str, Any], list[tuple]]] = {}
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            try:
                own = rung_launcher(job_config, self.params)
            except ConfigError as e:
                print(f"error: {e}", file=sys.stderr)
                sys.exit(2)
            params = {**self.params, **own}
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}"
                     + (f"  [rung's launcher settings: {', '.join(f'{k}={v}' for k, v in own.items())}]" if own else ""))
            job = (list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())
            groups.setdefault(json.dumps(params, sort_keys=True, default=str), (params, []))[1].append(job)

        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))

        queue_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        submitted = []
        for params, jobs in groups.values():
            executor = submitit.AutoExecutor(
                cluster=self._EXECUTOR, folder=params["submitit_folder"],
                **{f"{self._EXECUTOR}_{k}": params[k] for k in INIT_KEYS[1:] if k in params})
            executor.update_parameters(**{k if k in queue_keys else f"{self._EXECUTOR}_{k}": v
                                          for k, v in params.items() if k not in INIT_KEYS})
            submitted += zip((job[2] for job in jobs), executor.map_array(self, *zip(*jobs)))
        return [job.results()[0] for _, job in sorted(submitted, key=lambda pair: pair[0])]


class LocalLauncher(_PerJobLauncher):
    """hydra/launcher=submitit_local: jobs in parallel processes on this machine."""

    _EXECUTOR = "local"


class SlurmLauncher(_PerJobLauncher):
    """hydra/launcher=slurm: one SLURM job per job of the sweep."""

    _EXECUTOR = "slurm"


@dataclass
class LocalConf(LocalQueueConf):
    _target_: str = f"{__name__}.LocalLauncher"


@dataclass
class SlurmConf(SlurmQueueConf):
    _target_: str = f"{__name__}.SlurmLauncher"


class LauncherConfigs(SearchPathPlugin):
    """hydra/launcher=submitit_local and submitit_slurm name these launchers. Upstream stores its configs under
    those names whenever Hydra's plugin scan (re)loads its module, in an order that depends on sys.path; Hydra builds
    the config search path after the scan and before it composes anything, so storing them here always wins."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        ConfigStore.instance().store(group="hydra/launcher", name="submitit_local", node=LocalConf, provider="lab")
        ConfigStore.instance().store(group="hydra/launcher", name="submitit_slurm", node=SlurmConf, provider="lab")
