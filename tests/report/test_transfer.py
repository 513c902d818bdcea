"""lab.report.transfer on synthetic runs with a known law: the best lr per width is the law's optimum."""
from __future__ import annotations

import math

import pytest
import yaml

from lab.errors import LabError
from lab.report.__main__ import main
from lab.report.transfer import best_lrs, collect_points


def write_runs(root, law, optimizer=lambda lr: {"lr": lr}):
    """A run per (parametrization, width, lr, seed) with val/loss = law(...) + seed noise of 0.001; a nan run.
    optimizer: the run's task.optimizer for the swept lr."""
    i = 0
    for param in ("sp", "mup"):
        for width in (64, 128, 256):
            for k in range(-12, -5):
                for seed in (0, 1):
                    run = root / str(i)
                    (run / "csv").mkdir(parents=True)
                    (run / "config.yaml").write_text(yaml.safe_dump(
                        {"seed": seed, "model": {"d_model": width, "parametrization": param},
                         "task": {"optimizer": optimizer(2.0 ** k)}}))
                    value = law(param, width, k) + 0.001 * seed
                    (run / "csv" / "metrics.csv").write_text(f"step,val/loss\n50,9.0\n100,{value}\n")
                    i += 1


def law(param, width, k):
    """sp: the optimum moves one factor of 2 down per doubling (k* = -6 - log2(width/64)); mup: k* = -8 for every
    width, wider lower; -6 diverges at width 256 under sp."""
    if param == "sp" and width == 256 and k == -6:
        return math.nan
    best = -6 - math.log2(width / 64) if param == "sp" else -8
    return 2.0 + 0.05 * (k - best) ** 2 - (0.1 * math.log2(width) if param == "mup" else 0.0)


def test_best_lr_per_width_follows_the_law(tmp_path):
    """Catches a best lr taken as the highest loss, the last seed only, or a diverged (nan) run winning."""
    write_runs(tmp_path, law)
    best = {(p, w): (math.log2(lr), v) for p, w, lr, v in best_lrs(collect_points([tmp_path])[0])}
    assert {k: lr for k, (lr, _) in best.items()} == {
        ("mup", 64): -8, ("mup", 128): -8, ("mup", 256): -8, ("sp", 64): -6, ("sp", 128): -7, ("sp", 256): -8}
    assert best["sp", 64][1] == pytest.approx(2.0005)  # the mean over the two seeds


def test_cli_writes_the_figure_and_the_table(tmp_path, capsys):
    write_runs(tmp_path / "runs", law)
    main([str(tmp_path / "runs"), "--transfer", "--out", str(tmp_path / "out")])
    md = (tmp_path / "out" / "transfer.md").read_text()
    assert "| sp | 128 | 0.00781 | -7 |" in md and "| sp | 256 |" in md and "nan" in md
    html = (tmp_path / "out" / "transfer.html").read_text()
    assert "log2(Adam lr)" in html and "width 256" in html


def test_a_muon_sweep_is_drawn_against_the_muon_lr(tmp_path):
    """A sweep of task.optimizer.muon_lr at a fixed Adam lr (experiments/mup_transfer/run.sh with OPTIMIZER=muon):
    the curves and the table are against the Muon lr, and say so. Catches the fixed Adam lr taken as the x-axis
    (every run at one lr: one point per width). Runs that vary both lrs are one error line."""
    write_runs(tmp_path / "runs", law, lambda lr: {"lr": 3e-3, "muon_lr": lr})
    main([str(tmp_path / "runs"), "--transfer", "--out", str(tmp_path / "out")])
    md = (tmp_path / "out" / "transfer.md").read_text()
    assert "task.optimizer.muon_lr swept" in md and "| parametrization | width | best Muon lr |" in md
    assert "| sp | 128 | 0.00781 | -7 |" in md and "| mup | 256 | 0.00391 | -8 |" in md
    assert "log2(Muon lr)" in (tmp_path / "out" / "transfer.html").read_text()
    write_runs(tmp_path / "both", law, lambda lr: {"lr": lr, "muon_lr": lr})
    with pytest.raises(LabError, match="vary both task.optimizer.lr and task.optimizer.muon_lr"):
        collect_points([tmp_path / "both"])


def test_runs_without_a_width_or_lr_are_one_error_line(tmp_path):
    """A classifier run or a hand-written config without model.d_model: one line naming the run, not a KeyError."""
    run = tmp_path / "0"
    (run / "csv").mkdir(parents=True)
    (run / "config.yaml").write_text("model: {n_layers: 2}\ntask: {optimizer: {lr: 0.001}}\n")
    (run / "csv" / "metrics.csv").write_text("step,val/loss\n9,2.5\n")
    with pytest.raises(LabError, match="has no model.d_model"):
        collect_points([tmp_path])
