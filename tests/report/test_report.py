"""lab.report: seeds grouped into variants, statistics against hand computations, runs in progress and
crashed runs shown (never dropped), an interactive page that renders in a real browser."""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY_LM, run_dirs, run_module, train

from lab.errors import LabError
from lab.report import collect
from lab.report.format import fmt, fmt_duration, fmt_pm
from lab.report.stats import compare, holm, pareto_front

# Two single-process jobs differing in depth; W&B disabled: the report needs only what runs write locally.
ARGS = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=6", "trainer.val_check_interval=3", "test=false", "callbacks.progress=null",
    "callbacks.throughput.every_n_batches=2"]


def write_run(path: Path, config: dict, rows: list[dict], params: int | None = None, status: dict | None = None,
              finished: bool = True, newline_at_end: bool = True) -> Path:
    """A run directory as lab.train writes it: config.yaml, csv/metrics.csv, csv/hparams.yaml, train.log."""
    (path / "csv").mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"paths": {"output_dir": str(path)}, **config}))
    header = sorted({k for r in rows for k in r}, key=lambda k: (k != "step", k))
    text = ",".join(header) + "\n" + "\n".join(",".join(str(r.get(k, "")) for k in header) for r in rows)
    (path / "csv" / "metrics.csv").write_text(text + ("\n" if newline_at_end else ""))
    if params is not None:
        (path / "csv" / "hparams.yaml").write_text(f"params/total: {params}\nparams/active: {params}\n")
    (path / "train.log").write_text("... finished in 3.0s\n" if finished else "... step 3\n")
    if status is not None:
        (path / "status.json").write_text(json.dumps(status))
    return path


def t_pvalue(t: float, df: float) -> float:
    """Two-sided p of Student's t, by integrating its density (Simpson, 20,000 panels): independent of scipy."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    n, a, b = 20000, 0.0, abs(t)
    h = (b - a) / n
    area = f(a) + f(b) + sum((4 if i % 2 else 2) * f(a + i * h) for i in range(1, n))
    return 1 - 2 * area * h / 3


# ---------------------------------------------------------------------------------------------- statistics

def test_paired_test_when_seeds_match_equals_the_hand_computation():
    base = {"1": 3.0, "2": 3.2, "3": 3.1}
    variant = {"1": 2.8, "2": 2.9, "3": 3.0}  # differences -0.2, -0.3, -0.1: mean -0.2, sd 0.1
    t = -0.2 / (0.1 / math.sqrt(3))
    c = compare(base, variant)
    assert c.test == "paired t-test" and c.diff == pytest.approx(-0.2)
    assert c.p == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-6)  # df = 2 has a closed form
    assert c.p == pytest.approx(t_pvalue(t, 2), rel=1e-4) and not c.significant  # p = 0.074


def test_welch_test_when_seeds_differ_equals_the_hand_computation():
    base = {"1": 3.0, "2": 3.2, "3": 3.1, "4": 3.3}
    variant = {"5": 2.5, "6": 2.9, "7": 2.7}
    va, vb = 0.0166667, 0.04  # sample variances (hand: sum of squares / (n - 1))
    se2 = va / 4 + vb / 3
    t = (2.7 - 3.15) / math.sqrt(se2)
    df = se2**2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)  # Welch-Satterthwaite
    c = compare(base, variant)
    assert c.test == "Welch t-test" and c.diff == pytest.approx(-0.45)
    assert c.p == pytest.approx(t_pvalue(t, df), rel=1e-3) and c.significant  # p = 0.031


@pytest.mark.parametrize("base, variant, why", [
    ({"1": 3.0}, {"1": 2.0}, "no seeds, no test"),
    ({"1": 3.0, "2": 3.0}, {"3": 2.0, "4": 2.0}, "no variance, no test"),
], ids=["n=1", "zero-variance"])
def test_no_test_is_claimed_without_seed_variation(base, variant, why):
    c = compare(base, variant)
    assert c.p is None and c.test == why and not c.significant


def test_pareto_front_keeps_only_points_nothing_beats_on_both_axes():
    # (active params, loss): (3, 2.0) is beaten by (2, 1.9); (4, 1.5) and (1, 2.5) trade off.
    pts = [(1, 2.5), (2, 1.9), (3, 2.0), (4, 1.5), (5, 1.5)]
    assert pareto_front(pts, minimize_y=True, minimize_x=True) == [0, 1, 3]
    # throughput (higher is better) against loss: (5, 1.5) now dominates (4, 1.5) and everything slower
    assert pareto_front(pts, minimize_y=True, minimize_x=False) == [4]


@pytest.mark.parametrize("value, text", [
    (18880.3, "18,880"), (3.14159, "3.142"), (0.0003, "0.0003"), (1.2e-7, "1.2e-07"), (12345678, "12,345,678"),
    (None, ""), (0.5, "0.5")], ids=lambda x: str(x))
def test_numbers_are_formatted_for_people(value, text):
    assert fmt(value) == text


@pytest.mark.parametrize("seconds, text", [(95.3, "1m35s"), (4000, "1h07m"), (7, "7s"), (None, "")], ids=str)
def test_durations_are_formatted_for_people(seconds, text):
    assert fmt_duration(seconds) == text


def test_mean_and_std_share_their_decimals():
    assert fmt_pm(3.46, 0.026) == "3.460 ± 0.026"
    assert fmt_pm(27410.0, 3782.0) == "27,410 ± 3,782"
    assert fmt_pm(3.46, None) == "3.46"


# ---------------------------------------------------------------------------------------------- grouping

def _ablation(root: Path, lrs=(1e-3, 3e-3), seeds=(1, 2, 3), metric="val/loss", values=None) -> Path:
    """Runs of an lr ablation, 3 seeds each, in per-job dirs as a multirun writes them."""
    job = 0
    for lr in lrs:
        for seed in seeds:
            final = values[(lr, seed)] if values else 3.0 + lr * 100 + seed / 100
            rows = [{"step": 0, "train/loss": 5.0}, {"step": 9, metric: final + 0.5, "train/loss": 4.0},
                    {"step": 19, metric: final, "train/loss": 3.5, "perf/tokens_per_s_global": 1000.0 * seed}]
            write_run(root / str(job), {"name": f"abl/lr{lr}/seed{seed}", "seed": seed, "logger": {"wandb": {"id": f"w{job}"}}, "data": {"seed": seed, "cache_dir": f"/c{job}"},
                                        "task": {"optimizer": {"lr": lr}}, "optimized_metric": metric}, rows, params=1000)
            job += 1
    return root


def test_seeds_are_grouped_and_real_choices_are_not(tmp_path):
    report = collect([_ablation(tmp_path)])
    assert [len(v.runs) for v in report.variants] == [3, 3]
    assert report.keys == ["task.optimizer.lr"]  # seed, data.seed, name, W&B id, per-job cache dir: not choices
    assert sorted(v.label for v in report.variants) == ["lr=0.001", "lr=0.003"]


def test_variants_take_their_name_when_names_tell_them_apart(tmp_path):
    for i, (name, lr) in enumerate([("base", 1e-3), ("base", 1e-3), ("fast", 3e-3)]):
        write_run(tmp_path / str(i), {"name": name, "seed": i, "lr": lr}, [{"step": 9, "val/loss": 2.0 + i}])
    assert sorted(v.label for v in collect([tmp_path]).variants) == ["base", "fast"]


def test_ignored_keys_group_runs_across_lab_versions_and_the_report_names_them(tmp_path):
    """Seeds of one variant written by two lab versions (a class path moved, a setting added): they split into
    variants unless --ignore sets those keys aside; the report then names each ignored key and its values, and an
    --ignore entry that matches nothing is said too."""
    for seed, (logger, extra) in enumerate([("lab.runtime.metrics_csv.X", {}), ("lab.runtime.trainer.metrics_csv.X",
                                            {"rope_base": 10000.0}), ("lab.runtime.trainer.metrics_csv.X", {"rope_base": 10000.0})]):
        for lr in (1e-3, 3e-3):
            write_run(tmp_path / f"lr{lr}-{seed}", {"seed": seed, "logger": {"csv": {"_target_": logger}},
                                                   "model": {"n_layers": 2, **extra}, "task": {"lr": lr}},
                      [{"step": 9, "val/loss": 3.0 + lr * 100 + seed / 100}])
    assert sorted(len(v.runs) for v in collect([tmp_path]).variants) == [1, 1, 2, 2]  # version x lr
    report = collect([tmp_path], ignore=("logger.", "model.rope_base", "data.shard_mb", "task.l"))  # no dot: the key
    assert report.keys == ["task.lr"] and sorted(len(v.runs) for v in report.variants) == [3, 3]
    assert report.variants[0].stat("val/loss").mean == pytest.approx(3.1 + 0.01)  # lr 1e-3: seeds 0, 1, 2
    note = next(line for line in report.intro() if "ignored" in line)
    assert note.endswith("Grouped across 2 ignored key(s) whose values differ between runs: logger.csv._target_ "
                    "('lab.runtime.metrics_csv.X', 'lab.runtime.trainer.metrics_csv.X'); model.rope_base (10000.0, None); "
                    "--ignore data.shard_mb task.l matched no key that varies.")
    assert "ignored" not in " ".join(collect([tmp_path]).intro())  # without --ignore, nothing said


def test_summary_numbers_equal_a_hand_computation(tmp_path):
    values = {(1e-3, 1): 3.0, (1e-3, 2): 3.2, (1e-3, 3): 3.1, (3e-3, 1): 2.8, (3e-3, 2): 2.9, (3e-3, 3): 3.0}
    report = collect([_ablation(tmp_path, values=values)])
    best, base = report.variants  # sorted: lower val/loss first
    assert best.label == "lr=0.003" and report.baseline.label == "lr=0.001"
    summary = report.tables[0]
    row = dict(zip(summary.header, summary.rows[0]))
    assert row["val/loss (final at step 19, mean ± std)"].value == pytest.approx(2.9)
    assert row["val/loss (final at step 19, mean ± std)"].text == "2.90 ± 0.10"
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, df=2) = 0.95 / sqrt(2 * 0.975 * 0.025)
    assert row["95% interval"].text == f"[{fmt(2.9 - half)}, {fmt(2.9 + half)}]"
    assert row[f"Δ vs {base.label} [95% CI]"].value == pytest.approx(-0.2)
    assert row["p"].text == "p=0.074" and row["beyond seed noise?"].text == "no (paired t-test)"
    assert row["tokens/s (median)"].text == "2,000 tok/s"  # median of the seeds' 1000, 2000, 3000
    assert row["wall time (median, all attempts)"].text == "3s"  # train.log: "finished in 3.0s"
    assert summary.highlight == {0}


def test_higher_is_better_metrics_rank_the_other_way(tmp_path):
    values = {(1e-3, s): 0.7 + s / 100 for s in (1, 2)} | {(3e-3, s): 0.6 + s / 100 for s in (1, 2)}
    report = collect([_ablation(tmp_path, seeds=(1, 2), metric="val/acc", values=values)])
    assert [v.label for v in report.variants] == ["lr=0.001", "lr=0.003"]


def test_baseline_and_metric_can_be_chosen_and_bad_choices_are_one_line(tmp_path):
    root = _ablation(tmp_path)
    assert collect([root], baseline="lr=0.003").baseline.label == "lr=0.003"
    result = run_module("lab.report", [str(root), "--baseline", "nope"], tmp_path)
    assert result.returncode == 2 and "--baseline 'nope' matches 0 variants" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_module("lab.report", [str(root), "--metric", "val/bleu"], tmp_path)
    assert result.returncode == 2 and "--metric val/bleu was not logged" in result.stderr


# ---------------------------------------------------------------------------------------------- run states

def test_runs_in_progress_crashed_failed_and_empty_are_all_accounted_for(tmp_path):
    cfg = {"name": "x", "optimized_metric": "val/loss", "seed": 1}
    write_run(tmp_path / "done", {**cfg, "model": {"d": 1}}, [{"step": 9, "val/loss": 2.0}])
    # still writing: the last line has no newline yet (maybe cut mid-number) and is not read
    write_run(tmp_path / "live", {**cfg, "model": {"d": 2}}, [{"step": 9, "val/loss": 2.5}, {"step": 19, "val/loss": 2.1}],
              finished=False, newline_at_end=False)
    crashed = write_run(tmp_path / "crashed", {**cfg, "model": {"d": 3}}, [{"step": 9, "val/loss": 3.0}], finished=False)
    old = time.time() - 3600
    for f in crashed.rglob("*"):
        os.utime(f, (old, old))
    write_run(tmp_path / "failed", {**cfg, "model": {"d": 4}}, [{"step": 9, "val/loss": 3.5}], finished=False,
              status={"status": "failed", "error": "error: model.n_heads=3 does not divide d_model=64"})
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.yaml").write_text("name: x\n")
    report = collect([tmp_path])
    status = {r.name: (r.status, r.last_step) for r in report.runs}
    assert status == {"done": ("finished", 9), "live": ("running", 9), "crashed": ("stopped", 9), "failed": ("failed", 9)}
    assert [s.path.name for s in report.skipped] == ["empty"]
    md = (run_module("lab.report", [str(tmp_path)], tmp_path), (tmp_path / "report.md").read_text())[1]
    assert "| failed: error: model.n_heads=3 does not divide d_model=64 |" in md
    assert re.search(r"stopped: no end recorded and nothing written for 3,6\d\ds \(allowed 60s\): killed or crashed", md)
    assert "## Not shown" in md and "no csv/metrics.csv yet" in md


def test_runs_of_different_tasks_or_metrics_are_refused_and_runs_lacking_the_metric_named(tmp_path):
    """Issue 48: an LM run and a classifier run had their val/loss ranked against each other (the classifier
    bolded best); with --metric val/acc the run that never logged it was left blank without a note."""
    lm = {"task": {"_target_": "lab.tasks.language_model.LanguageModelTask"}, "optimized_metric": "val/loss"}
    write_run(tmp_path / "tasks" / "lm", lm, [{"step": 9, "val/loss": 2.0}])
    write_run(tmp_path / "tasks" / "clf", {"task": {"_target_": "lab.tasks.classification.ClassificationTask"},
                                           "optimized_metric": "val/acc"}, [{"step": 9, "val/acc": 0.8, "val/loss": 0.5}])
    result = run_module("lab.report", [str(tmp_path / "tasks")], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and not (tmp_path / "tasks" / "report.md").exists()
    assert ("error: these runs are of 2 tasks (ClassificationTask: 1 run(s) such as clf, LanguageModelTask: 1 run(s) "
            "such as lm); their metrics are not comparable") in result.stderr
    for d, metric in (("a", "val/loss"), ("b", "val/ppl")):  # one task, two metrics optimised
        write_run(tmp_path / "metrics" / d, {**lm, "d": d, "optimized_metric": metric}, [{"step": 9, "val/loss": 2.0}])
    with pytest.raises(LabError, match=r"these runs optimise different metrics \(val/loss, val/ppl\); pass --metric"):
        collect([tmp_path / "metrics"])
    write_run(tmp_path / "metrics" / "c", {**lm, "d": "c"}, [{"step": 9, "val/loss": 2.1, "val/ppl": 8.0}])
    report = collect([tmp_path / "metrics"], metric="val/ppl")
    assert "val/ppl was not logged by 2 of 3 runs: a, b." in report.intro()


def test_files_it_did_not_write_are_not_replaced(tmp_path):
    root = _ablation(tmp_path / "runs")
    (root / "report.md").write_text("my notes\n")
    result = run_module("lab.report", [str(root)], tmp_path)
    assert result.returncode == 2 and "was not written by lab.report" in result.stderr
    assert (root / "report.md").read_text() == "my notes\n"
    assert run_module("lab.report", [str(root), "--force"], tmp_path).returncode == 0
    assert run_module("lab.report", [str(root)], tmp_path).returncode == 0  # its own files it replaces


def test_tables_go_to_wandb_under_the_sweeps_group(tmp_path):
    root = _ablation(tmp_path / "sweep")
    (root / "multirun.yaml").write_text("hydra: {}\n")  # a multirun directory, as Hydra leaves it
    env = {"WANDB_MODE": "offline", "WANDB_API_KEY": ""}
    result = run_module("lab.report", [str(root), "--wandb", "on"], tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert f"W&B: report tables logged to group abl/lr0.001/seed1/{root.name} (offline)" in result.stderr
    assert not (root / "wandb").exists()  # the report's own run is in no run directory and no glob of them
    assert collect([Path(f"{root}/*")]).skipped == []
    (offline,) = (root / ".lab_report" / "wandb").glob("offline-run-*")
    tables = sorted(p.name.split("_")[0] for p in (offline / "files" / "media" / "table" / "report").iterdir())
    assert tables == ["config", "metrics", "runs", "summary"]
    assert f"abl/lr0.001/seed1/{root.name}".encode() in next(offline.glob("run-*.wandb")).read_bytes()
    # a second render (as --watch does) updates the same W&B run, not a new one in the group
    assert run_module("lab.report", [str(root), "--wandb", "on"], tmp_path, env=env).returncode == 0
    ids = {f.name for f in (root / ".lab_report" / "wandb").glob("offline-run-*/run-*.wandb")}
    assert len(list((root / ".lab_report" / "wandb").glob("offline-run-*"))) == 2 and len(ids) == 1, ids


def test_globs_select_runs(tmp_path):
    root = _ablation(tmp_path / "runs")
    report = collect([Path(f"{root}/[01]")])
    assert len(report.runs) == 2


def test_moe_runs_get_expert_load_heatmaps_and_the_dropped_share(tmp_path):
    for i in range(2):
        rows = [{"step": s, "val/loss": 3.0 - s / 10, **{f"train/moe/decoder.{layer}/expert_{e}": (e + 1) / 10
                                                           for layer in range(2) for e in range(4)},
                 "train/moe/decoder.0/dropped": 0.1, "train/moe/decoder.1/dropped": 0.3} for s in (4, 9)]
        write_run(tmp_path / str(i), {"name": "m", "optimized_metric": "val/loss", "model": {"n_layers": i + 1}}, rows)
    report = collect([tmp_path])
    (moe,) = [charts for title, charts in report.sections if title == "MoE routing"]
    titles = [t for t, _ in moe]
    assert sum(t.endswith("expert load") for t in titles) == 4  # 2 variants x 2 layers
    dropped = dict(moe)["dropped share"]
    assert list(dropped.data[0].y) == pytest.approx([0.2, 0.2])  # mean over the two layers


# ---------------------------------------------------------------------------------------------- real runs, real browser

@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    train(["-m", *ARGS, "model.n_layers=1,2", "seed=1,2"], runs)
    (sweep_dir,) = list((runs / "gpt_nano_char" / "multirun").iterdir())
    result = run_module("lab.report", [str(sweep_dir)], runs)
    assert result.returncode == 0, result.stderr
    assert "4 runs (4 finished) in 2 variants" in result.stderr
    return sweep_dir


def _columns(run) -> list[str]:
    with open(run / "csv" / "metrics.csv") as f:
        return [c for c in next(csv.reader(f)) if c not in ("step", "epoch")]


def test_report_of_a_real_sweep_has_every_run_and_metric(sweep):
    html = (sweep / "report.html").read_text()
    md = (sweep / "report.md").read_text()
    runs = run_dirs(sweep)
    assert len(runs) == 4
    for run in runs:
        assert f"<tr><td>{run.name}</td>" in html and f"\n| {run.name} |" in md
        for column in _columns(run):
            assert f"<th>{column}</th>" in html or f"<th>{column} (median)</th>" in html, column  # speeds: median
    assert "| n_layers=1 | 1 | 2 |" in md or "| **n_layers=1** | **1** | **2** |" in md
    for expected in ("train/loss", "val/loss", "perf/tokens_per_s", "val/loss by model.n_layers"):
        assert f'title="{expected}"' in html
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="?(https?:)?//', html)  # self-contained: opens offline


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=20000"]


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium; "
                                                "`make test` installs it in CI)")
def test_browser_renders_every_chart_and_shows_the_csvs_numbers(sweep, tmp_path):
    """The page as a browser leaves it after its scripts ran: every chart drawn, no script error, and the
    summary's numbers are the CSVs' (mean of the seeds' final val/loss). A screenshot is kept."""
    page = (sweep / "report.html").as_uri()
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", page],
                         capture_output=True, text=True, timeout=120).stdout
    body = re.search(r'<body data-charts="(\d+)" data-rendered="(\d+)"', dom)
    assert body and int(body.group(1)) >= 8 and body.group(1) == body.group(2), body and body.groups()
    assert re.search(r'<pre id="js-errors"></pre>', dom), "script errors in the page"
    assert dom.count('class="main-svg"') >= int(body.group(1))  # plotly drew an SVG per chart
    finals: dict[str, list[float]] = {}
    for run in run_dirs(sweep):
        with open(run / "csv" / "metrics.csv") as f:
            values = [float(r["val/loss"]) for r in csv.DictReader(f) if r["val/loss"]]
        layers = yaml.safe_load((run / "config.yaml").read_text())["model"]["n_layers"]
        finals.setdefault(f"n_layers={layers}", []).append(values[-1])
    summary = re.search(r'<table class="summary">.*?</table>', dom, re.S).group(0)
    for label, values in finals.items():
        row = re.search(rf"<tr[^>]*><td>{label}</td>.*?</tr>", summary, re.S).group(0)
        shown = [float(v) for v in re.findall(r'data-value="([-0-9.e]+)"', row)]
        assert any(v == pytest.approx(sum(values) / len(values), rel=1e-9) for v in shown), (label, shown, values)
    artifacts = Path(os.environ.get("LAB_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report.png"
    subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p2'}", "--window-size=1300,2400",
                    f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 50_000


def test_sweep_view_joins_means_only_across_variants_that_agree_on_the_other_choices():
    from lab.report.charts import sweep_view
    from lab.report.runs import Run
    from lab.report.variants import Variant

    # a 2 x 2 sweep: lr in {1, 3} x layers in {2, 4}; loss = lr + 10 * layers, one seed each
    variants = []
    for lr in (1, 3):
        for layers in (2, 4):
            run = Run(f"lr{lr}-l{layers}", Path("."), {}, [], [{"step": 1.0, "val/loss": lr + 10.0 * layers}])
            variants.append(Variant(f"lr={lr} layers={layers}", {"opt.lr": lr, "model.layers": layers}, [run]))
    charts = dict(sweep_view(variants, ["opt.lr", "model.layers"], "val/loss"))
    by_lr = {t.name: (list(t.x), list(t.y)) for t in charts["val/loss by opt.lr"].data if t.name != "runs"}
    assert by_lr == {"mean, layers=2": ([1, 3], [21.0, 23.0]), "mean, layers=4": ([1, 3], [41.0, 43.0])}
    by_layers = {t.name: (list(t.x), list(t.y)) for t in charts["val/loss by model.layers"].data if t.name != "runs"}
    assert by_layers == {"mean, lr=1": ([2, 4], [21.0, 41.0]), "mean, lr=3": ([2, 4], [23.0, 43.0])}


# ---------------------------------------------------------------------------------------------- documented commands

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").glob("*/run.sh")),
        *sorted((ROOT / "experiments").glob("*/README.md"))]
COMMAND = re.compile(r"(?:python|\$PY) -m lab\.report (.+)$")
ABSOLUTE_IN_DOCS = re.compile(r"(?<![\w.])/tmp/")  # absolute runs dirs READMEs name: recreated under tmp_path


def documented_commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for line in doc.read_text().replace("\\\n", " ").splitlines():  # continued lines joined
            if (m := COMMAND.search(line)) and "<multirun dir" not in line:
                found.append((f"{doc.relative_to(ROOT)}: {m.group(1)[:60]}", m.group(1)))
    return found


def _shell_words(args: str, cwd: Path, noglob: bool) -> list[str]:
    """The arguments bash passes for `args` (variables, quotes, comments, and globs unless noglob)."""
    script = ("set -f; " if noglob else "") + f"printf '%s\\0' {args}"
    out = subprocess.run(["bash", "-c", script], cwd=cwd, env={"PATH": os.environ["PATH"], "RUNS": "runs"},
                         capture_output=True, text=True, check=True).stdout
    return [w for w in out.split("\0")[:-1] if w != "--watch"]  # --watch is tested on its own


def _runs_for(word: str, n_paths: int, options: dict[str, str], cwd: Path) -> None:
    """Synthetic runs where a documented path or glob expects them: 2 variants x 2 seeds."""
    path = Path(word) if Path(word).is_absolute() else cwd / word
    baseline, metric = options.get("--baseline"), options.get("--metric", "val/loss")
    transfer = options.get("--transfer") is not None  # lab.report.transfer reads each run's width and lr
    cfg = lambda name, seed, depth: {"name": name, "seed": seed, "model": {"n_layers": depth, **({"d_model": 32 * depth} if transfer else {})},  # noqa: E731
                                     "optimized_metric": "val/loss", **({"task": {"optimizer": {"lr": 1e-3}}} if transfer else {})}
    rows = lambda seed, depth: [{"step": 9, "val/loss": 3.0 - depth / 10 + seed / 100, metric: 20.0 + depth + seed / 10}]  # noqa: E731
    if "*" in word:  # every * a directory level of its own: variant-seed names
        for depth, name in ((1, baseline or "base"), (2, "other")):
            for seed in (1, 2):
                write_run(Path(str(path).replace("*", f"{name}-{seed}")), cfg(name, seed, depth), rows(seed, depth))
    elif n_paths == 1:  # a multirun directory, as Hydra writes it
        path.mkdir(parents=True)
        (path / "multirun.yaml").write_text("hydra: {}\n")
        for job, (depth, seed) in enumerate((d, s) for d in (1, 2) for s in (1, 2)):
            write_run(path / str(job), cfg("x", seed, depth), rows(seed, depth))
    else:  # one run directory per path
        write_run(path, cfg("x", 1, len(list(path.parent.parent.rglob("config.yaml")))), rows(1, 1))


@pytest.mark.parametrize("args", [a for _, a in documented_commands()], ids=[i for i, _ in documented_commands()])
def test_every_documented_report_command_works_as_written(args, tmp_path, monkeypatch):
    """Each `python -m lab.report ...` in README, docs, experiments' READMEs and run.sh, run as the shell
    would (relative paths from a cwd, quoted globs, shell globs, absolute paths), over runs placed where it
    expects them: a report is written where the docs say."""
    from lab.report.__main__ import main

    cwd = tmp_path / "work"
    cwd.mkdir()
    args = ABSOLUTE_IN_DOCS.sub(f"{tmp_path}/abs/", args.replace("<time>", "2026-11-21_23-18-26_630852"))  # never the real /tmp
    words = _shell_words(args, cwd, noglob=True)
    options = {w: words[i + 1] for i, w in enumerate(words) if w.startswith("--") and i + 1 < len(words)}
    paths = [w for i, w in enumerate(words) if not w.startswith("--") and not (i and words[i - 1] in options)]
    if "--transfer" in words:
        options["--transfer"] = ""  # a flag: _runs_for gives the runs a width and an lr
    for p in paths:
        _runs_for(p, len(paths), options, cwd)
    monkeypatch.chdir(cwd)
    main([*_shell_words(args, cwd, noglob=False), "--wandb", "off"])
    out = Path(options["--out"]) if "--out" in options else (Path(paths[0]) if len(paths) == 1 and "*" not in paths[0] else Path("."))
    if "--transfer" in options:  # the figure and the best-lr table instead of the report: a row per width
        assert len(re.findall(r"^\| sp \| \d+ \|", (out / "transfer.md").read_text(), re.M)) >= 2
        return
    md = (out / "report.md").read_text()
    made = len(list(tmp_path.rglob("config.yaml")))  # every run _runs_for placed is read, none twice
    assert re.search(rf"# lab report: 2 variants, {made} runs in ", md), md[:300]
    if "--baseline" in options:
        assert f"Baseline: {options['--baseline']}." in md


def test_relative_paths_work_from_any_cwd_and_give_the_same_names(tmp_path, monkeypatch):
    root = _ablation(tmp_path / "runs" / "abl")
    (root / "multirun.yaml").write_text("hydra: {}\n")  # a glob `abl/*` matches it: not a run, not an error
    monkeypatch.chdir(tmp_path / "runs")
    names = [r.name for r in collect([Path("abl")]).runs]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [r.name for r in collect([Path("../runs/abl")]).runs] == names == [str(i) for i in range(6)]
    assert [r.name for r in collect([Path("../runs/abl/*")]).runs] == names
    assert [r.name for r in collect([Path("../runs/abl/0"), Path("../runs/abl/3")]).runs] == ["0", "3"]


# ---------------------------------------------------------------------------------------------- common budget

def _curve_run(path: Path, variant: str, seed: int, last: int, slope: float, status: dict | None = None,
               jitter: float = 0.01) -> Path:
    """val/loss every 100 steps up to `last`, falling with `slope` per step; train/loss every 50."""
    rows = [{"step": s, "train/loss": 5.0 - slope * s, "perf/tokens_seen": 768.0 * s} for s in range(50, last + 1, 50)]
    for r in rows:
        if r["step"] % 100 == 0:
            r["val/loss"] = 4.0 - slope * r["step"] + seed * jitter
    return write_run(path, {"name": "pos", "seed": seed, "model": {"positions": variant}, "optimized_metric": "val/loss"},
                     rows, finished=status is None, status=status)


def test_an_interrupted_run_sets_the_common_step_and_is_marked_where_its_numbers_appear(tmp_path):
    """2 variants x 3 seeds to step 400; one rotary job interrupted at step 200 and resumed once before."""
    for job, (variant, seed) in enumerate((v, s) for v in ("learned", "rotary") for s in (1, 2, 3)):
        stopped = variant == "rotary" and seed == 3
        _curve_run(tmp_path / str(job), variant, seed, 200 if stopped else 400, 0.004 if variant == "rotary" else 0.003,
                   status={"state": "interrupted", "attempts": 2} if stopped else None)
    report = collect([tmp_path])
    assert report.budget.step == 200
    assert "Compared at step 200" in report.budget_note and "1 of 6 runs stopped before the furthest (step 400)" in report.budget_note
    rotary = next(v for v in report.variants if v.label == "positions=rotary")
    hand = [4.0 - 0.004 * 200 + s / 100 for s in (1, 2, 3)]  # every seed at step 200, not the others' step 400
    assert rotary.stat("val/loss").mean == pytest.approx(sum(hand) / 3)
    summary = report.tables[0]
    row = dict(zip(summary.header, (c.text for c in summary.rows[0])))
    assert row["runs"] == "2 finished, 1 interrupted (1 resumed)"
    runs = {r[0].text: dict(zip(report.tables[2].header, (c.text for c in r))) for r in report.tables[2].rows}
    assert runs["5"]["status"] == "interrupted (resumed: 2 attempts)" and runs["5"]["read at step"] == "200"
    assert runs["0"]["read at step"] == "200" and runs["0"]["val/loss (last logged)"] == fmt(4.0 - 0.003 * 400 + 0.01)
    # curves: n per point, a dotted line at the compared step, each seed's curve marked
    (fig,) = [f for t, f in dict(report.sections)["Curves"] if t == "val/loss"]
    mean = next(t for t in fig.data if t.meta["kind"] == "mean" and t.name.startswith("positions=rotary"))
    assert mean.name == "positions=rotary (n=2-3)" and dict(zip(mean.x, mean.customdata)) == {100: 3, 200: 3, 300: 2, 400: 2}
    assert any(t.name.endswith("[interrupted, resumed]") for t in fig.data if t.meta and t.meta["kind"] == "seed")
    assert fig.layout.shapes[0].x0 == 200


def test_mid_sweep_watch_compares_at_the_step_both_reached_not_at_their_ends(tmp_path):
    """One variant finished (step 400), the other's runs still at step 100: equal curves, so no difference
    may be claimed (read at their ends, 400 vs 100, the further-trained one looks far better)."""
    for job, (variant, seed) in enumerate((v, s) for v in ("learned", "rotary") for s in (1, 2, 3)):
        _curve_run(tmp_path / str(job), variant, seed, 400 if variant == "learned" else 100, 0.003,
                   status=None if variant == "learned" else {"state": "running"}, jitter=0.01 if variant == "learned" else 0.015)
    report = collect([tmp_path])
    assert report.budget.step == 100
    rows = {r[0].text: dict(zip(report.tables[0].header, r)) for r in report.tables[0].rows}
    other = rows["positions=rotary"]
    # at step 100 the per-seed differences are 0.005, 0.010, 0.015: mean 0.01, sd 0.005, t = 3.46, p = 0.074
    assert other["Δ vs positions=learned [95% CI]"].value == pytest.approx(0.01)
    assert other["p"].value == pytest.approx(t_pvalue(0.01 / (0.005 / math.sqrt(3)), 2), rel=1e-4)
    assert other["beyond seed noise?"].text == "no (paired t-test)"
    ends = collect([tmp_path], budget="finished")  # finished runs only: the running ones are listed as left out
    assert {r.config["model.positions"] for r in ends.runs} == {"learned"} and len(ends.skipped) == 3
    assert all("not finished: left out by --budget finished" in s.reason for s in ends.skipped)


def test_values_read_at_different_steps_are_never_tested(tmp_path):
    """Runs that validate at different steps: at the common step 300, one variant's value is from step 300
    and the other's from step 200 (its last validation before it): no test is stated."""
    for job, (every, seed) in enumerate((e, s) for e in (100, 120) for s in (1, 2, 3)):
        rows = [{"step": s, "train/loss": 4.0} for s in range(10, 301, 10)]
        for r in rows:
            if r["step"] % every == 0:
                r["val/loss"] = 3.0 - r["step"] / 1000 + seed * seed / 100
        write_run(tmp_path / str(job), {"name": "v", "seed": seed, "val_every": every}, rows)
    report = collect([tmp_path])
    assert report.budget.step == 300
    texts = [dict(zip(report.tables[0].header, (c.text for c in r))) for r in report.tables[0].rows]
    assert [t["beyond seed noise?"] for t in texts if t["beyond seed noise?"] != ""] == ["no test: values at steps 240-300"]


def test_best_value_is_the_best_up_to_the_common_step(tmp_path):
    for seed in (1, 2):
        rows = [{"step": s, "val/loss": v + seed / 100} for s, v in ((100, 3.0), (200, 2.5), (300, 2.7), (400, 2.0))]
        write_run(tmp_path / f"a{seed}", {"name": "a", "seed": seed, "d": 1}, rows)
        write_run(tmp_path / f"b{seed}", {"name": "b", "seed": seed, "d": 2}, rows[:3])  # stopped at 300
    report = collect([tmp_path], which="best")
    assert report.budget.step == 300
    assert {v.label: v.values("val/loss") for v in report.variants} == {
        "a": {"seed=1": 2.51, "seed=2": 2.52}, "b": {"seed=1": 2.51, "seed=2": 2.52}}  # step 200's, not 400's 2.0


def test_curves_by_tokens_and_time_interpolate_what_the_run_logged():
    from lab.report.charts import x_at
    from lab.report.runs import Run

    rows = [{"step": 10.0, "perf/tokens_seen": 1000.0, "perf/train_s": 2.0}, {"step": 20.0, "perf/tokens_seen": 2000.0,
                                                                              "perf/train_s": 5.0}]
    run = Run("r", Path("."), {}, [], rows)
    steps = [0.0, 5.0, 10.0, 15.0, 20.0, 30.0]
    assert x_at(run, "tokens", steps) == pytest.approx([0, 500, 1000, 1500, 2000, 3000])  # 30: the overall rate
    assert x_at(run, "time", steps) == pytest.approx([0, 1, 2, 3.5, 5, 7.5])
    assert x_at(Run("r", Path("."), {}, [], [{"step": 1.0, "val/loss": 2.0}]), "tokens", steps) is None


def test_paired_interval_and_effect_size_equal_the_hand_computation():
    c = compare({"1": 3.0, "2": 3.2, "3": 3.1}, {"1": 2.8, "2": 2.9, "3": 3.0})  # differences -0.2, -0.3, -0.1
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert c.interval == pytest.approx((-0.2 - half, -0.2 + half)) and c.effect == pytest.approx(-2.0)  # -0.2 / 0.1
    assert c.effect_name == "d_z"


def test_welch_interval_and_effect_size_equal_the_hand_computation():
    from scipy import stats as st

    c = compare({"1": 3.0, "2": 3.2, "3": 3.1, "4": 3.3}, {"5": 2.5, "6": 2.9, "7": 2.7})
    va, vb = 0.05 / 3, 0.08 / 2  # sums of squares / (n - 1)
    se = math.sqrt(va / 4 + vb / 3)
    df = (va / 4 + vb / 3) ** 2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)
    half = st.t.ppf(0.975, df) * se
    assert c.interval == pytest.approx((-0.45 - half, -0.45 + half))
    assert c.effect == pytest.approx(-0.45 / math.sqrt((3 * va + 2 * vb) / 5)) and c.effect_name == "d"


def test_holm_adjustment_equals_the_hand_computation():
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, max(0.06, 1 x 0.04) = 0.06
    assert holm([0.04, None, 0.01, 0.03]) == [pytest.approx(0.06), None, pytest.approx(0.03), pytest.approx(0.06)]
    assert holm([0.5, 0.6]) == [pytest.approx(1.0), pytest.approx(1.0)]  # capped at 1


def test_three_variants_are_holm_corrected_and_say_so(tmp_path):
    values = {(lr, s): 3.0 - lr * 100 + s * s * lr for lr in (1e-3, 2e-3, 3e-3) for s in (1, 2, 3)}
    report = collect([_ablation(tmp_path, lrs=(1e-3, 2e-3, 3e-3), values=values)])
    summary = report.tables[0]
    assert "p (Holm)" in summary.header and "Holm-adjusted" in report.intro()[2]
    raw = [compare(report.baseline.values("val/loss"), v.values("val/loss")).p for v in report.variants if v is not report.baseline]
    shown = [r[summary.header.index("p (Holm)")].value for r in summary.rows if r[0].text != report.baseline.label]
    assert sorted(shown) == pytest.approx(sorted(holm(raw)))


# ---------------------------------------------------------------------------------------------- what a person sees

def _dom(page: str, profile: Path, *flags: str) -> str:
    return subprocess.run([_chromium(), *CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}", "--dump-dom", page],
                          capture_output=True, text=True, timeout=120).stdout


def _text(fragment: str) -> str:
    """What a person reads in an HTML fragment: tags dropped, entities decoded, spaces collapsed."""
    import html as html_lib

    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _row(dom: str, table: str, first_cell: str) -> str:
    body = re.search(rf'<table class="{table}(?: [^"]*)?"[^>]*>.*?</table>', dom, re.S).group(0)  # DataTables adds classes
    return _text(re.search(rf"<tr[^>]*><td[^>]*>{re.escape(first_cell)}</td>.*?</tr>", body, re.S).group(0))


def _rendered(dom: str) -> None:
    body = re.search(r'<body data-charts="(\d+)" data-rendered="(\d+)"', dom)
    assert body and body.group(1) == body.group(2), body and body.groups()
    assert '<pre id="js-errors"></pre>' in dom, "script errors in the page"


def _probed(root: Path, probe: str, profile: Path, *flags: str):
    """The report of the runs under root with a probe <script> appended, as Chromium renders it (flags: more of
    Chromium's, e.g. the window size): (the DOM, a function giving the body's data-<name> attribute, where the
    probe writes what it measured)."""
    from lab.report import html

    page = root / "report.html"
    page.write_text(html.render(collect([root])).replace("</body>", probe + "</body>"))
    dom = _dom(page.as_uri(), profile, *flags)
    _rendered(dom)
    return dom, lambda name: html_unescape(re.search(rf'data-{name}="([^"]*)"', dom).group(1))


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_shows_an_interrupted_sweep_and_a_mid_sweep_state_as_they_are(tmp_path):
    """An interrupted, resumed sweep and a sweep still running, as a browser shows them: where the runs are
    compared and why, which run was interrupted and resumed, no significance from runs at different steps,
    each seed's curve behind a switch, samples side by side at the compared step."""
    from lab.report import html

    interrupted = tmp_path / "interrupted"
    for job, (variant, seed) in enumerate((v, s) for v in ("learned", "rotary") for s in (1, 2, 3)):
        stopped = variant == "rotary" and seed == 3
        run = _curve_run(interrupted / str(job), variant, seed, 200 if stopped else 400, 0.004 if variant == "rotary" else 0.003,
                         status={"state": "interrupted", "attempts": 2} if stopped else None)
        with open(run / "train.log", "a") as log:
            for step in (200, 400) if not stopped else (200,):
                log.write(f"[2026-11-25 01:29:39,231][lab][INFO] - samples @ step {step} | prompt: ROMEO.\n"
                          f" | text: ROMEO.\n{variant} seed {seed} at {step}\n[2026-11-25 01:29:40,000][lab][INFO] - next\n")
    (interrupted / "report.html").write_text(html.render(collect([interrupted])))
    page = (interrupted / "report.html").as_uri()
    dom = _dom(page, tmp_path / "p1")
    _rendered(dom)
    assert ("Compared at step 200, the largest step every run with a value reached: 1 of 6 runs stopped before the "
            "furthest (step 400)") in _text(dom)
    rotary = _row(dom, "summary", "positions=rotary")
    hand = sum(4.0 - 0.004 * 200 + s / 100 for s in (1, 2, 3)) / 3
    assert f"{hand:.3f} ±" in rotary and "2 finished, 1 interrupted (1 resumed)" in rotary
    assert "interrupted (resumed: 2 attempts)" in _row(dom, "runs", "5")
    samples = _text(re.search(r"<h2>samples \(per variant\)</h2>.*?</div></div>", dom, re.S).group(0))
    assert "learned seed 1 at 200" in samples and "rotary seed 3 at 200" in samples and "at 400" not in samples
    # each seed's curve: hidden by default, drawn when the switch is on (here from the address); smoothing applied
    shown = _dom(page + "#x=tokens&seeds=1&smooth=0.6", tmp_path / "p2")
    _rendered(shown)
    assert 'data-controls="x=tokens,smooth=0.6,seeds=1"' in shown
    titles = [re.findall(r'class="xtitle"[^>]*>([^<]*)<', page).count("tokens seen") for page in (shown, dom)]
    assert titles[0] - titles[1] == 2  # the two curve charts (the cost chart's axis is tokens seen anyway)
    curve_charts = 2  # train/loss and val/loss
    assert shown.count('class="trace scatter') - dom.count('class="trace scatter') == 6 * curve_charts

    running = tmp_path / "running"  # --watch mid-sweep: one variant finished at 400, the other's runs at 100
    for job, (variant, seed) in enumerate((v, s) for v in ("learned", "rotary") for s in (1, 2, 3)):
        _curve_run(running / str(job), variant, seed, 400 if variant == "learned" else 100, 0.003 if variant == "learned" else 0.0,
                   status=None if variant == "learned" else {"state": "running"}, jitter=0.01 if variant == "learned" else 0.012)
    (running / "report.html").write_text(html.render(collect([running])))
    dom = _dom((running / "report.html").as_uri(), tmp_path / "p3")
    _rendered(dom)
    assert "Compared at step 100, the largest step every run with a value reached: 3 of 6 runs stopped" in _text(dom)
    row = _row(dom, "summary", "positions=rotary")
    # at step 100 the runs differ by 0.3 (learned fell 0.003 per step, rotary not at all): a real, paired
    # difference at the same step; read at their ends (step 400 vs 100) it would be 1.2
    assert "+0.3" in row and "yes (paired t-test)" in row and "1.2" not in row


def test_watch_sees_new_runs_a_glob_matches_and_finished_only_needs_a_finished_run(tmp_path, monkeypatch):
    from lab.errors import LabError
    from lab.report.__main__ import _signature

    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1,))
    monkeypatch.chdir(tmp_path)
    before = _signature([Path("runs/*")])  # as `--watch "runs/*"` passes it: relative, quoted
    assert before and str(root / "0" / "csv" / "metrics.csv") in {f for f, _, _ in before}
    write_run(root / "1", {"name": "x", "seed": 2}, [{"step": 1, "val/loss": 2.0}])  # a new job of the sweep
    assert len(_signature([Path("runs/*")])) > len(before)
    for f in root.rglob("train.log"):
        f.write_text("... step 3\n")  # no run has finished
    with pytest.raises(LabError, match="--budget finished: no run has finished yet"):
        collect([root], budget="finished")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_the_pages_smoothing_in_a_browser_equals_a_weighted_average_by_hand(tmp_path):
    """The page's own smoothing functions (html.CONTROLS), run by Chromium: the debiased exponential moving
    average equals the explicit weighted mean sum w^(i-j) v_j / sum w^(i-j); missing values stay missing;
    a band's two edges are smoothed each in step order."""
    import json as json_lib

    from lab.report.html import CONTROLS

    probe = ("<script>document.body.dataset.ema=JSON.stringify(labEma([1,2,3,null,5],0.6));"
             "document.body.dataset.band=JSON.stringify(labBand([3,4,5,1,0,-1],0.6))</script>")
    page = tmp_path / "controls.html"
    page.write_text(f"<!doctype html><html><body>{CONTROLS.replace('{options}', '')}{probe}</body></html>")
    dom = _dom(page.as_uri(), tmp_path / "p")

    def by_hand(values, w):
        out, seen = [], []
        for v in values:
            if v is None:
                out.append(None)
                continue
            seen.append(v)
            weights = [w ** (len(seen) - 1 - j) for j in range(len(seen))]
            out.append(sum(wt * x for wt, x in zip(weights, seen)) / sum(weights))
        return out

    ema = json_lib.loads(html_unescape(re.search(r'data-ema="([^"]*)"', dom).group(1)))
    band = json_lib.loads(html_unescape(re.search(r'data-band="([^"]*)"', dom).group(1)))
    assert ema[3] is None and [e for e in ema if e is not None] == pytest.approx([e for e in by_hand([1, 2, 3, None, 5], 0.6) if e is not None])
    assert band == pytest.approx(by_hand([3, 4, 5], 0.6) + by_hand([-1, 0, 1], 0.6)[::-1])


def html_unescape(text: str) -> str:
    import html as html_lib

    return html_lib.unescape(text)


# ---------------------------------------------------------------------------------------------- states are facts

def _age(run: Path, seconds: float) -> None:
    old = time.time() - seconds
    for f in run.rglob("*"):
        os.utime(f, (old, old))


def test_a_killed_run_here_is_stopped_at_once_and_a_quiet_live_one_is_running(tmp_path):
    """This host: status.json's pid decides (a killed job was 'running' until its files were 120 s old, a live
    one writing nothing for 2 minutes 'stopped'). Another host: the heartbeat's allowed age is 3 times the
    longest gap between the run's own log lines (at least 60 s)."""
    from lab.report.runs import run_status

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = os.uname().nodename
    cfg = {"name": "x", "seed": 1}
    killed = write_run(tmp_path / "killed", cfg, [{"step": 9, "val/loss": 2.0}], finished=False,
                       status={"state": "running", "pid": dead.pid, "host": host})
    quiet = write_run(tmp_path / "quiet", cfg, [{"step": 9, "val/loss": 2.0}], finished=False,
                      status={"state": "running", "pid": os.getpid(), "host": host})
    _age(quiet, 600)
    assert run_status(killed) == ("stopped", f"no end recorded and its process (pid {dead.pid} on {host}) is gone: "
                                             "killed or crashed")
    assert run_status(quiet) == ("running", "")
    log = "".join(f"[2026-11-25 01:{m:02d}:00,000][lab][INFO] - progress: step {m}\n" for m in (0, 5, 10))  # every 5 min
    slow = write_run(tmp_path / "slow", cfg, [{"step": 9, "val/loss": 2.0}], finished=False,
                     status={"state": "running", "pid": 1, "host": "another-host"})
    (slow / "train.log").write_text(log)
    _age(slow, 14 * 60)
    assert run_status(slow) == ("running", "")  # 14 min < 3 x 5 min
    _age(slow, 16 * 60)
    assert run_status(slow)[0] == "stopped" and "nothing written for 960s (allowed 900s)" in run_status(slow)[1]


def _diverging_sweep(root: Path) -> Path:
    """lr 1e-3 and 1e-2, 3 seeds: lr 1e-2 seed 3's loss is NaN from step 40 and it stops at step 50."""
    for job, (lr, seed) in enumerate((lr, s) for lr in (1e-3, 1e-2) for s in (1, 2, 3)):
        bad = lr == 1e-2 and seed == 3
        rows = []
        for step in range(10, 51 if bad else 201, 10):
            loss = math.nan if bad and step >= 40 else 4.0 - step / 100 - lr * 10 + seed / 100
            rows.append({"step": step, "train/loss": loss, **({"val/loss": loss} if step % 50 == 0 else {})})
        write_run(root / str(job), {"name": "lr", "seed": seed, "task": {"lr": lr}, "optimized_metric": "val/loss"}, rows,
                  finished=not bad, status={"state": "failed", "error": "error: loss is NaN"} if bad else None)
    return root


def test_a_diverged_run_is_named_counted_and_drawn_to_the_step_it_diverged(tmp_path):
    """It was dropped without a word: the variant showed n = 2 and a finite mean, its curve was not drawn, and
    its last step (50) pulled every other run back to step 50."""
    report = collect([_diverging_sweep(tmp_path)])
    assert report.budget.step == 200  # the diverged run does not set the common step
    assert "Diverged (NaN or infinite loss), counted in their variant's n, with no finite value: 5 at step 40." in report.budget_note
    rows = {r[0].text: dict(zip(report.tables[0].header, (c.text for c in r))) for r in report.tables[0].rows}
    high = rows["lr=0.01"]
    assert high["n"] == "3" and "1 of 3 diverged (step 40), mean of the other 2" in high["val/loss (final at step 200, mean ± std)"]
    assert high["beyond seed noise?"] == "no test: 1 run(s) diverged" and high["p"] == ""
    assert "1 diverged at step 40" in high["runs"]
    assert [v.label for v in report.variants] == ["lr=0.001", "lr=0.01"]  # a variant with a diverged seed is not best
    runs = {r[0].text: dict(zip(report.tables[2].header, (c.text for c in r))) for r in report.tables[2].rows}
    assert runs["5"]["status"] == "diverged at step 40 (error: loss is NaN)"
    (fig,) = [f for t, f in dict(report.sections)["Curves"] if t == "train/loss"]
    mark = next(t for t in fig.data if t.name.endswith("diverged at step 40"))
    assert list(mark.x) == [30] and list(mark.y) == [pytest.approx(4.0 - 0.3 - 0.1 + 0.03)]  # its last finite point
    seed3 = next(t for t in fig.data if t.name == "lr=0.01 seed=3 [diverged]")
    assert list(seed3.x) == [10, 20, 30]  # drawn up to where it diverged
    assert all(math.isfinite(y) for t in fig.data for y in t.y)  # no NaN handed to plotly


def test_the_summary_names_the_step_it_read_and_a_killed_run_does_not_pull_the_others_back(tmp_path):
    """train/loss every 10 steps to 109, val/loss at 49 and 99: it said 'final at step 109' with step 99's
    values; and one killed run (stopped at 59) set the common step for every finished run."""
    for seed in (1, 2, 3):
        for d in (1, 2):
            rows = [{"step": s, "train/loss": 4.0, **({"val/loss": 3.0 - s / 100 - d / 10 + seed / 100} if s % 50 == 49 else {})}
                    for s in range(9, 110, 10)]
            write_run(tmp_path / f"d{d}-{seed}", {"name": "x", "seed": seed, "d": d}, rows)
    killed = write_run(tmp_path / "killed", {"name": "x", "seed": 4, "d": 2},
                       [{"step": s, "train/loss": 4.0, "val/loss": 2.0} for s in (49, 59)], finished=False)
    _age(killed, 3600)
    report = collect([tmp_path])
    assert report.budget.step == 109
    header = report.tables[0].header[3]
    assert header == "val/loss (final at step 99, mean ± std)"
    assert report.budget_note == ("Every run still going or finished reached step 109; each run's last logged value at "
                                  "that step is compared (val/loss read at step 99). Not compared, stopped for good "
                                  "before step 109: killed (stopped at step 59).")
    d2 = next(v for v in report.variants if v.label == "d=2")
    assert d2.stat("val/loss").n == 3 and d2.stat("val/loss").mean == pytest.approx(3.0 - 0.99 - 0.2 + 0.02)


# ---------------------------------------------------------------------------------------------- smoothing

def _smoothing_runs(root: Path) -> Path:
    """train/loss at every step 1-40, val/loss at 3 steps, the lr schedule at every step; 2 variants x 2 seeds."""
    for d in (1, 2):
        for seed in (1, 2):
            rows = [{"step": s, "train/loss": 4.0 - s / 20 + (s % 3) / 10 + seed / 100, "lr-AdamW": 1e-3 * min(1, s / 10)}
                    for s in range(1, 41)]
            for r in rows:
                if r["step"] % 20 == 0 or r["step"] == 1:
                    r["val/loss"] = 3.0 - r["step"] / 40 - d / 10 + seed / 100
            write_run(root / f"d{d}-{seed}", {"name": "x", "seed": seed, "d": d}, rows)
    return root


def test_only_dense_training_curves_are_marked_for_smoothing(tmp_path):
    """Smoothing moved a 3-point validation curve's compared value and bent the lr schedule."""
    report = collect([_smoothing_runs(tmp_path)])
    marked = {title: {t.meta["smooth"] for t in fig.data if t.meta} for title, fig in dict(report.sections)["Curves"]}
    assert marked == {"train/loss": {True}, "val/loss": {False}, "lr-AdamW": {False}}


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_smoothing_in_a_browser_never_moves_a_validation_point_or_the_schedule(tmp_path):
    """With the slider at 0.6 (from the address) the page's val/loss and lr traces keep their logged values and
    train/loss is smoothed; the slider starts at 0 (off)."""
    from lab.report import html

    root = _smoothing_runs(tmp_path / "runs")
    report = collect([root])
    probe = ("<script>setTimeout(()=>{document.body.dataset.ys=JSON.stringify([...document.querySelectorAll('.chart.curve')]"
             ".map(d=>[d.title,d.data.filter(t=>t.meta&&t.meta.kind==='mean').map(t=>Array.from(t.y))]))},3000)</script>")
    page = root / "report.html"
    page.write_text(html.render(report).replace("</body>", probe + "</body>"))
    assert 'id="smooth" min="0" max="0.99" step="0.01" value="0"' in page.read_text()  # off by default
    dom = _dom(page.as_uri() + "#smooth=0.6", tmp_path / "p")
    _rendered(dom)
    shown = dict(json.loads(html_unescape(re.search(r'data-ys="([^"]*)"', dom).group(1))))
    logged = {title: [y for t in fig.data if t.meta and t.meta["kind"] == "mean" for y in t.y] for title, fig in dict(report.sections)["Curves"]}
    shown = {title: [y for ys in traces for y in ys] for title, traces in shown.items()}
    assert shown["val/loss"] == pytest.approx(logged["val/loss"]) and shown["lr-AdamW"] == pytest.approx(logged["lr-AdamW"])
    assert shown["train/loss"] != pytest.approx(logged["train/loss"])


# ---------------------------------------------------------------------------------------------- costs

def _cost_runs(root: Path, flops: bool, overlap: bool) -> Path:
    """d=1 and d=2, 2 seeds: 10 steps of 100 tokens; FLOPs 6 x params x tokens (params 1000 x d) in status.json
    when `flops`; each run 60 s on one host, all at once when `overlap`, else one after the other."""
    for job, (d, seed) in enumerate((d, s) for d in (1, 2) for s in (1, 2)):
        rows = [{"step": s, "val/loss": 3.0 - d / 10 + seed / 100, "perf/tokens_seen": 100.0 * s,
                 "perf/tokens_per_s_global": 1000.0 * (job + 1) + s} for s in (5, 10)]
        start = 1_700_000_000 + (0 if overlap else 100 * job)
        status = {"state": "completed", "host": "node1", "started": datetime.fromtimestamp(start, UTC).isoformat(),
                  "ended": datetime.fromtimestamp(start + 60, UTC).isoformat(),
                  "metrics": {"cost/train_flops": 6.0 * 1000 * d * 1000, "cost/tokens": 1000.0} if flops else {}}
        write_run(root / str(job), {"name": "x", "seed": seed, "d": d}, rows, params=1000 * d, status=status)
    return root


def test_the_default_cost_is_training_flops_and_tokens_seen_with_a_note_when_flops_are_missing(tmp_path):
    """The only cost axes were active parameters and tokens/s (a measure of the machine's load as much as of
    the variant)."""
    report = collect([_cost_runs(tmp_path / "a", flops=True, overlap=False)])
    row = {v[0].text: dict(zip(report.tables[0].header, v)) for v in report.tables[0].rows}
    assert row["d=2"]["training FLOPs (median)"].value == 6.0 * 2000 * 1000  # 6 N D
    assert "Cost: training FLOPs up to the compared step, median over seeds." in report.intro()
    (first, *_), = [charts for title, charts in report.sections if title == "Quality vs cost"]
    assert first[0] == "val/loss vs training FLOPs" and sorted(first[1].data[0].x) == [6e6, 1.2e7]
    assert first[1].layout.xaxis.tickformat == ".3s"
    tokens = collect([_cost_runs(tmp_path / "b", flops=False, overlap=False)])
    assert "tokens seen (median)" in tokens.tables[0].header and "training FLOPs (median)" not in tokens.tables[0].header
    assert ("Cost: tokens seen up to the compared step, median over seeds (training FLOPs were not recorded by every "
            "run: cost/train_flops in status.json or perf/flops_seen in metrics.csv).") in tokens.intro()
    assert {v.cost("val/loss")[0] for v in tokens.variants} == {1000.0}  # perf/tokens_seen at step 10
    from lab.report.variants import run_cost

    run = report.runs[0]  # FLOPs only as status.json's final value (step 10): never scaled to an earlier step
    assert run_cost(run, "flops", "cost/train_flops", 10) == 6e6 and run_cost(run, "flops", "cost/train_flops", 5) is None


def test_concurrent_runs_get_a_note_and_their_speed_no_pareto_front(tmp_path):
    report = collect([_cost_runs(tmp_path / "a", flops=True, overlap=True)])
    assert any(line.startswith("Runs overlapped in time on one machine (4 runs on node1)") for line in report.intro())
    assert "tokens/s (median, concurrent runs)" in report.tables[0].header
    speed = dict(dict(report.sections)["Quality vs cost"])["val/loss vs tokens/s"]
    assert "concurrent runs" in speed.layout.title.text and [t.name for t in speed.data] == ["variants"]
    apart = collect([_cost_runs(tmp_path / "b", flops=True, overlap=False)])
    assert not any("overlapped" in line for line in apart.intro()) and "tokens/s (median)" in apart.tables[0].header
    speed = dict(dict(apart.sections)["Quality vs cost"])["val/loss vs tokens/s"]
    assert [t.name for t in speed.data] == ["variants", "Pareto front"]
    hosts = _cost_runs(tmp_path / "c", flops=True, overlap=True)
    for job in (1, 3):  # at the same time, on two machines: one job each
        status = json.loads((hosts / str(job) / "status.json").read_text())
        (hosts / str(job) / "status.json").write_text(json.dumps({**status, "host": "node2"}))
    assert [line for line in collect([hosts]).intro() if "overlapped" in line] == [
        "Runs overlapped in time on one machine (2 runs on node1; 2 runs on node2): their wall time and tokens/s "
        "reflect the machine's load, not only the variant; compare costs by training FLOPs or tokens."]


def test_one_figure_per_variant_for_its_speed_in_every_table(tmp_path):
    """The summary showed the median of the runs' medians, the metrics table the mean ± std at the compared step."""
    report = collect([_cost_runs(tmp_path, flops=True, overlap=False)])
    summary = {r[0].text: dict(zip(report.tables[0].header, r)) for r in report.tables[0].rows}
    metrics = {r[0].text: dict(zip(report.tables[1].header, r)) for r in report.tables[1].rows}
    for label in ("d=1", "d=2"):
        assert summary[label]["tokens/s (median)"].value == metrics[label]["perf/tokens_per_s_global (median)"].value
    # jobs 0, 1 (d=1): run medians 1007.5 and 2007.5, their median 1507.5
    assert metrics["d=1"]["perf/tokens_per_s_global (median)"].value == pytest.approx(1507.5)


def test_a_single_variant_gets_no_empty_cost_charts(tmp_path):
    root = _cost_runs(tmp_path, flops=True, overlap=False)
    for job in (2, 3):
        shutil.rmtree(root / str(job))
    assert "Quality vs cost" not in dict(collect([root]).sections)


# ---------------------------------------------------------------------------------------------- any two runs

PRESET = {"name": "gpt_nano_char", "optimized_metric": "val/loss", "model": {"positions": "learned", "norm": "layernorm",
          "n_layers": 4}, "task": {"optimizer": {"lr": 1e-3, "kind": "adamw"}, "scheduler": {"warmup_steps": 100}}}
FAST = {"name": "gpt_nano_char_fast", "model": {"positions": "rotary", "norm": "rmsnorm", "n_layers": 4},
        "task": {"optimizer": {"lr": 3e-3, "kind": "muon"}, "scheduler": {"warmup_steps": 20}}}


def _presets(root: Path, presets: list[dict], seeds=(1, 2)) -> Path:
    import copy

    for i, over in enumerate(presets):
        cfg = copy.deepcopy(PRESET)
        for group in ("model", "task"):
            cfg[group] = {**cfg[group], **over.get(group, {})}
        cfg["name"] = over.get("name", cfg["name"])
        for seed in seeds:
            rows = [{"step": s, "val/loss": 3.0 - s / 1000 - i / 10 + seed / 100, "train/loss": 3.5 - i / 10} for s in (50, 100)]
            write_run(root / f"{i}-{seed}", {**cfg, "seed": seed}, rows, params=1000)
    return root


def test_two_presets_are_one_factor_named_by_the_experiment_with_the_whole_difference_in_one_table(tmp_path):
    """Each of the keys two presets differ in became a swept choice: a chart per key, a parallel-coordinates
    view over all of them and a summary column per key."""
    report = collect([_presets(tmp_path, [{}, FAST])])
    assert report.keys == ["experiment"] and sorted(v.label for v in report.variants) == ["gpt_nano_char", "gpt_nano_char_fast"]
    assert report.tables[0].header[:2] == ["variant", "n"]  # the experiment's name is the label: no column repeats it
    assert [t for t, _ in dict(report.sections)["Sweep"]] == ["val/loss by experiment"]  # no parallel coordinates
    config = next(t for t in report.tables if t.name == "config")
    assert [r[0].text for r in config.rows] == ["model.norm", "model.positions", "task.optimizer.kind", "task.optimizer.lr",
                                                 "task.scheduler.warmup_steps"]
    by_label = {v.label: i for i, v in enumerate(report.variants)}
    fast = next(r for r in config.rows if r[0].text == "model.positions")[1 + by_label["gpt_nano_char_fast"]]
    assert fast.text == "rotary"
    named = collect([tmp_path], label="recipe")
    assert named.keys == ["recipe"] and [v.choices["recipe"] for v in named.variants] == [v.label for v in named.variants]


def test_three_presets_and_a_key_swept_beside_them_stay_separate_factors(tmp_path):
    """Three presets: one factor when every key tells all three apart; when one preset shares some keys with
    another, those keys are a factor of their own (#1, #2, #2) beside the key that changes alone."""
    third = {"name": "gpt_nano_char_mid", "model": {"positions": "alibi", "norm": "none", "n_layers": 4},
             "task": {"optimizer": {"lr": 2e-3, "kind": "lion"}, "scheduler": {"warmup_steps": 50}}}
    report = collect([_presets(tmp_path / "a", [{}, FAST, third])])
    assert report.keys == ["experiment"] and len(report.variants) == 3
    mid = {**third, "model": FAST["model"], "task": {**FAST["task"], "scheduler": {"warmup_steps": 100}}}
    report = collect([_presets(tmp_path / "m", [{}, FAST, mid])])
    assert report.keys == ["norm +3 keys", "task.scheduler.warmup_steps"]
    assert {v.label: v.choices["norm +3 keys"] for v in report.variants} == {
        "gpt_nano_char": "#1", "gpt_nano_char_fast": "#2", "gpt_nano_char_mid": "#2"}
    for d in range(3):  # the same name for all: the factor cannot be named by the experiment
        for seed in (1, 2):
            write_run(tmp_path / "b" / f"{d}-{seed}", {"name": "x", "seed": seed, "a": d, "b": -d}, [{"step": 9, "val/loss": 2.0 + d}])
    report = collect([tmp_path / "b"])
    assert report.keys == ["a +1 keys"] and [v.choices["a +1 keys"] for v in report.variants] == ["#1", "#2", "#3"]
    with pytest.raises(LabError, match="--label x names the one set of keys that change together, but these variants have 0"):
        collect([_ablation(tmp_path / "c")], label="x")


def test_legend_and_point_labels_are_bounded():
    from lab.report.charts import LABEL_MAX, bounded

    assert bounded("x" * LABEL_MAX) == "x" * LABEL_MAX and len(bounded("x" * 100)) == LABEL_MAX
    # cut in the middle: two variants that differ in their last value stay two legend entries
    pre, post = "norm=layernorm norm_placement=pre", "norm=layernorm norm_placement=post"
    assert bounded(pre) == "norm=layernorm …rm_placement=pre" and bounded(post) == "norm=layernorm …m_placement=post"


# ---------------------------------------------------------------------------------------------- live

def test_watch_makes_the_open_page_reload_itself_while_a_run_is_running(tmp_path):
    """--watch re-rendered report.html, but the page a person had open never changed until reloaded by hand."""
    import argparse

    from lab.report.__main__ import render

    root = _ablation(tmp_path / "runs", lrs=(1e-3,), seeds=(1, 2))
    args = argparse.Namespace(paths=[root], metric=None, baseline=None, budget="common", value="final", ignore=[],
                              label=None, scaling="auto", out=None, force=False, wandb="off", watch=True)
    render(args)
    assert 'http-equiv="refresh"' not in (root / "report.html").read_text()  # every run ended: a still page
    (root / "0" / "train.log").write_text("... step 3\n")  # no end recorded, written just now: running
    render(args)
    page = (root / "report.html").read_text()
    assert '<meta http-equiv="refresh" content="5">' in page and "this page reloads every 5 s" in page
    assert "h.set('x',axis);h.set('smooth',w);h.set('seeds',seeds?1:0);" in page  # the controls survive the reload in the address
    args.watch = False
    render(args)
    assert 'http-equiv="refresh"' not in (root / "report.html").read_text()  # a saved report never reloads


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_two_presets_every_point_inside_its_axes_and_legends_leave_room_for_the_plot(tmp_path):
    """What a person sees of a two-preset report: every chart drawn, each marker inside its plot area, each
    plot area at least half its chart's width (legends took ~45%), the config difference behind a click."""
    root = _presets(tmp_path / "runs", [{}, {**FAST, "name": "gpt_nano_char_fast_with_a_much_longer_recipe_name"}])
    probe = ("<script>setTimeout(()=>{const bad=[],narrow=[];document.querySelectorAll('.chart').forEach(d=>{"
             "const area=d.querySelector('.nsewdrag');if(!area)return;const a=area.getBoundingClientRect(),"
             "c=d.getBoundingClientRect();if(a.width<0.5*c.width)narrow.push(d.title);d.querySelectorAll('.point')"
             ".forEach(p=>{const r=p.getBoundingClientRect(),x=(r.left+r.right)/2,y=(r.top+r.bottom)/2;"
             "if(x<a.left-1||x>a.right+1||y<a.top-1||y>a.bottom+1)bad.push(d.title)})});"
             "document.body.dataset.outside=JSON.stringify(bad);document.body.dataset.narrow=JSON.stringify(narrow)},3000)</script>")
    dom, attr = _probed(root, probe, tmp_path / "p")
    assert json.loads(attr("outside")) == []
    assert json.loads(attr("narrow")) == []
    assert re.search(r"<details><summary><h2[^>]*>Config difference \(5 keys\)</h2></summary>", dom)


# Each table's right edge is inside the page, or the table scrolls inside its own box (which is inside the page)
# and, scrolled to its end, still shows its first column at the box's left edge.
TABLES_FIT = (
    "<script>setTimeout(()=>{const W=document.documentElement.clientWidth,out=[],wide=[],lost=[];"
    "document.querySelectorAll('table').forEach(t=>{const box=t.parentElement,b=box.getBoundingClientRect(),"
    "r=t.getBoundingClientRect(),scrolls=getComputedStyle(box).overflowX==='auto'&&box.scrollWidth>=r.width-1;"
    "if(!r.width)return;if(b.right>W+1||(r.right>W+1&&!scrolls))out.push(t.className);"
    "if(box.scrollWidth>box.clientWidth+1){wide.push(t.className);box.scrollLeft=box.scrollWidth;"
    "const c=t.tBodies[0].rows[0].cells[0].getBoundingClientRect();if(Math.abs(c.left-b.left)>2)lost.push(t.className)}});"
    "const d=document.body.dataset;d.out=out.join(' ');d.wide=wide.join(' ');d.lost=lost.join(' ');"
    "d.pagewide=document.documentElement.scrollWidth-W},3000)</script>")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_browser_three_long_preset_names_keep_every_table_inside_a_1400px_page(tmp_path):
    """The summary of three presets with long names ran off a 1,400 px page (the README's screenshot): the whole
    page scrolled sideways and the variant column left the view. Now a wide table scrolls in its own box with
    its first column fixed, and the page is never wider than the window."""
    longer = "_with_a_much_longer_recipe_name_than_usual"
    root = _presets(tmp_path / "runs", [{"name": "gpt_nano_char" + longer}, {**FAST, "name": "gpt_nano_char_fast" + longer},
                                        {"name": "gpt_nano_char_deep" + longer, "model": {"n_layers": 6}}])
    for run in root.iterdir():  # the preset's name as the runs' override: the runs table (DataTables') is wide too
        (run / ".hydra").mkdir()
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"+experiment={yaml.safe_load((run / 'config.yaml').read_text())['name']}"]))
    _, attr = _probed(root, TABLES_FIT, tmp_path / "p", "--window-size=1400,2600")
    assert attr("out") == "" and attr("pagewide") == "0" and attr("lost") == ""
    assert {"summary", "runs"} <= set(attr("wide").split())  # the case of the issue: wider than the page, scrolled in its box
