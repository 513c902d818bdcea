"""Statistics over numbers: metric directions, mean ± std and 95% intervals, a variant against the baseline
(paired or Welch t-test with the difference's interval and an effect size), Holm's correction, medians and
the Pareto front. Nothing here knows how runs are read or grouped (lab.report.runs, lab.report.variants)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Metric direction by name: lower is better for losses, higher for scores; others are shown, not ranked.
LOWER_BETTER = ("loss", "ppl", "perplexity", "bpb", "error", "wer", "cer")
HIGHER_BETTER = ("acc", "bleu", "chrf", "f1", "precision", "recall", "mfu", "tokens_per_s", "auc")
EXPERT = re.compile(r"expert_(\d+)$")
ALPHA = 0.05  # "beyond seed noise" means p < ALPHA (Holm-adjusted when several variants are compared)


def metric_direction(column: str) -> str | None:
    name = column.lower().rsplit("/", 1)[-1]
    if any(k in name for k in LOWER_BETTER):
        return "min"
    if any(k in name for k in HIGHER_BETTER):
        return "max"
    return None


def is_moe(column: str) -> bool:
    """MoE routing columns: `<stage>/moe/<layer>/...` (lab tasks) or `moe/...`."""
    return "moe" in column.split("/")[:2]


def _t(df: float) -> float:
    from scipy import stats  # noqa: PLC0415 - scipy is only needed once there are seeds

    return float(stats.t.ppf(1 - ALPHA / 2, df))


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
        half = _t(self.n - 1) * self.std / math.sqrt(self.n)
        return self.mean - half, self.mean + half


@dataclass
class Comparison:
    """A variant against the baseline on one metric."""
    diff: float  # mean(variant) - mean(baseline); for paired seeds also the mean per-seed difference
    p: float | None  # None: no test possible (n = 1, no variance, values at different steps)
    test: str  # "paired t-test", "Welch t-test", or why there is none
    interval: tuple[float, float] | None = None  # 95% confidence interval of diff
    effect: float | None = None  # standardised difference: Cohen's d_z (paired) or d (pooled std, Welch)
    effect_name: str = ""
    p_adjusted: float | None = None  # Holm-adjusted over the variants compared with one baseline

    @property
    def significant(self) -> bool:
        p = self.p_adjusted if self.p_adjusted is not None else self.p
        return p is not None and p < ALPHA


def compare(baseline: dict[str, float], variant: dict[str, float]) -> Comparison:
    """baseline / variant: seed label -> metric value. Seeds matching exactly (2 or more) -> paired t-test on
    the per-seed differences (interval of their mean, d_z = mean / std of the differences); else Welch's
    t-test (unequal variances; Welch-Satterthwaite interval, d = difference / pooled std); one run on
    either side -> no test."""
    from scipy import stats  # noqa: PLC0415

    a, b = list(baseline.values()), list(variant.values())
    diff = sum(b) / len(b) - sum(a) / len(a)
    if len(a) < 2 or len(b) < 2:
        return Comparison(diff, None, "no seeds, no test")
    if set(baseline) == set(variant):
        seeds = sorted(baseline)
        d = Stat([variant[s] - baseline[s] for s in seeds])
        if max(d.values) == min(d.values):
            return Comparison(diff, None, "identical differences, no test")
        p = float(stats.ttest_rel([variant[s] for s in seeds], [baseline[s] for s in seeds]).pvalue)
        return Comparison(d.mean, p, "paired t-test", d.interval, d.mean / d.std, "d_z")
    sa, sb = Stat(a), Stat(b)
    if sa.std == 0 and sb.std == 0:
        return Comparison(diff, None, "no variance, no test")
    va, vb = sa.std**2 / sa.n, sb.std**2 / sb.n
    df = (va + vb) ** 2 / (va**2 / (sa.n - 1) + vb**2 / (sb.n - 1))
    half = _t(df) * math.sqrt(va + vb)
    pooled = math.sqrt(((sa.n - 1) * sa.std**2 + (sb.n - 1) * sb.std**2) / (sa.n + sb.n - 2))
    p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    return Comparison(diff, p, "Welch t-test", (diff - half, diff + half), diff / pooled, "d")


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error rate) of the p-values that exist; None stays None.
    Sorted ascending, the i-th (from 0) of m becomes max over j <= i of min(1, (m - j) p_j)."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    out: list[float | None] = [None] * len(pvalues)
    running, m = 0.0, len(present)
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


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
