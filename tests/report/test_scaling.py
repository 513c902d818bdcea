"""lab.report.scaling: the law's fit recovers known parameters from synthetic power laws, the compute multiplier
equals its closed form, the verdict reads the intervals, and too few rungs or one size say so."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from lab.errors import LabError
from lab.report.runs import load_run
from lab.report.scaling import Law, bootstrap, fit_law, fit_variant, multiplier, run_point, verdict, view

COMPUTE = np.geomspace(1e12, 1e15, 6)  # six rungs over 1000x


def law_points(e, a, alpha, c=COMPUTE, noise=0.0, seeds=1, rng_seed=0):
    """(compute, loss) of L = e + a * c^-alpha, each rung `seeds` times with multiplicative noise of sd `noise`."""
    rng = np.random.default_rng(rng_seed)
    cs = np.repeat(c, seeds)
    return cs, (e + a * cs ** -alpha) * np.exp(noise * rng.standard_normal(cs.size))


@pytest.mark.parametrize("e,a,alpha", [(1.7, 400.0, 0.2), (2.5, 40.0, 0.1), (0.8, 4000.0, 0.3)])
def test_fit_recovers_the_parameters_of_an_exact_power_law(e, a, alpha):
    """Catches a sign error in the exponent, A not moved back from the centred compute, E and A swapped."""
    law = fit_law(*law_points(e, a, alpha))
    assert law.e == pytest.approx(e, rel=1e-3)
    assert law.alpha == pytest.approx(alpha, rel=1e-3)
    assert math.exp(law.log_a) == pytest.approx(a, rel=1e-2)


def test_fit_with_seed_noise_stays_close_and_its_bootstrap_interval_covers_the_truth():
    """Noise of 0.3% per run, 3 seeds: E and alpha within a few percent, and the bootstrap's 95% intervals
    (resampling each rung's seeds) contain the true values. Catches a bootstrap that resamples nothing."""
    c, loss = law_points(1.7, 400.0, 0.2, noise=0.003, seeds=3, rng_seed=1)
    law = fit_law(c, loss)
    assert law.alpha == pytest.approx(0.2, rel=0.15) and law.e == pytest.approx(1.7, rel=0.05)
    rungs = [list(zip(c[3 * i:3 * i + 3], loss[3 * i:3 * i + 3])) for i in range(len(COMPUTE))]
    draws = bootstrap(rungs, law, draws=60)
    alphas, es = [d.alpha for d in draws], [d.e for d in draws]
    assert min(alphas) < 0.2 < max(alphas) and min(es) < 1.7 < max(es)
    assert np.std(alphas) > 0  # the refits differ


def test_huber_loss_keeps_one_outlier_from_moving_the_fit():
    """One run diverged (loss 30% high): the robust fit still finds alpha; plain least squares would not."""
    c, loss = law_points(1.7, 400.0, 0.2)
    loss[2] *= 1.3
    assert fit_law(c, loss).alpha == pytest.approx(0.2, rel=0.05)


def test_multiplier_is_the_constant_factor_of_a_shifted_law_at_every_scale():
    """A variant that is the baseline with 2x the compute, L_v(C) = L_b(2C): the multiplier is 2 everywhere,
    also extrapolated. Catches the multiplier inverted (0.5) or measured as a loss difference."""
    base = Law(1.7, math.log(400.0), 0.2)
    variant = Law(1.7, math.log(400.0 * 2 ** -0.2), 0.2)
    for c in (1e12, 1e15, 1e17):
        assert multiplier(base, variant, c) == pytest.approx(2.0, rel=1e-9)


def test_multiplier_against_its_closed_form_when_exponents_differ():
    """m(C) = ((L_v(C) - E_b) / A_b)^(-1/alpha_b) / C, by hand; and inf when the variant is below the baseline's E."""
    base, variant = Law(1.7, math.log(400.0), 0.2), Law(1.6, math.log(300.0), 0.18)
    c = 1e14
    lv = 1.6 + 300.0 * c ** -0.18
    assert multiplier(base, variant, c) == pytest.approx(((lv - 1.7) / 400.0) ** (-1 / 0.2) / c, rel=1e-9)
    assert multiplier(base, variant, 1e40) == math.inf  # the variant's loss falls below 1.7: never reached


def test_verdict_reads_the_intervals():
    """persists: 100x interval above 1 and not shrinking; shrinks: closer to 1 at 100x in every draw; no evidence:
    the 100x interval spans 1."""
    rng = np.random.default_rng(0)
    steady = 2.0 * np.exp(0.05 * rng.standard_normal(200))
    assert verdict(steady, steady * np.exp(0.05 * rng.standard_normal(200))) == "gain persists"
    assert verdict(steady, np.sqrt(steady)) == "gain shrinks"
    assert verdict(steady, np.exp(0.5 * rng.standard_normal(200))) == "no evidence"
    assert verdict(1 / steady, 1 / steady) == "loss persists"


def write_point(path, rung, seed, flops, loss, params=1000, variant="base"):
    (path / "csv").mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "ladder": {"rung": rung}, "name": variant,
                                                       "model": {"d_model": params, "ffn": variant},
                                                       "paths": {"output_dir": str(path)}}))
    (path / "csv" / "metrics.csv").write_text(f"step,val/loss\n10,{loss}\n")
    (path / "status.json").write_text(json.dumps({"state": "completed", "metrics": {
        "cost/train_flops": flops, "cost/tokens": flops / 6 / params, "params/non_embedding": params}}))
    (path / "train.log").write_text("finished in 1.0s\n")
    return load_run(path, path.parent)


def test_run_point_reads_status_json_and_the_final_loss(tmp_path):
    p = run_point(write_point(tmp_path / "r", "m", 3, 6e12, 3.25, params=5000), "val/loss")
    assert (p.rung, p.flops, p.loss, p.params, p.tokens) == ("m", 6e12, 3.25, 5000, 2e8)


def test_held_out_error_is_the_fit_without_the_largest_rung_at_it():
    """Exact law on the smaller rungs, the largest rung 5% above it: the held-out error is +-5% (predicted low)."""
    from lab.report.scaling import Point

    c, loss = law_points(1.7, 400.0, 0.2)
    pts = [Point(f"r{i}", "seed=1", 1, 1, ci, li * (1.05 if i == len(c) - 1 else 1)) for i, (ci, li) in enumerate(zip(c, loss))]
    fit = fit_variant("v", pts)
    assert fit.held_out == pytest.approx(1 / 1.05 - 1, abs=1e-3)
    assert fit.draws is None and "seeds" in fit.why  # one seed per rung: no interval, said


def test_too_few_rungs_say_so_instead_of_a_number(tmp_path):
    runs = [write_point(tmp_path / f"{r}{s}", r, s, c, 3.0 - 0.1 * i) for i, (r, c) in enumerate([("s", 1e12), ("m", 1e13)])
            for s in (1, 2)]
    tables, charts = view(runs, "val/loss", None, "auto")
    fit = next(t for t in tables if t.name.startswith("Scaling fit"))
    assert "needs >= 3 rungs for a fit, has 2" in fit.rows[0][3].text
    assert "needs >= 4 rungs" in fit.rows[0][6].text
    assert charts  # the points are still drawn


def test_scaling_view_on_runs_of_one_size_is_one_error_naming_the_fix(tmp_path):
    runs = [write_point(tmp_path / f"r{s}", "m", s, 1e12, 3.0) for s in (1, 2)]
    assert view(runs, "val/loss", None, "auto") == ([], [])
    with pytest.raises(LabError, match=r"--scaling on needs runs of several sizes.*\+ladder=<name>"):
        view(runs, "val/loss", None, "on")


def test_view_fits_each_variant_across_its_rungs_and_compares_with_the_baseline(tmp_path):
    """Two variants (model.ffn apart), 4 rungs x 2 seeds, the fast one exactly the baseline at 3x the compute:
    its multiplier reads ~3x at every rung and extrapolated, verdict persists."""
    base, fast = Law(1.7, math.log(400.0), 0.2), Law(1.7, math.log(400.0 * 3 ** -0.2), 0.2)
    runs = []
    rng = np.random.default_rng(2)
    for name, law in (("fast", fast), ("base", base)):  # the baseline not first: --baseline must pick it
        for i, c in enumerate(np.geomspace(1e12, 1e14, 4)):
            for s in (1, 2):
                loss = float(law.loss(c)) * (1 + 1e-4 * rng.standard_normal())
                runs.append(write_point(tmp_path / f"{name}{i}{s}", f"r{i}", s, c, loss, params=1000 * (i + 1), variant=name))
    for baseline in ("base", "rung=r3 experiment=base"):  # the variant, or one rung of it as lab.report --baseline
        tables, _ = view(runs, "val/loss", baseline, "auto")
        mult = next(t for t in tables if t.name.startswith("Compute multiplier"))
        (row,) = mult.rows
        assert row[0].text == "fast" and row[-1].text == "gain persists"
        assert all(c.value == pytest.approx(3.0, rel=0.05) for c in row[1:-1])
