"""Time `lab.report` on a 50-run sweep (12 variants x ~4 seeds; target: under 10 s).

    python benchmarks/report.py [--runs 50] [--steps 2000] [--sweep DIR]

Without --sweep it writes a sweep in lab's run layout (config.yaml, .hydra/overrides.yaml, csv/metrics.csv,
csv/hparams.yaml) shaped like full gpt_nano_char runs: 2000 steps logged every 10 (train loss, lr,
throughput), validation every 250 with MoE expert shares (2 layers x 8 experts), and a test row; run i
is variant i % 12 (3 learning rates x 4 depths) with seed i // 12.
With --sweep it times a real multirun directory. Prints the wall time of each phase, best of 3.
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import tempfile
import time
from pathlib import Path

import yaml

from lab.report import collect, html, markdown

EXPERTS = 8


def write_sweep(root: Path, n_runs: int, steps: int) -> Path:
    rng = random.Random(0)
    for i in range(n_runs):
        run = root / str(i)
        (run / "csv").mkdir(parents=True)
        (run / ".hydra").mkdir()
        lr, layers, seed = [1e-3, 2e-3, 5e-4][i % 3], [2, 4, 6, 8][i // 3 % 4], i // 12
        config = {"name": "gpt_nano_char", "optimized_metric": "val/loss", "seed": seed,
                  "task": {"optimizer": {"lr": lr, "weight_decay": 0.1}},
                  "model": {"n_layers": layers, "d_model": 128, "n_heads": 4, "max_seq_len": 64},
                  "data": {"batch_size": 12, "tokenizer": "char"},
                  "trainer": {"max_steps": steps, "devices": 1}, "paths": {"output_dir": str(run)}}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
            ["+experiment=gpt_nano_char", f"task.optimizer.lr={lr}", f"model.n_layers={layers}"]))
        (run / "csv" / "hparams.yaml").write_text(f"params/total: {layers * 200_000}\nparams/active: {layers * 200_000}\n")
        moe = [f"val/moe/decoder.{layer}/expert_{e}" for layer in range(2) for e in range(EXPERTS)]
        columns = ["epoch", "step", "train/loss", "lr-AdamW/pg1", "perf/tokens_per_s", "perf/tokens_per_s_global",
                   "val/loss", "val/ppl", "val/bpb", "test/loss", *moe]
        with open(run / "csv" / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, columns)
            w.writeheader()
            for step in range(9, steps, 10):
                loss = 1.2 + 3 * math.exp(-step / (300 + 50 * layers)) + rng.gauss(0, 0.03) + seed * 0.01
                w.writerow({"epoch": 0, "step": step, "train/loss": loss, "lr-AdamW/pg1": lr,
                            "perf/tokens_per_s": 9000 / layers, "perf/tokens_per_s_global": 9000 / layers})
                if (step + 1) % 250 == 0:
                    load = [rng.random() for _ in moe]
                    w.writerow({"epoch": 0, "step": step, "val/loss": loss + 0.3, "val/ppl": math.exp(loss + 0.3),
                                "val/bpb": (loss + 0.3) / math.log(2), **{c: v / sum(load) for c, v in zip(moe, load)}})
            w.writerow({"epoch": 0, "step": steps, "test/loss": loss + 0.3})
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--sweep", type=Path, default=None)
    args = ap.parse_args()
    sweep = args.sweep or write_sweep(Path(tempfile.mkdtemp(prefix="report-bench-")), args.runs, args.steps)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        report = collect([sweep])
        page = html.render(report)
        (sweep / "report.html").write_text(page)
        (sweep / "report.md").write_text(markdown.render(report))
        times.append(time.perf_counter() - t0)
    print(f"\nlab.report on {len(report.runs)} runs, {len(report.variants)} variants ({sweep}): HTML {len(page) / 1e6:.2f} MB")
    print(f"{'rounds (s)':>20} {'best (s)':>9} {'target':>7}")
    print(f"{[round(t, 2) for t in times]!s:>20} {min(times):9.2f} {'< 10 s':>7}")


if __name__ == "__main__":
    main()
