"""Optuna pruning: report the validation metric to the trial this job runs, stop the job when the pruner says so."""
from __future__ import annotations

import logging

import lightning as L

log = logging.getLogger("lab")


class OptunaPruning(L.Callback):
    """After every validation, rank 0 reports `monitor` at the global step to the job's Optuna trial (found
    through lab.runtime.sweeps.trials, where the sweeper registers it) and asks the study's pruner; every rank
    gets the decision, and a pruned job raises optuna.TrialPruned, recorded as `pruned` in its status.json and in the study.
    Does nothing outside an Optuna sweep (a single run, a grid)."""

    def __init__(self, monitor: str):
        self.monitor = monitor
        self.trial = None

    def on_fit_start(self, trainer, pl_module):
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

        if trainer.is_global_zero and HydraConfig.initialized():
            from lab.runtime.sweeps.trials import trial_for_job  # noqa: PLC0415 - the sweep extra

            hc = HydraConfig.get()
            trial = trial_for_job(hc.sweep.dir, hc.job.num)
            # Optuna prunes single-objective studies only (Trial.report refuses multi-objective ones)
            self.trial = trial if trial is not None and len(trial.study.directions) == 1 else None

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        prune = False
        if self.trial is not None and value is not None:
            self.trial.report(float(value), trainer.global_step)
            prune = self.trial.should_prune()
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune, src=0)
        if prune:
            import optuna  # noqa: PLC0415

            raise optuna.TrialPruned(f"pruned at step {trainer.global_step}: {self.monitor}={float(value):.4g} "
                                     "is worse than the pruner allows at this step")
