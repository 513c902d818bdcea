"""The Optuna trial each job of an Optuna sweep runs, shared between lab's sweeper (hydra_plugins/
lab_optuna_sweeper, which registers it) and the pruning callback in the job (which reports to it): the
sweeper's own object for an in-process job, else rebuilt from <sweep dir>/.optuna/trial-<n>.json (RDB storage;
jobs in other processes). Here in lab, so that the plugin imports lab and lab never imports the plugin."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ACTIVE_TRIALS: dict[tuple[str, int], Any] = {}  # (sweep dir, job number) -> optuna Trial, for in-process jobs


def import_optuna():
    try:
        import optuna  # noqa: PLC0415 - the sweep extra, imported only when a search starts
    except ImportError:
        print("error: +hparams_search=optuna needs Optuna: pip install 'lab[sweep]'", file=sys.stderr)
        sys.exit(2)
    return optuna


def register_trial(sweep_dir: Path, trial, study, storage: str | None, pruner: dict) -> None:
    """Make `trial` findable by its job: in this process, and with an RDB storage from any process."""
    ACTIVE_TRIALS[(str(Path(sweep_dir).resolve()), trial.number)] = trial
    if storage:  # jobs in other processes (submitit) rebuild the trial from the shared storage
        info = {"storage": storage, "study_name": study.study_name, "trial_id": trial._trial_id, "pruner": pruner}
        path = Path(sweep_dir) / ".optuna" / f"trial-{trial.number}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(info))


def forget_trial(sweep_dir: Path, number: int) -> None:
    ACTIVE_TRIALS.pop((str(Path(sweep_dir).resolve()), number), None)


def trial_for_job(sweep_dir: Path, job_num: int):
    """The Optuna trial a job of this sweep runs, for the pruning callback (module docstring); None outside one."""
    key = (str(Path(sweep_dir).resolve()), int(job_num))
    if key in ACTIVE_TRIALS:
        return ACTIVE_TRIALS[key]
    path = Path(sweep_dir) / ".optuna" / f"trial-{job_num}.json"
    if not path.is_file():
        return None
    from hydra.utils import instantiate  # noqa: PLC0415

    optuna = import_optuna()
    info = json.loads(path.read_text())
    study = optuna.load_study(study_name=info["study_name"], storage=info["storage"], pruner=instantiate(info["pruner"]))
    return optuna.trial.Trial(study, info["trial_id"])
