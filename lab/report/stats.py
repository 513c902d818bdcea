"""Aggregation over runs: metric directions, the config keys that tell runs apart, the summary tables."""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from lab.report.format import fmt

if TYPE_CHECKING:
    from lab.report.runs import Run

# Metric direction by name: lower is better for losses, higher for scores; others are shown, not ranked.
LOWER_BETTER = ("loss", "ppl", "perplexity", "bpb", "error", "wer", "cer")
HIGHER_BETTER = ("acc", "bleu", "chrf", "f1", "precision", "recall", "mfu", "tokens_per_s", "auc")
# Config keys that differ between any two runs without being a choice (where the run was written).
NOT_CHOICES = ("paths.", "dir", "save_dir", "default_root_dir", "dirpath")
X_COLUMNS = ("step", "epoch")
EXPERT = re.compile(r"expert_(\d+)$")


def metric_direction(column: str) -> str | None:
    name = column.lower().rsplit("/", 1)[-1]
    if any(k in name for k in LOWER_BETTER):
        return "min"
    if any(k in name for k in HIGHER_BETTER):
        return "max"
    return None


def distinguishing_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs (the sweep's axes), locations excluded."""
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if not any(n in k for n in NOT_CHOICES)
            and len({repr(r.config.get(k)) for r in runs}) > 1]


def metric_columns(runs: list[Run]) -> list[str]:
    cols: dict[str, None] = {}
    for r in runs:
        for row in r.rows:
            cols.update(dict.fromkeys(k for k in row if k not in X_COLUMNS))
    return sorted(cols, key=lambda c: (c.split("/")[0] not in ("val", "test", "train"), c))


def summary(runs: list[Run], keys: list[str], optimized: str | None) -> tuple[list[str], list[list[str]]]:
    """One row per run: the distinguishing settings, parameters, the optimized metric (best / final), throughput."""
    header = ["run", *keys, "params", "active params"]
    if optimized:
        header += [f"best {optimized}", f"final {optimized}"]
    header += ["tokens/s (device)", "tokens/s (global)", "MFU", "steps"]
    rows = []
    for r in runs:
        row = [r.name, *(fmt(r.config.get(k)) for k in keys), fmt(r.params.get("total")), fmt(r.params.get("active"))]
        if optimized:
            row += [fmt(r.best(optimized)), fmt(r.final(optimized))]
        steps = [row_["step"] for row_ in r.rows if "step" in row_]
        row += [fmt(median(r.series("perf/tokens_per_s")[1])), fmt(median(r.series("perf/tokens_per_s_global")[1])),
                fmt(median(r.series("perf/mfu")[1])), fmt(int(max(steps)) if steps else None)]
        rows.append(row)
    return header, rows


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if math.isfinite(v))
    return values[len(values) // 2] if values else None


def all_metrics(runs: list[Run], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """Every metric column: final value, and the best one where the metric has a direction."""
    header = ["run", *columns]
    rows = []
    for r in runs:
        cells = []
        for c in columns:
            final, best = r.final(c), r.best(c)
            cells.append(fmt(final) + (f" (best {fmt(best)})" if best is not None and best != final else ""))
        rows.append([r.name, *cells])
    return header, rows


def is_moe(column: str) -> bool:
    """MoE routing columns: `<stage>/moe/<layer>/...` (lab tasks) or `moe/...`."""
    return "moe" in column.split("/")[:2]
