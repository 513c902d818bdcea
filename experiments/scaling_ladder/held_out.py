"""What limits the held-out check (README.md): for each variant of a ladder's runs, the report's held-out error
(the law fitted on every rung but the largest, at the largest), its spread from seed noise (each rung's seeds
resampled with replacement, 200 times), the same check without the smallest rung, and with a pure power law
(E = 0: a straight line in log-log). Usage: python experiments/scaling_ladder/held_out.py /tmp/ladder_runs"""
import sys
from pathlib import Path

import numpy as np

from lab.report import collect
from lab.report.scaling import RUNG_KEYS, fit_law, group_variants, run_point


def error(rungs: list[list[tuple[float, float]]], law_of) -> float:
    """(predicted - measured) / measured at the last rung, the law fitted on the others' points."""
    smaller = [p for r in rungs[:-1] for p in r]
    predicted = law_of([p[0] for p in smaller], [p[1] for p in smaller])(np.mean([p[0] for p in rungs[-1]]))
    measured = np.mean([p[1] for p in rungs[-1]])
    return (predicted - measured) / measured


def with_e(c, loss):
    return lambda x: float(fit_law(c, loss).loss(x))


def power(c, loss):
    slope, intercept = np.polyfit(np.log(c), np.log(loss), 1)
    return lambda x: float(np.exp(intercept + slope * np.log(x)))


report = collect([Path(sys.argv[1])], budget="finished")
variants, _ = group_variants(report.runs, ignore=(*RUNG_KEYS, "ladder."))
rng = np.random.default_rng(0)
print("| variant | held-out error (fit on r1-r4) | 95% range over resampled seeds | fit on r2-r4 | pure power law, r1-r4 |"
      " seed spread at r5 (std / mean) |")
print("|---|---|---|---|---|---|")
for v in variants:
    by_rung: dict[str, list] = {}
    for p in filter(None, (run_point(r, report.metric) for r in v.runs)):
        by_rung.setdefault(p.rung, []).append((p.flops, p.loss))
    rungs = sorted(by_rung.values(), key=lambda r: np.mean([c for c, _ in r]))
    draws = [error([[r[i] for i in rng.integers(0, len(r), len(r))] for r in rungs], with_e) for _ in range(200)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    top = [loss for _, loss in rungs[-1]]
    print(f"| {v.label} | {error(rungs, with_e):+.2%} | [{lo:+.2%}, {hi:+.2%}] | {error(rungs[1:], with_e):+.2%} | "
          f"{error(rungs, power):+.2%} | {np.std(top, ddof=1) / np.mean(top):.2%} |")
