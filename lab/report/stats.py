"""Aggregation over runs: metric directions, grouping seeds into variants, mean ± std and 95% intervals,
and whether a variant differs from the baseline beyond seed noise (scipy's t-tests)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report.runs import Run

# Metric direction by name: lower is better for losses, higher for scores; others are shown, not ranked.
LOWER_BETTER = ("loss", "ppl", "perplexity", "bpb", "error", "wer", "cer")
HIGHER_BETTER = ("acc", "bleu", "chrf", "f1", "precision", "recall", "mfu", "tokens_per_s", "auc")
# Config keys that differ between any two runs without being a choice (where and when the run was written).
NOT_CHOICES = ("paths.", "dir", "save_dir", "default_root_dir", "dirpath", "ckpt_path", "cache_dir")
X_COLUMNS = ("step", "epoch")
EXPERT = re.compile(r"expert_(\d+)$")
ALPHA = 0.05  # "beyond seed noise" means p < ALPHA


def metric_direction(column: str) -> str | None:
    name = column.lower().rsplit("/", 1)[-1]
    if any(k in name for k in LOWER_BETTER):
        return "min"
    if any(k in name for k in HIGHER_BETTER):
        return "max"
    return None


def is_seed(key: str) -> bool:
    """`seed`, `data.seed`, ...: what repeats of one variant differ by."""
    return key.rsplit(".", 1)[-1] == "seed"


def is_location(key: str) -> bool:
    """Where a run was written, its name (a label: studies often put the variant and seed in it) and its
    identity (the W&B run id each job of a sweep gets)."""
    return any(n in key for n in NOT_CHOICES) or key.rsplit(".", 1)[-1] in ("name", "id")


def choice_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, other than seeds, locations and names: the choices."""
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if not is_location(k) and not is_seed(k) and len({repr(r.config.get(k)) for r in runs}) > 1]


def metric_columns(runs: list[Run]) -> list[str]:
    cols: dict[str, None] = {}
    for r in runs:
        for row in r.rows:
            cols.update(dict.fromkeys(k for k in row if k not in X_COLUMNS))
    return sorted(cols, key=lambda c: (c.split("/")[0] not in ("val", "test", "train"), c))


def is_moe(column: str) -> bool:
    """MoE routing columns: `<stage>/moe/<layer>/...` (lab tasks) or `moe/...`."""
    return "moe" in column.split("/")[:2]


@dataclass
class Stat:
    """Summary of one metric over a variant's seeds."""
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n

    @property
    def std(self) -> float | None:
        """Sample standard deviation (n - 1); None for a single run."""
        if self.n < 2:
            return None
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (self.n - 1))

    @property
    def interval(self) -> tuple[float, float] | None:
        """95% confidence interval of the mean (Student's t with n - 1 degrees of freedom)."""
        if self.n < 2:
            return None
        from scipy import stats  # noqa: PLC0415 - scipy is only needed once there are seeds

        half = stats.t.ppf(1 - ALPHA / 2, self.n - 1) * self.std / math.sqrt(self.n)
        return self.mean - half, self.mean + half


@dataclass
class Comparison:
    """A variant against the baseline on one metric."""
    diff: float  # mean(variant) - mean(baseline)
    p: float | None  # None: no test possible (n = 1, or no variance)
    test: str  # "Welch t-test", "paired t-test (seeds matched)", or why there is none

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA


def compare(baseline: dict[str, float], variant: dict[str, float]) -> Comparison:
    """baseline / variant: seed label -> metric value. Seeds matching exactly (2 or more) -> paired t-test on
    the per-seed differences; else Welch's t-test (unequal variances); one run on either side -> no test."""
    from scipy import stats  # noqa: PLC0415

    a, b = list(baseline.values()), list(variant.values())
    diff = sum(b) / len(b) - sum(a) / len(a)
    if len(a) < 2 or len(b) < 2:
        return Comparison(diff, None, "no seeds, no test")
    if set(baseline) == set(variant):
        seeds = sorted(baseline)
        d = [variant[s] - baseline[s] for s in seeds]
        if max(d) == min(d):
            return Comparison(diff, None, "identical differences, no test")
        return Comparison(diff, float(stats.ttest_rel([variant[s] for s in seeds], [baseline[s] for s in seeds]).pvalue),
                          "paired t-test")
    if max(a) == min(a) and max(b) == min(b):
        return Comparison(diff, None, "no variance, no test")
    return Comparison(diff, float(stats.ttest_ind(b, a, equal_var=False).pvalue), "Welch t-test")


@dataclass
class Variant:
    """Runs that differ only by seed (and location)."""
    label: str
    choices: dict[str, object]  # choice key -> value
    runs: list[Run] = field(default_factory=list)

    def seed_label(self, run: Run) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(run.config.items()) if is_seed(k)) or run.name

    def values(self, column: str) -> dict[str, float]:
        """seed label -> the run's final value of column (runs that did not log it are left out)."""
        out = {}
        for r in self.runs:
            v = r.final(column)
            if v is not None and math.isfinite(v):
                out[self.seed_label(r)] = v
        return out

    def stat(self, column: str) -> Stat | None:
        values = list(self.values(column).values())
        return Stat(values) if values else None

    def param(self, kind: str) -> int | None:
        counts = {r.params.get(kind) for r in self.runs} - {None}
        return counts.pop() if len(counts) == 1 else None

    def throughput(self) -> float | None:
        """Median over the variant's runs of each run's median global tokens/s."""
        per_run = [median(r.series("perf/tokens_per_s_global")[1]) for r in self.runs]
        return median([v for v in per_run if v is not None])


def group_variants(runs: list[Run]) -> tuple[list[Variant], list[str]]:
    """-> (variants in first-seen order, the choice keys). A variant is labelled by its runs' `name` when that
    tells the variants apart (one name per variant, a different one for each), else by its choices (the last
    component of each key)."""
    keys = choice_keys(runs)
    by_key: dict[tuple, Variant] = {}
    for r in runs:
        key = tuple(repr(r.config.get(k)) for k in keys)
        if key not in by_key:
            choices = {k: r.config.get(k) for k in keys}
            label = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in choices.items()) or r.config.get("name") or r.name
            by_key[key] = Variant(str(label), choices)
        by_key[key].runs.append(r)
    variants = list(by_key.values())
    names = [{str(r.config.get("name")) for r in v.runs} for v in variants]
    if len(variants) > 1 and all(len(n) == 1 for n in names) and len({n.pop() for n in names}) == len(variants):
        for v in variants:
            v.label = str(v.runs[0].config.get("name"))
    return variants, keys


def sort_variants(variants: list[Variant], metric: str) -> list[Variant]:
    """Best first in the metric's direction (variants without the metric last); unranked metrics keep order."""
    direction = metric_direction(metric)
    if direction is None:
        return variants
    sign = 1 if direction == "min" else -1
    return sorted(variants, key=lambda v: (v.stat(metric) is None, sign * (v.stat(metric).mean if v.stat(metric) else 0)))


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None and math.isfinite(v))
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def pareto_front(points: list[tuple[float, float]], minimize_y: bool, minimize_x: bool) -> list[int]:
    """Indices of the points no other point beats on both axes (ties kept), sorted by x."""
    def better_or_equal(a, b) -> bool:
        ax, ay = (a[0] if minimize_x else -a[0]), (a[1] if minimize_y else -a[1])
        bx, by = (b[0] if minimize_x else -b[0]), (b[1] if minimize_y else -b[1])
        return ax <= bx and ay <= by and (ax < bx or ay < by)

    front = [i for i, p in enumerate(points) if not any(better_or_equal(q, p) for q in points)]
    return sorted(front, key=lambda i: points[i][0])
