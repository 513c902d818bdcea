"""lab's Optuna sweeper (hydra_plugins/lab_optuna_sweeper) on a tiny model with sqlite storage: a pruned
trial, a failed trial within the failure budget, a study interrupted mid-trial and continued without
repeating parameters, a multi-objective Pareto front; and the search-space grammar."""
from __future__ import annotations

import math

import pytest
import yaml
from conftest import run_module
from test_sweeps_jobs import SWEEP_ARGS, TESTS_ON_PATH

optuna = pytest.importorskip("optuna")
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from hydra_plugins.lab_optuna_sweeper.sweeper import search_space  # noqa: E402

ARGS = [*SWEEP_ARGS, "trainer.max_steps=4", "logger.wandb.mode=disabled", "+hparams_search=optuna",
        "task.scheduler.min_lr=0"]  # the search reaches lr 1e-7: a min_lr above it is refused (config checks)


def test_search_space_grammar_maps_to_optuna_distributions():
    space, fixed = search_space(["lr=tag(log, interval(1e-4, 1e-2))", "wd=interval(0.0, 0.2)", "layers=range(2, 8, 2)",
                                 "heads=range(1, 9)", "drop=choice(0.0, 0.1)", "act=choice(gelu, swiglu)", "seed=3"])
    assert space == {
        "lr": FloatDistribution(1e-4, 1e-2, log=True),
        "wd": FloatDistribution(0.0, 0.2),
        "layers": IntDistribution(2, 6, step=2),  # range excludes its stop, as in Python and Hydra's grids
        "heads": IntDistribution(1, 8),  # an integer span: range (Hydra's interval is always float)
        "drop": CategoricalDistribution([0.0, 0.1]),
        "act": CategoricalDistribution(["gelu", "swiglu"]),
    }
    assert fixed == ["seed=3"]


def _study(runs_dir, name="gpt_nano_char-optuna"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{runs_dir.resolve()}/gpt_nano_char/optuna.db")


@pytest.mark.slow
def test_pruning_failure_budget_interruption_and_continuation(tmp_path):
    storage = f"sqlite:///{tmp_path.resolve()}/gpt_nano_char/optuna.db"
    (tmp_path / "gpt_nano_char").mkdir()
    study = optuna.create_study(study_name="gpt_nano_char-optuna", storage=storage, direction="minimize")
    study.enqueue_trial({"task.optimizer.lr": 3e-3, "model.n_heads": 4})  # learns: the reference for the pruner
    study.enqueue_trial({"task.optimizer.lr": 1e-7, "model.n_heads": 4})  # barely moves: worse than trial 0 at step 2 -> pruned
    study.enqueue_trial({"task.optimizer.lr": 3e-3, "model.n_heads": 3})  # d_model 128 / 3 heads: fails
    space = ["task.optimizer.lr=tag(log, interval(1e-7, 1e-2))", "model.n_heads=choice(4, 3)"]  # join/replace params

    # 1. three trials: one completes, one is pruned, one fails within the budget (floor(0.34 * 3) = 1)
    first = run_module("lab.train", [*ARGS, *space, "hydra.sweeper.n_trials=3", "hydra.sweeper.max_failure_rate=0.34",
                                     "hydra.sweeper.pruner.n_startup_trials=1"], tmp_path, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    trials = _study(tmp_path).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL]
    assert list(trials[1].intermediate_values) == [2]  # stopped at its first validation, of 2
    assert trials[1].intermediate_values[2] > trials[0].intermediate_values[2]
    (sweep_dir,) = (tmp_path / "gpt_nano_char" / "multirun").iterdir()
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert result["best_trial"] == 0 and result["best_value"] == pytest.approx(trials[0].value)
    assert result["trials"] == {"complete": 1, "pruned": 1, "fail": 1}
    assert "model.d_model=128 is not divisible by model.n_heads=3" in first.stderr

    # 2. the same search interrupted (Ctrl-C) in its second new trial: that trial is FAIL, not RUNNING forever
    second = run_module("lab.train", [*ARGS, "hydra.sweeper.n_trials=3", "hydra/sweeper/pruner=none", "+callbacks.interrupt={_target_:test_sweeps_jobs.InterruptAt,step:3}"],
                        tmp_path, timeout=600, env={**TESTS_ON_PATH, "LAB_TEST_INTERRUPT_JOB": "4"})
    assert second.returncode != 0
    trials = _study(tmp_path).trials
    assert [t.state for t in trials[3:]] == [TrialState.COMPLETE, TrialState.FAIL]
    _study(tmp_path).ask()  # a trial left RUNNING by a sweeper killed outright (trial 5)

    # 3. continued: the stale trial is marked FAIL, two new trials, no parameters repeated
    third = run_module("lab.train", [*ARGS, "hydra.sweeper.n_trials=2", "hydra/sweeper/pruner=none"], tmp_path, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "1 trial(s) left RUNNING by an interrupted sweep marked FAIL: 5" in third.stdout + third.stderr
    trials = _study(tmp_path).trials
    assert [t.state for t in trials[5:]] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    sampled = [t.params["task.optimizer.lr"] for t in trials[3:] if t.params]
    assert len(sampled) == len(set(sampled)) == 4  # each continuation drew new points


@pytest.mark.slow
def test_multi_objective_search_writes_the_pareto_front(tmp_path):
    result = run_module("lab.train", [*ARGS, "hydra.sweeper.n_trials=3", "hydra.sweeper.storage=null",
                                      "hydra/sweeper/pruner=none", "hydra.sweeper.objectives=[val/loss,params/active]",
                                      "hydra.sweeper.direction=[minimize,minimize]",
                                      "model.d_model=choice(32, 64)"],
                        tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "gpt_nano_char" / "multirun").iterdir()
    front = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())["pareto_front"]
    # an independent check: recompute the non-dominated set from every trial's status.json
    import json
    points = {}
    for status in sweep_dir.glob("*/status.json"):
        s = json.loads(status.read_text())
        points[s["job"]] = (s["metrics"]["val/loss"], s["metrics"]["params/active"])
    assert len(points) == 3 and all(math.isfinite(v) for p in points.values() for v in p)

    def dominated(p):
        return any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points.values())

    assert sorted(t["trial"] for t in front) == sorted(n for n, p in points.items() if not dominated(p))


@pytest.mark.parametrize(("overrides", "params", "says"), [
    (["lr=tag(log, interval(1e-2, 1e-4))"], [], "lower bound 0.01 is not below the upper bound 0.0001"),
    (["lr=interval(0.5, 0.5)"], [], "not below the upper bound"),
    (["lr=tag(log, interval(0, 1e-2))"], [], "a log scale needs bounds above 0"),
    (["n=tag(log, int(interval(0, 8)))"], [], "a log scale needs bounds above 0"),
    (["n=range(4, 1)"], [], "holds no value (stop is excluded, as in Python's range); e.g. n=range(1, 5)"),
    (["n_layers=interval(1, 3)"], [], "n_layers=int(interval(1, 3)), range(1, 4) or choice(...)"),
    (["wd=0.1"], ["wd=interval(0.0, 0.2)"], "wd is both searched (hydra.sweeper.params: wd=interval(0.0, 0.2)) and "
                                          "fixed (wd=0.1); to fix it give wd=choice(0.1)"),
])
def test_a_search_space_optuna_cannot_sample_is_one_line(overrides, params, says):
    """Each of the issue's search spaces (reversed, empty, log from 0, a float interval for an integer, a key both
    searched and fixed) is refused by name before any trial; each fails on a check that drops its branch."""
    from conftest import one_short_line

    from hydra_plugins.lab_optuna_sweeper.sweeper import SearchSpaceError

    with pytest.raises(SearchSpaceError) as e:
        search_space(overrides, frozenset({"n_layers"}), params)
    assert says in one_short_line(str(e.value))


def test_int_interval_draws_integers_and_a_command_line_sweep_replaces_the_params_one():
    """int(interval(a, b)) is an integer distribution (Hydra's interval is float: every trial of model.n_layers
    failed); a sweep of a params key on the command line replaces the params' range, fixed keys pass through."""
    space, fixed = search_space(["n_layers=int(interval(1, 3))", "lr=tag(log, interval(1e-5, 1e-3))", "seed=4"],
                                frozenset({"n_layers"}), ["lr=tag(log, interval(1e-4, 1e-2))", "wd=interval(0.0, 0.2)"])
    assert space == {"wd": FloatDistribution(0.0, 0.2), "n_layers": IntDistribution(1, 3),
                     "lr": FloatDistribution(1e-5, 1e-3, log=True)}
    assert fixed == ["seed=4"]


def test_integer_keys_are_the_schemas_int_fields():
    """model.n_layers (GPTConfig: int) is an integer key; model.dropout (float) and an untyped YAML int are not."""
    from omegaconf import OmegaConf

    from hydra_plugins.lab_optuna_sweeper.sweeper import integer_keys
    from lab.models.gpt import GPTConfig

    cfg = OmegaConf.create({"model": OmegaConf.structured(GPTConfig), "trainer": {"max_steps": 5}})
    assert integer_keys(cfg, ["model.n_layers", "model.dropout", "trainer.max_steps", "model.missing"]) == {"model.n_layers"}


def test_bad_search_spaces_exit_2_before_any_trial(tmp_path):
    """End to end: a reversed log interval, and the YAML's key path typed on the command line (Hydra's own
    "Sweeping over Hydra's configuration is not supported"), are one `error:` line each, exit 2, no trial run."""
    reversed_ = run_module("lab.train", [*ARGS, "task.optimizer.lr=tag(log, interval(1e-2, 1e-4))"], tmp_path)
    assert reversed_.returncode == 2, reversed_.stderr[-2000:]
    assert reversed_.stderr.strip().splitlines()[-1].startswith("error: task.optimizer.lr=tag(log, interval(1e-2, 1e-4)): the lower")
    path = run_module("lab.train", [*ARGS, "hydra.sweeper.params.task.optimizer.lr=tag(log, interval(1e-5, 1e-3))"], tmp_path)
    assert path.returncode == 2, path.stderr[-2000:]
    assert path.stderr.strip().splitlines()[-1].endswith(
        "give the key itself: task.optimizer.lr=tag(log, interval(1e-5, 1e-3)) (it replaces the search's own range)")
    assert not list(tmp_path.rglob("status.json")) and not list(tmp_path.rglob("optuna.db"))
