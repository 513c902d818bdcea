"""Results table of the MoE ablation runs (run.sh) as Markdown, read from each run's CSV metrics and log.

    python experiments/moe_ablation/summarize.py [RUNS_DIR/moe_ablation]

Per variant (latest finished run): final validation loss and bits per byte, median training tokens/s,
total and active parameters, dropped share of token->expert assignments (training: mean over the last
100 steps, averaged over MoE layers; validation at eval capacity: last evaluation), final
load-balancing loss (mean over layers), wall time.
"""
from __future__ import annotations

import csv
import os
import re
import statistics
import sys
from pathlib import Path


def finished_run(variant_dir: Path) -> Path | None:
    runs = [p for p in sorted(variant_dir.iterdir()) if (p / "train.log").exists()
            and "finished in" in (p / "train.log").read_text()]
    return runs[-1] if runs else None


def layer_mean(row: dict[str, str], stage: str, stat: str) -> float | None:
    values = [float(v) for k, v in row.items() if v and re.fullmatch(rf"{stage}/moe/[^/]+/{stat}", k)]
    return sum(values) / len(values) if values else None


def summarize(run: Path) -> dict[str, str]:
    rows = list(csv.DictReader((run / "csv" / "metrics.csv").read_text().splitlines()))
    log = (run / "train.log").read_text()
    total, active = (int(g.replace(",", "")) for g in re.search(r"parameters: ([\d,]+) total, ([\d,]+) active", log).groups())
    wall = float(re.search(r"finished in ([\d.]+)s", log).group(1))
    val = [r for r in rows if r.get("val/loss")][-1]
    last_step = max(int(r["step"]) for r in rows)
    train_drop = [d for r in rows if int(r["step"]) > last_step - 100 and (d := layer_mean(r, "train", "dropped")) is not None]
    train_lb = [x for r in rows if int(r["step"]) > last_step - 100 and (x := layer_mean(r, "train", "load_balance")) is not None]
    val_drop = layer_mean(val, "val", "dropped")
    speed = statistics.median(float(r["perf/tokens_per_s"]) for r in rows if r.get("perf/tokens_per_s"))
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    return {
        "val loss": f"{float(val['val/loss']):.3f}",
        "val bpb": f"{float(val['val/bpb']):.3f}",
        "tokens/s": f"{speed:.0f}",
        "total params": f"{total / 1e6:.2f}M",
        "active params": f"{active / 1e6:.2f}M",
        "dropped (train)": fmt(statistics.mean(train_drop) if train_drop else None, ".3f"),
        "dropped (val)": fmt(val_drop, ".3f"),
        "LB loss (train)": fmt(statistics.mean(train_lb) if train_lb else None, ".3f"),
        "wall s": f"{wall:.0f}",
    }


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("LAB_RUNS_DIR", "runs")) / "moe_ablation"
    table = {}
    for variant in sorted(p for p in root.iterdir() if p.is_dir()):
        run = finished_run(variant)
        if run is not None:
            table[variant.name] = summarize(run)
    columns = list(next(iter(table.values())))
    print("| variant | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, values in table.items():
        print(f"| {name} | " + " | ".join(values[c] for c in columns) + " |")


if __name__ == "__main__":
    main()
