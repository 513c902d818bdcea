"""python -m lab.eval sweep_dir=<sweep>: the test pass of each variant's best run (issue 50), instead of every job's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import lab.runtime.inference.evaluation as evaluation
from lab.errors import LabError


def job(sweep: Path, n: int, overrides: list[str], val_losses: list[float | None]) -> Path:
    """A sweep job's run directory as lab.train writes it: config.yaml, .hydra/overrides.yaml, csv/metrics.csv
    (a row per step; val/loss where it validated), checkpoints/last.ckpt."""
    run = sweep / str(n)
    (run / ".hydra").mkdir(parents=True)
    (run / "csv").mkdir()
    (run / "checkpoints").mkdir()
    (run / "config.yaml").write_text("seed: 1\n")
    (run / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    rows = "".join(f"{step},0.5,{'' if v is None else v}\n" for step, v in enumerate(val_losses))
    (run / "csv" / "metrics.csv").write_text("step,train/loss,val/loss\n" + rows)
    (run / "checkpoints" / "last.ckpt").write_text("")
    return run


def sweep_of_two_variants(tmp_path: Path) -> tuple[Path, dict[int, Path]]:
    """lr=1e-3 (seeds 1, 2) and lr=3e-3 (seeds 1, 2), all with trainer.max_steps=4 (so it names no variant):
    by the lowest val/loss each reached, seed 2 of lr=1e-3 (2.0 at its second validation, though its last is
    2.6) and seed 1 of lr=3e-3 (1.9); job 4 never validated."""
    sweep = tmp_path / "sweep"
    runs = {0: job(sweep, 0, ["trainer.max_steps=4", "lr=1e-3", "seed=1"], [None, 2.4, 2.2]),
            1: job(sweep, 1, ["trainer.max_steps=4", "lr=1e-3", "seed=2"], [None, 2.0, 2.6]),
            2: job(sweep, 2, ["trainer.max_steps=4", "lr=3e-3", "seed=1"], [None, 1.9, 2.1]),
            3: job(sweep, 3, ["trainer.max_steps=4", "lr=3e-3", "seed=2"], [None, 2.5, 2.3]),
            4: job(sweep, 4, ["trainer.max_steps=4", "lr=3e-3", "seed=3"], [None, None])}
    return sweep, runs


def test_each_variant_is_its_run_with_the_lowest_val_loss(tmp_path):
    """Catches seeds counted as variants, a variant named by what all runs share, a run judged by its last value instead of its best, the highest taken."""
    sweep, runs = sweep_of_two_variants(tmp_path)
    chosen, left_out = evaluation.best_runs(sweep, "val/loss", "min")
    assert sorted(chosen) == [("lr=1e-3", runs[1], 2.0), ("lr=3e-3", runs[2], 1.9)]
    assert left_out == [f"{runs[4]}: no val/loss in its csv/metrics.csv (a run that never validated); left out"]
    chosen, _ = evaluation.best_runs(sweep, "val/loss", "max")
    assert sorted(chosen) == [("lr=1e-3", runs[1], 2.6), ("lr=3e-3", runs[3], 2.5)]


def test_the_sweep_tests_only_the_best_runs_and_writes_their_results(tmp_path, monkeypatch, capsys):
    sweep, runs = sweep_of_two_variants(tmp_path)
    tested = []

    def fake_test(ckpt_path, cfg):
        tested.append(Path(ckpt_path).parent.parent)
        return {"test/loss": 1.5 + len(tested)}, None

    monkeypatch.setattr(evaluation, "_test", fake_test)
    cfg = OmegaConf.create({"sweep_dir": str(sweep), "metric": "val/loss", "mode": "min"})
    evaluation.evaluate_sweep(cfg)
    assert sorted(tested) == [runs[1], runs[2]]
    written = json.loads((sweep / evaluation.BEST_RUNS_FILE).read_text())
    assert {(r["variant"], r["run"], r["val/loss"]) for r in written} == {("lr=1e-3", str(runs[1]), 2.0),
                                                                          ("lr=3e-3", str(runs[2]), 1.9)}
    assert "testing the best run of each of 2 variant(s)" in capsys.readouterr().out


@pytest.mark.parametrize("make,mode,message", [
    (lambda p: p / "absent", "min", "is not a directory"),
    (lambda p: p, "min", "holds no run with val/loss"),
    (lambda p: p, "lowest", "mode='lowest': choose min"),
])
def test_a_sweep_dir_without_runs_or_a_bad_mode_is_one_error(tmp_path, make, mode, message):
    with pytest.raises(LabError, match=message):
        evaluation.best_runs(make(tmp_path), "val/loss", mode)
