"""Results table of the translator study (run.sh) as Markdown, from each run's CSV metrics, train.log and
the greedy lab.eval output (test_greedy.txt).

    python experiments/translator/summarize.py [RUNS_DIR/translator_study]

Per run (latest finished run of each layout and seed): final validation loss, test loss, test BLEU/chrF
with beam 5 (the training run's test pass) and greedy, wall time; then mean ± std over seeds per layout.
"""
from __future__ import annotations

import csv
import os
import re
import statistics
import sys
from pathlib import Path

COLUMNS = ["val loss", "test loss", "BLEU greedy", "BLEU beam 5", "chrF greedy", "chrF beam 5", "wall s"]


def finished_run(seed_dir: Path) -> Path | None:
    runs = [p for p in sorted(seed_dir.iterdir()) if (p / "train.log").exists()
            and "finished in" in (p / "train.log").read_text() and (p / "test_greedy.txt").exists()]
    return runs[-1] if runs else None


def summarize(run: Path) -> dict[str, float]:
    with open(run / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    val = [r for r in rows if r.get("val/loss")][-1]
    test = [r for r in rows if r.get("test/bleu")][-1]
    greedy = dict(re.findall(r"^(test/\w+): ([\d.]+)$", (run / "test_greedy.txt").read_text(), re.MULTILINE))
    wall = re.search(r"finished in ([\d.]+)s", (run / "train.log").read_text()).group(1)
    return {"val loss": float(val["val/loss"]), "test loss": float(test["test/loss"]),
            "BLEU greedy": float(greedy["test/bleu"]), "BLEU beam 5": float(test["test/bleu"]),
            "chrF greedy": float(greedy["test/chrf"]), "chrF beam 5": float(test["test/chrf"]), "wall s": float(wall)}


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(os.environ.get("LAB_RUNS_DIR", "runs")) / "translator_study")
    per_run, per_layout = [], {}
    for layout_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for seed_dir in sorted(p for p in layout_dir.iterdir() if p.is_dir()):
            if (run := finished_run(seed_dir)) is None:
                continue
            result = summarize(run)
            per_layout.setdefault(layout_dir.name, []).append(result)
            per_run.append([layout_dir.name, seed_dir.name] + [f"{result[c]:.3f}" if "loss" in c else f"{result[c]:.2f}"
                                                                for c in COLUMNS])
    print(table(["experiment", "seed"] + COLUMNS, per_run), end="\n\n")
    rows = []
    for layout, results in per_layout.items():
        def stat(c: str, results=results) -> str:
            values = [r[c] for r in results]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.mean(values):.3f} ± {sd:.3f}" if "loss" in c else f"{statistics.mean(values):.2f} ± {sd:.2f}"
        rows.append([layout, str(len(results))] + [stat(c) for c in COLUMNS])
    print(table(["experiment", "seeds"] + COLUMNS, rows))


if __name__ == "__main__":
    main()
