"""One line per run directory: throughput (median of the logged windows after the first), MFU, the last
validation metrics, the test metrics and the wall time, read from <run>/csv/metrics.csv and train.log.

    python experiments/gpu/summarize.py runs/gpu/*/*
"""
from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path


def summarize(run: Path) -> str:
    with open(run / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    col = lambda key: [float(r[key]) for r in rows if r.get(key)]  # noqa: E731
    parts = [str(run)]
    for key in ("perf/tokens_per_s", "perf/mfu"):
        values = col(key)[1:]  # the first window holds warm-up (and compilation)
        if values:
            parts.append(f"{key.split('/')[1]} {statistics.median(values):.4g} (median of {len(values)})")
    for key in sorted({k for r in rows for k in r if k.startswith(("val/", "test/")) and "/moe/" not in k}):
        values = col(key)
        if values:
            parts.append(f"{key} {values[-1]:.4g}")
    log = (run / "train.log").read_text() if (run / "train.log").exists() else ""
    if m := re.search(r"finished in ([\d.]+)s", log):
        parts.append(f"wall {m.group(1)}s")
    if m := re.search(r"first training step ([\d.]+)s after launch", log):
        parts.append(f"first step {m.group(1)}s")
    return " | ".join(parts)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        path = Path(arg)
        if (path / "csv" / "metrics.csv").exists():
            print(summarize(path))
