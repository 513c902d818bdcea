"""The report's own W&B run with a key and a server that does not answer: decided offline after a bounded
probe (as lab.train decides), its tables on disk for `wandb sync`, instead of waiting out W&B's online init."""
from __future__ import annotations

import socket
from pathlib import Path

import yaml
from conftest import run_module


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: connecting is refused


def write_runs(root: Path) -> Path:
    """Two finished runs of a multirun (two learning rates), in lab's layout."""
    for job, lr in enumerate((1e-3, 3e-3)):
        run = root / str(job)
        (run / "csv").mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"name": "abl", "seed": 1, "optimized_metric": "val/loss",
                                                         "task": {"optimizer": {"lr": lr}}, "paths": {"output_dir": str(run)}}))
        (run / "csv" / "metrics.csv").write_text(f"step,val/loss\n9,{3 + lr}\n19,{2.5 + lr}\n")
        (run / "train.log").write_text("... finished in 3.0s\n")
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def test_a_key_and_an_unreachable_server_log_the_tables_offline(tmp_path):
    """With a key, the report's run went online without asking the server first: an unreachable server cost
    W&B's init timeout and then 'report tables not logged'. Now: one line naming the server and the `wandb sync`
    command, and the tables in an offline run beside the sweep."""
    root = write_runs(tmp_path / "sweep")
    env = {"WANDB_API_KEY": "0123456789" * 4, "WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}", "WANDB_MODE": ""}
    result = run_module("lab.report", [str(root), "--wandb", "on"], tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert f"W&B: report tables logged to group abl/{root.name} (offline)" in result.stderr, result.stderr[-2000:]
    assert f"logging offline. Upload later with: wandb sync {root}/.lab_report/wandb/offline-run-*" \
        in result.stderr
    (offline,) = (root / ".lab_report" / "wandb").glob("offline-run-*")
    tables = sorted(p.name.split("_")[0] for p in (offline / "files" / "media" / "table" / "report").iterdir())
    assert "summary" in tables and "runs" in tables
