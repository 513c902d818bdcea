"""lab.report on a small real multirun: every run and metric column is in the HTML, and a browser renders it."""
from __future__ import annotations

import csv
import shutil
import subprocess

import pytest
from conftest import TINY_LM, run_dirs, run_module, train

# Two single-process jobs differing in depth; W&B disabled: the report needs only what runs write locally.
ARGS = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=6", "trainer.val_check_interval=3", "test=false", "callbacks.progress=null",
    "callbacks.throughput.every_n_batches=2"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    train(["-m", *ARGS, "model.n_layers=1,2"], runs)
    (sweep_dir,) = list((runs / "gpt_nano_char" / "multirun").iterdir())
    result = run_module("lab.report", [str(sweep_dir)], runs)
    assert result.returncode == 0, result.stderr
    return sweep_dir


def _columns(run) -> list[str]:
    with open(run / "csv" / "metrics.csv") as f:
        return [c for c in next(csv.reader(f)) if c not in ("step", "epoch")]


def test_report_has_every_run_and_every_metric_column(sweep):
    html = (sweep / "report.html").read_text()
    md = (sweep / "report.md").read_text()
    runs = run_dirs(sweep)
    assert len(runs) == 2
    for run in runs:
        assert f"<tr><td>{run.name}</td>" in html and f"\n| {run.name} |" in md
        for column in _columns(run):
            assert f"<th>{column}</th>" in html, column
    assert "<th>model.n_layers</th>" in html  # the setting that distinguishes the runs
    assert html.count("data:image/png;base64,") >= 3  # train/loss, val/loss, throughput curves at least
    for expected in ("train/loss", "val/loss", "perf/tokens_per_s"):
        assert f'alt="{expected}"' in html
    assert "http://" not in html and "https://" not in html  # self-contained: renders offline


def test_report_refuses_a_directory_without_runs(tmp_path):
    result = run_module("lab.report", [str(tmp_path)], tmp_path)
    assert result.returncode == 2 and "no runs under" in result.stderr and "Traceback" not in result.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium; "
                                                "`make test` installs it in CI)")
def test_browser_renders_tables_and_every_runs_curve(sweep, tmp_path):
    """Headless Chromium screenshot of the page: the table header grey and both runs' line colours
    (tab10 blue/orange, in run order) must appear, so the tables laid out and the PNG charts decoded."""
    import matplotlib.image
    import numpy as np

    shot = tmp_path / "report.png"
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1600,2400", f"file://{sweep / 'report.html'}"],
                   check=True, capture_output=True, timeout=120)
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round().astype(int)  # [H, W, 3]

    def has_colour(rgb, tolerance=12, at_least=50) -> bool:
        return int((np.abs(pixels - np.array(rgb)).max(axis=-1) <= tolerance).sum()) >= at_least

    assert has_colour((0xF0, 0xF0, 0xF0)), "table header background not rendered"
    assert has_colour((0x1F, 0x77, 0xB4)), "first run's curve (blue) not rendered"
    assert has_colour((0xFF, 0x7F, 0x0E)), "second run's curve (orange) not rendered"


def test_moe_expert_shares_become_a_heatmap_row_per_run_and_layer(tmp_path):
    """Columns as lab tasks log them (<stage>/moe/<layer>/expert_<i>); a dense sweep gets no MoE section."""
    from lab.report import build_report

    for i in range(2):
        run = tmp_path / str(i)
        (run / "csv").mkdir(parents=True)
        (run / "config.yaml").write_text(f"optimized_metric: val/loss\nmodel:\n  n_layers: {i + 1}\n")
        experts = [f"val/moe/decoder.{layer}/expert_{e}" for layer in range(2) for e in range(4)]
        header = ["step", "val/loss", "val/moe/decoder.0/load_balance", *experts]
        rows = [[s, 3.0 - s / 10, 1.1, *([0.25] * len(experts))] for s in (4, 9)]
        (run / "csv" / "metrics.csv").write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]))
    html, _md, runs = build_report([tmp_path])
    assert len(runs) == 2 and "<h2>MoE expert load</h2>" in html and 'alt="moe expert load"' in html
    assert 'alt="val/moe/decoder.0/load_balance"' in html  # routing statistics stay curves
    assert 'alt="val/moe/decoder.0/expert_0"' not in html  # per-expert shares only in the heatmap
    assert "<th>val/moe/decoder.1/expert_3</th>" in html  # and every column in the metrics table


def test_dense_runs_have_no_moe_section(sweep):
    assert "MoE expert load" not in (sweep / "report.html").read_text()
