"""`python -m lab.train -m +experiment=gpt_nano_char +ladder=smoke seed=1,2` end to end: every rung x seed as one
multirun, each recording its counts, tokens and FLOPs (against hand counts), then lab.report's scaling view on it."""
from __future__ import annotations

import json

import pytest
from conftest import TINY_LM, read_metrics, run_dirs, run_module, train

from tests.runtime.cli.test_ladder import gpt_block

SMOKE = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check", "+experiment"))] + [
    "+experiment=gpt_nano_char", "+ladder=smoke", "seed=1,2", "callbacks.progress=null",
    "callbacks.throughput.every_n_batches=1"]
RUNGS = {"xs": (16, 1), "s": (32, 1), "m": (32, 2), "l": (48, 2)}  # conf/ladder/smoke.yaml


@pytest.mark.slow
def test_smoke_ladder_launches_every_rung_records_its_cost_and_reports_the_fit(tmp_path):
    train(["-m", *SMOKE], tmp_path, env={"OMP_NUM_THREADS": "1"})
    runs = run_dirs(tmp_path)
    assert len(runs) == len(RUNGS) * 2
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        final, rung = status["metrics"], next(o.split("=")[1] for o in status["overrides"] if o.startswith("ladder.rung="))
        d, layers = RUNGS[rung]
        n = layers * gpt_block(d) + 2 * d
        assert final["params/non_embedding"] == n  # what the budget was computed from
        vocab, rest = divmod(final["params/total"] - n - 64 * d, d)  # + a row per character, 64 positions
        assert final["params/active"] == final["params/total"] and rest == 0 and 60 < vocab < 100
        config = (run / "config.yaml").read_text()
        steps = int(config.split("max_steps: ")[1].split()[0])
        assert final["cost/tokens"] == steps * 12 * 64  # the whole run, not the best checkpoint's step
        per_token = 6 * (n + vocab * d) + 12 * layers * d * 64  # tied head in the matmuls, positions not; attention
        assert final["cost/train_flops"] == pytest.approx(final["cost/tokens"] * per_token, rel=1e-9)
        flops_seen = [float(r["perf/flops_seen"]) for r in read_metrics(run) if r.get("perf/flops_seen")]
        assert flops_seen and flops_seen[-1] <= final["cost/train_flops"]
    sweep = runs[0].parent
    result = run_module("lab.report", [str(sweep), "--wandb", "off"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    md = (sweep / "report.md").read_text()
    fit_row = md.split("## Scaling fit")[1].split("\n")[4]
    assert fit_row.startswith("| gpt_nano_char | 4 | 2-2 |") and "%" in fit_row.split("|")[-2]  # 4 rungs, held-out error
    assert "val/loss vs training FLOPs" in (sweep / "report.html").read_text()
