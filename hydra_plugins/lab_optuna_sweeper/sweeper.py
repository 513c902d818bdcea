"""lab's Optuna sweeper: a Hydra Sweeper on Optuna's ask-and-tell API (Optuna >= 4), `hydra/sweeper=optuna`.

It keeps the surface of hydra-optuna-sweeper (which pins optuna < 3): `params` in Hydra's sweep grammar
(`choice(...)`, `interval(a, b)`, `tag(log, interval(a, b))`, `range(a, b, step)`; sweep overrides on the
command line join the space), a sampler with a seed, `direction`, an RDB `storage` that continues a study,
`n_trials`, `n_jobs` per batch, a failure budget, and `<sweep dir>/optimization_results.yaml`. Beyond it:

- trial values come from each job's status.json (lab.runtime.sweeps.jobs), so a job on any launcher reports back;
- `objectives` (metric names, default [optimized_metric]) with one direction each: multi-objective search,
  the Pareto front written to optimization_results.yaml;
- `pruner` (median, successive_halving): lab.runtime.sweeps.pruning.OptunaPruning reports the validation metric
  and stops the trial, recorded as PRUNED;
- continuing a study draws new points (the sampler is seeded with seed + the number of trials so far, not
  re-seeded to repeat them); trials left RUNNING by an interrupted sweep are marked FAIL, one line says so;
  job numbers are trial numbers, so a continued study never reuses a job directory.

Optuna is imported when a sweep starts: without it, one `error:` line names `pip install 'lab[sweep]'`.
"""
from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from lab.runtime.sweeps.jobs import read_status
from lab.runtime.sweeps.trials import forget_trial, import_optuna, register_trial

log = logging.getLogger("lab")

# ---- config nodes: hydra/sweeper=optuna, hydra/sweeper/sampler=tpe|random|nsgaii, hydra/sweeper/pruner=... ----
cs = ConfigStore.instance()
cs.store(group="hydra/sweeper", name="optuna", provider="lab", node={
    "defaults": [{"sampler": "tpe"}, {"pruner": "none"}, "_self_"],
    "_target_": "hydra_plugins.lab_optuna_sweeper.sweeper.OptunaSweeper",
    "_recursive_": False,      # sampler and pruner arrive as configs: the sweeper seeds the sampler itself
    "study_name": None,
    "storage": None,           # null: in memory (one invocation); sqlite:///path.db: persisted, continued
    "direction": "minimize",   # or a list, one per objective
    "objectives": None,        # metric names; null: [optimized_metric]
    "n_trials": 20,
    "n_jobs": 1,               # trials per launcher batch (parallel with a parallel launcher)
    "max_failure_rate": 0.0,   # failed trials allowed: floor(rate * n_trials) per invocation
    "params": None,
})
for name, node in {
    "tpe": {"_target_": "optuna.samplers.TPESampler", "seed": None, "n_startup_trials": 10},
    "random": {"_target_": "optuna.samplers.RandomSampler", "seed": None},
    "nsgaii": {"_target_": "optuna.samplers.NSGAIISampler", "seed": None, "population_size": 50},
}.items():
    cs.store(group="hydra/sweeper/sampler", name=name, node=node, provider="lab")
for name, node in {
    "none": {"_target_": "optuna.pruners.NopPruner"},
    "median": {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 2, "n_warmup_steps": 0, "interval_steps": 1},
    "successive_halving": {"_target_": "optuna.pruners.SuccessiveHalvingPruner", "min_resource": "auto",
                           "reduction_factor": 4, "min_early_stopping_rate": 0},
}.items():
    cs.store(group="hydra/sweeper/pruner", name=name, node=node, provider="lab")


class SearchSpaceError(ValueError):
    """A search space Optuna cannot sample, found before any trial: one line (the sweeper exits 2 with it)."""


def search_space(overrides: list[str], integer_keys: frozenset[str] = frozenset(),
                 params: list[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """Hydra override strings (the command line's) -> ({key: optuna distribution} for sweeps, [fixed overrides]).
    params: hydra.sweeper.params' sweeps, each replaced by a command-line sweep of its key. integer_keys: keys
    whose schema field is an integer (a float interval there fails every trial). A space that cannot be sampled
    (reversed or empty bounds, a log range touching 0, a key both searched and fixed) is one SearchSpaceError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: PLC0415
    from hydra.core.override_parser.types import Transformer  # noqa: PLC0415
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: PLC0415

    parse = OverridesParser.create().parse_overrides
    searched = {o.get_key_element(): o for o in parse(list(params))}
    given = {o.get_key_element(): o for o in parse(list(overrides))}  # the last of a key wins, as in Hydra
    for key, o in given.items():
        if key in searched and not o.is_sweep_override():
            raise SearchSpaceError(f"{key} is both searched (hydra.sweeper.params: {searched[key].input_line}) and "
                                   f"fixed ({o.input_line}); to fix it give {key}=choice({o.get_value_element_as_str()})")
        searched.pop(key, None)  # a command-line sweep of a params key replaces it
    space, fixed = {}, []
    for o in [*searched.values(), *given.values()]:
        key = o.get_key_element()
        if not o.is_sweep_override():
            fixed.append(f"{key}={o.get_value_element_as_str()}")
        elif o.is_choice_sweep() or (o.is_range_sweep() and o.value().shuffle):
            values = list(o.sweep_iterator(transformer=Transformer.encode))
            if not values:
                raise SearchSpaceError(f"{o.input_line}: no value to choose from; give at least one")
            space[key] = CategoricalDistribution(values)
        elif o.is_range_sweep():  # range(start, stop, step): stop excluded, as in Python
            v = o.value()
            values = list(o.sweep_iterator())
            if not values:
                raise SearchSpaceError(f"{o.input_line} holds no value (stop is excluded, as in Python's range); "
                                       f"e.g. {key}=range({min(v.start, v.stop)}, {max(v.start, v.stop) + 1})")
            integer = all(isinstance(x, int) for x in (v.start, v.stop, v.step))
            space[key] = (IntDistribution(values[0], values[-1], step=v.step) if integer
                          else FloatDistribution(values[0], values[-1], step=v.step))
        elif o.is_interval_sweep():  # interval(a, b): floats; int(interval(a, b)): integers
            v = o.value()
            log_scale, integer = "log" in v.tags, isinstance(v.start, int) and isinstance(v.end, int)
            if v.start >= v.end:
                raise SearchSpaceError(f"{o.input_line}: the lower bound {v.start} is not below the upper bound "
                                       f"{v.end}; give interval(low, high), e.g. interval({v.end}, {v.start})")
            if log_scale and v.start <= 0:
                raise SearchSpaceError(f"{o.input_line}: a log scale needs bounds above 0; start from a small "
                                       f"positive value (e.g. {v.end / 1000:g}) or drop tag(log, ...)")
            if key in integer_keys and not integer:
                lo, hi = math.ceil(v.start), math.floor(v.end)
                raise SearchSpaceError(f"{key} is an integer but {o.input_line} draws floats; search it with "
                                       f"{key}=int(interval({lo}, {hi})), range({lo}, {hi + 1}) or choice(...)")
            space[key] = (IntDistribution(int(v.start), int(v.end), log=log_scale) if integer
                          else FloatDistribution(float(v.start), float(v.end), log=log_scale))
        else:
            raise SearchSpaceError(f"{o.input_line}: not a sweep Optuna can sample (use choice, range or interval)")
    return space, fixed


def integer_keys(config: DictConfig, keys: list[str]) -> frozenset[str]:
    """Those of keys whose node in the composed config is typed int (a schema field: model.n_layers)."""
    from omegaconf.nodes import IntegerNode  # noqa: PLC0415

    out = set()
    for key in keys:
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(config, parent_key) if parent_key else config
        node = parent._get_node(leaf) if OmegaConf.is_dict(parent) and leaf in parent else None
        if isinstance(node, IntegerNode):
            out.add(key)
    return frozenset(out)


def _format(value: Any) -> str:
    return "null" if value is None else str(value)


class OptunaSweeper(Sweeper):
    def __init__(self, sampler: DictConfig, pruner: DictConfig, direction: Any, study_name: str | None = None,
                 storage: str | None = None, objectives: list[str] | None = None, n_trials: int = 20, n_jobs: int = 1,
                 max_failure_rate: float = 0.0, params: DictConfig | None = None):
        self.sampler_cfg, self.pruner_cfg = sampler, pruner
        self.directions = [direction] if isinstance(direction, str) else list(direction)
        self.study_name, self.storage, self.objectives = study_name, storage, objectives
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, max(1, n_jobs), max_failure_rate
        self.params = dict(params or {})

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def sweep(self, arguments: list[str]) -> None:
        from hydra.utils import instantiate  # noqa: PLC0415

        optuna = import_optuna()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # lab says what happens, one line per trial
        objectives = list(self.objectives or [self.config.optimized_metric])
        if len(objectives) != len(self.directions):
            _fail(f"hydra.sweeper.objectives has {len(objectives)} metric(s) ({', '.join(objectives)}) but "
                  f"hydra.sweeper.direction has {len(self.directions)}: give one direction per objective")
        pruner = instantiate(self.pruner_cfg)
        if len(objectives) > 1 and not isinstance(pruner, optuna.pruners.NopPruner):
            _fail("Optuna cannot prune multi-objective studies: drop hydra/sweeper/pruner or use one objective")
        params = [f"{k}={v}" for k, v in self.params.items()]
        try:  # before the study is created or any trial runs
            keys = [o.partition("=")[0].lstrip("+~") for o in [*params, *arguments]]
            space, fixed = search_space(list(arguments), integer_keys(self.config, keys), params)
        except SearchSpaceError as e:
            _fail(str(e))
        study = optuna.create_study(study_name=self.study_name, storage=self.storage, pruner=pruner,
                                    directions=self.directions, load_if_exists=True)
        self._fail_stale_trials(study, optuna)
        done_before = len(study.trials)
        seed = self.sampler_cfg.get("seed")
        # a continued study samples new points: seed + trials so far (re-seeding with `seed` would repeat them)
        seed = None if seed is None else seed + done_before
        study.sampler = instantiate(self.sampler_cfg, **({"seed": seed} if seed is not None else {}))
        log.info("optuna: study %s (%s), %d trials so far, %d more; %s seed %s, %s; objectives %s",
                 study.study_name, self.storage or "in memory", done_before, self.n_trials, type(study.sampler).__name__,
                 seed, type(pruner).__name__, ", ".join(f"{o} ({d})" for o, d in zip(objectives, self.directions)))
        budget = math.floor(self.max_failure_rate * self.n_trials)
        failures, remaining = 0, self.n_trials
        while remaining > 0:
            trials = [study.ask(fixed_distributions=space) for _ in range(min(self.n_jobs, remaining))]
            for trial in trials:
                self._register(trial, study)
            overrides = [tuple(f"{k}={_format(v)}" for k, v in t.params.items()) + tuple(fixed) for t in trials]
            try:
                returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
            except BaseException:
                running = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
                for trial in trials:  # an interrupted sweep leaves no trial RUNNING
                    if trial.number in running:
                        study.tell(trial, state=optuna.trial.TrialState.FAIL)
                log.warning("optuna: sweep interrupted; trial(s) %s marked FAIL", ", ".join(str(t.number) for t in trials))
                raise
            for trial, ret in zip(trials, returns):
                job_dir = Path(str(OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir")))
                state, values, line = self._outcome(read_status(job_dir) or {}, objectives, optuna)
                study.tell(trial, values=values, state=state)
                forget_trial(self.sweep_dir, trial.number)
                failures += state == optuna.trial.TrialState.FAIL
                log.info("optuna: trial %d %s: %s | %s", trial.number, state.name.lower(), line,
                         " ".join(overrides[trials.index(trial)][: len(trial.params)]))
            if failures > budget:
                _fail(f"{failures} of the trials failed, more than hydra.sweeper.max_failure_rate={self.max_failure_rate} "
                      f"x n_trials={self.n_trials} allows ({budget}); see the failed jobs' status.json and train.log",
                      code=1)
            remaining -= len(trials)
        self._write_results(study, objectives, optuna)

    def _register(self, trial, study) -> None:
        register_trial(self.sweep_dir, trial, study, self.storage, OmegaConf.to_container(self.pruner_cfg, resolve=True))

    @staticmethod
    def _outcome(status: dict, objectives: list[str], optuna) -> tuple[Any, list[float] | None, str]:
        state = status.get("state")
        if state == "pruned":
            return optuna.trial.TrialState.PRUNED, None, status.get("error") or "pruned"
        if state != "completed":
            return optuna.trial.TrialState.FAIL, None, status.get("error") or f"ended {state}"
        metrics = status.get("metrics") or {}
        values = [metrics.get(o) for o in objectives]
        bad = [o for o, v in zip(objectives, values) if v is None or not math.isfinite(v)]
        if bad:
            return optuna.trial.TrialState.FAIL, None, f"objective {', '.join(bad)} missing or not finite"
        return optuna.trial.TrialState.COMPLETE, values, ", ".join(f"{o}={v:.6g}" for o, v in zip(objectives, values))

    @staticmethod
    def _fail_stale_trials(study, optuna) -> None:
        """Trials a previous, interrupted sweep left RUNNING (killed before it could tell) are marked FAIL.
        One sweeper per study: a study shared by concurrent sweepers would lose their running trials here."""
        stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for t in stale:
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if stale:
            log.warning("optuna: %d trial(s) left RUNNING by an interrupted sweep marked FAIL: %s",
                        len(stale), ", ".join(str(t.number) for t in stale))

    def _write_results(self, study, objectives: list[str], optuna) -> None:
        states = [t.state.name.lower() for t in study.trials]
        counts = {s: states.count(s) for s in dict.fromkeys(states)}
        results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "objectives": objectives,
                                   "directions": self.directions, "trials": counts}
        completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if not completed:
            log.warning("optuna: no trial completed; nothing to report")
        elif len(objectives) == 1:
            best = study.best_trial
            results.update(best_params=best.params, best_value=best.value, best_trial=best.number)
            log.info("optuna: best trial %d: %s=%.6g with %s", best.number, objectives[0], best.value, best.params)
        else:
            front = sorted(study.best_trials, key=lambda t: t.values)
            results["pareto_front"] = [{"trial": t.number, "values": dict(zip(objectives, t.values)), "params": t.params}
                                       for t in front]
            log.info("optuna: Pareto front of %d trial(s): %s", len(front), ", ".join(str(t.number) for t in front))
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), self.sweep_dir / "optimization_results.yaml")


def _fail(message: str, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)
