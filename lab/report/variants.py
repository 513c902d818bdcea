"""Runs grouped into variants (runs that differ only by seed), read at a common budget: by default the
largest step every run with a value reached, so a run stopped early (interrupted, still running) is never
compared with one trained longer; or, with `--budget finished`, finished runs only, each at its end."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from lab.errors import LabError
from lab.report.runs import DEAD, Run
from lab.report.stats import Stat, median, metric_direction

# Config keys that differ between any two runs without being a choice (where and when the run was written).
NOT_CHOICES = ("paths.", "dir", "save_dir", "default_root_dir", "dirpath", "ckpt_path", "cache_dir")
X_COLUMNS = ("step", "epoch")
# The page's other x-axes: tokens seen and training time (logged by Throughput), training FLOPs when logged.
X_AXES = {"tokens": "perf/tokens_seen", "flops": "perf/flops_seen", "time": "perf/train_s"}
# Machine-independent costs, most telling first: (x-axis, status.json's final metric, words)
COSTS = (("flops", "cost/train_flops", "training FLOPs"), ("tokens", "cost/tokens", "tokens seen"))
BUDGETS = ("common", "finished")
VALUES = ("final", "best")


def is_seed(key: str) -> bool:
    """`seed`, `data.seed`, ...: what repeats of one variant differ by."""
    return key.rsplit(".", 1)[-1] == "seed"


def is_location(key: str) -> bool:
    """Where a run was written, its name (a label: studies often put the variant and seed in it) and its
    identity (the W&B run id each job of a sweep gets)."""
    return any(n in key for n in NOT_CHOICES) or key.rsplit(".", 1)[-1] in ("name", "id")


def is_ignored(key: str, ignore: tuple[str, ...]) -> bool:
    """`--ignore model.rope_base` drops that key; `--ignore logger.` every key under logger."""
    return any(key == i or (i.endswith(".") and key.startswith(i)) for i in ignore)


def varying_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, other than seeds, locations and names."""
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if not is_location(k) and not is_seed(k) and len({repr(r.config.get(k)) for r in runs}) > 1]


def choice_keys(runs: list[Run], ignore: tuple[str, ...] = ()) -> list[str]:
    """The varying keys the user did not set aside with --ignore: the choices that make a variant."""
    return [k for k in varying_keys(runs) if not is_ignored(k, ignore)]


def ignored_note(runs: list[Run], ignore: tuple[str, ...]) -> str:
    """One sentence naming the varying keys --ignore set aside, with their values (runs were grouped across
    them), and the --ignore entries that matched nothing; "" when --ignore was not given."""
    if not ignore:
        return ""
    dropped = [k for k in varying_keys(runs) if is_ignored(k, ignore)]
    unused = [i for i in ignore if not any(is_ignored(k, (i,)) for k in varying_keys(runs))]
    said = "; ".join(f"{k} ({', '.join(sorted({repr(r.config.get(k)) for r in runs}))})" for k in dropped)
    return (f"Grouped across {len(dropped)} ignored key(s) whose values differ between runs: {said or 'none'}"
            + (f"; --ignore {' '.join(unused)} matched no key that varies." if unused else "."))


def metric_columns(runs: list[Run]) -> list[str]:
    cols: dict[str, None] = {}
    for r in runs:
        for row in r.rows:
            cols.update(dict.fromkeys(k for k in row if k not in X_COLUMNS))
    return sorted(cols, key=lambda c: (c.split("/")[0] not in ("val", "test", "train"), c))


def x_at(run, axis: str, steps: list[float]) -> list[float] | None:
    """The run's tokens seen or training seconds at each step: linear between the steps it logged them at
    (from 0 at step 0), at its last rate past the last; None when the run did not log them."""
    logged = list(zip(*run.series(X_AXES[axis])))
    if not logged:
        return None
    pts = [(0.0, 0.0), *sorted(logged)]
    out, j = [], 0
    for s in steps:
        while j + 1 < len(pts) and pts[j + 1][0] < s:
            j += 1
        (s0, x0), (s1, x1) = pts[j], pts[min(j + 1, len(pts) - 1)]
        if s1 <= s0:  # past the last point: its overall rate
            out.append(pts[-1][1] * s / pts[-1][0] if pts[-1][0] else 0.0)
        else:
            out.append(x0 + (x1 - x0) * (s - s0) / (s1 - s0))
    return out


def run_cost(run: Run, axis: str, final: str, step: float | None) -> float | None:
    """The run's machine-independent cost up to a step: its logged column at that step, else status.json's
    final value when the step is the run's end (a final value is never scaled to an earlier step: a guess)."""
    if step is not None and (x := x_at(run, axis, [step])) is not None:
        return x[0]
    if final in run.final_metrics and (step is None or run.last_step is None or step >= run.last_step):
        return run.final_metrics[final]
    return None


def concurrent(runs: list[Run]) -> str:
    """'' or one sentence naming the runs that trained at the same time on one host: their wall time and
    tokens/s measure the machine's load too, not only the variant."""
    spans = [r for r in runs if r.host and r.started is not None and r.ended is not None]
    hosts: dict[str, set[str]] = {}
    for a, b in itertools.combinations(spans, 2):
        if a.host == b.host and a.started < b.ended and b.started < a.ended:
            hosts.setdefault(a.host, set()).update((a.name, b.name))
    if not hosts:
        return ""
    return ("Runs overlapped in time on one machine (" + "; ".join(f"{len(n)} runs on {h}" for h, n in hosts.items())
            + "): their wall time and tokens/s reflect the machine's load, not only the variant; compare costs by "
            "training FLOPs or tokens.")


def cost_axis(variants: list, metric: str) -> tuple[tuple, str]:
    """(the COSTS entry every variant has, so one axis serves them all; or () , the sentence that says which
    cost the report uses and why)."""
    for i, entry in enumerate(COSTS):
        if variants and all(v.cost(metric, (entry,))[0] is not None for v in variants):
            why = "" if i == 0 else f" ({COSTS[0][2]} were not recorded by every run: {COSTS[0][1]} in status.json " \
                                    f"or {X_AXES[COSTS[0][0]]} in metrics.csv)"
            return (entry,), f"Cost: {entry[2]} up to the compared step, median over seeds{why}."
    return (), "Cost: no run recorded training FLOPs or tokens seen; only parameters and measured speed are shown."


@dataclass
class Budget:
    """Where each run's value of a metric is read. step: the last logged value at or before it (None: each
    run's last). which: that value ("final") or the best one up to there ("best", in the metric's direction)."""
    step: float | None = None
    which: str = "final"

    def point(self, run: Run, column: str) -> tuple[float, float] | None:
        """(step, value) of the run's column under this budget; None when it logged none by then, or when it
        stopped for good (killed, failed) before the budget's step. A run that diverged by then reads
        (the step it diverged at, NaN): it stays diverged, so it is never read at a finite value."""
        if run.diverged_at is not None and (self.step is None or run.diverged_at <= self.step):
            return float(run.diverged_at), math.nan
        if self.step is not None and run.status in DEAD and (run.last_step or 0) < self.step:
            return None
        pts = [(s, v) for s, v in zip(*run.series(column)) if self.step is None or s <= self.step]
        if not pts:
            return None
        direction = metric_direction(column)
        finite = [p for p in pts if math.isfinite(p[1])]
        if self.which == "best" and direction is not None and finite:
            return (min if direction == "min" else max)(finite, key=lambda p: p[1])
        return pts[-1]


def common_step(runs: list[Run], metric: str) -> float | None:
    """The largest step every run that logged the metric reached (its last logged step of any column):
    runs stopped earlier set it (running, interrupted: they go on), runs that logged no value yet do not, nor
    runs that stopped for good (killed, failed, diverged) while another run goes on or finished.
    None when no run logged the metric."""
    logged = [r for r in runs if r.series(metric)[1] and r.last_step is not None]
    alive = [r for r in logged if r.status not in DEAD] or logged
    return min(r.last_step for r in alive) if alive else None


def steps_text(steps) -> str:
    """{99} -> "step 99"; {90, 99} -> "steps 90-99": the steps values were actually read at."""
    steps = sorted(set(steps))
    return f"step {steps[0]:,.0f}" if len(steps) == 1 else f"steps {steps[0]:,.0f}-{steps[-1]:,.0f}"


def read_steps(runs: list[Run], metric: str, budget: Budget) -> list[float]:
    """The steps the runs' finite values of the metric are read at under the budget."""
    return [p[0] for r in runs if (p := budget.point(r, metric)) is not None and math.isfinite(p[1])]


@dataclass
class Variant:
    """Runs that differ only by seed (and location)."""
    label: str
    choices: dict[str, object]  # factor (a choice key, or keys that change together: factorize) -> value
    runs: list[Run] = field(default_factory=list)
    budget: Budget = field(default_factory=Budget)
    settings: dict[str, object] = field(default_factory=dict)  # every choice key -> value (the config difference)

    def seed_label(self, run: Run) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(run.config.items()) if is_seed(k)) or run.name

    def points(self, column: str) -> dict[str, tuple[float, float]]:
        """seed label -> (step, value) of the run's column at the budget (runs without one left out)."""
        out = {}
        for r in self.runs:
            p = self.budget.point(r, column)
            if p is not None and math.isfinite(p[1]):
                out[self.seed_label(r)] = p
        return out

    def diverged(self, column: str) -> dict[str, float]:
        """seed label -> the step its run diverged at, for the runs that had diverged by the budget."""
        out = {}
        for r in self.runs:
            p = self.budget.point(r, column)
            if p is not None and not math.isfinite(p[1]):
                out[self.seed_label(r)] = p[0]
        return out

    def values(self, column: str) -> dict[str, float]:
        return {seed: v for seed, (_, v) in self.points(column).items()}

    def stat(self, column: str) -> Stat | None:
        values = list(self.values(column).values())
        return Stat(values) if values else None

    def param(self, kind: str) -> int | None:
        counts = {r.params.get(kind) for r in self.runs} - {None}
        return counts.pop() if len(counts) == 1 else None

    def rate(self, column: str) -> float | None:
        """Median over the variant's runs of each run's median of a rate (all its logged steps): the one
        figure the summary, the metrics table and the cost chart show for it."""
        per_run = [median(r.series(column)[1]) for r in self.runs]
        return median([v for v in per_run if v is not None])

    def throughput(self) -> float | None:
        return self.rate("perf/tokens_per_s_global")

    def cost(self, metric: str, costs: tuple = COSTS) -> tuple[float | None, str]:
        """(median over the runs of their machine-independent cost up to the step the metric is read at, its
        name): training FLOPs when every run recorded them, else tokens seen; (None, "") when neither."""
        for axis, final, words in costs:
            steps = [p[0] if (p := self.budget.point(r, metric)) is not None else r.last_step for r in self.runs]
            per_run = [run_cost(r, axis, final, s) for r, s in zip(self.runs, steps)]
            if per_run and all(c is not None for c in per_run):
                return median(per_run), words
        return None, ""


def group_variants(runs: list[Run], ignore: tuple[str, ...] = ()) -> tuple[list[Variant], list[str]]:
    """-> (variants in first-seen order, the choice keys). A variant is labelled by its runs' `name` when that
    tells the variants apart (one name per variant, a different one for each), else by its choices (the last
    component of each key). ignore: keys (or "prefix." groups of keys) that do not make a variant."""
    keys = choice_keys(runs, ignore)
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


def short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def factorize(variants: list[Variant], keys: list[str], label: str | None = None) -> list[str]:
    """Choice keys whose values change together across the variants (two presets differ in 16 keys: one
    choice, not 16) become one factor: named `label` when given, else "experiment" when the runs' names tell
    those variants apart (the preset or experiment), else by its first key and the count of the others; its
    values the names, else "#1", "#2" in order. A key that changes on its own stays a factor of its own.
    Sets each variant's choices to its factors' values (its settings keep every key) and relabels the variants
    whose label was built from the keys. -> the factors."""
    groups: dict[tuple, list[str]] = {}
    for k in keys:
        seen: dict[str, int] = {}
        groups.setdefault(tuple(seen.setdefault(repr(v.choices[k]), len(seen)) for v in variants), []).append(k)
    multi = [ks for ks in groups.values() if len(ks) > 1]
    if label is not None and len(multi) != 1:
        raise LabError(f"--label {label} names the one set of keys that change together, but these variants have "
                       f"{len(multi)} such sets; leave --label out")
    names = [str(v.runs[0].config.get("name")) for v in variants]
    factors, values = [], []
    for sig, ks in groups.items():
        if len(ks) == 1:
            factors.append(ks[0])
            values.append([v.choices[ks[0]] for v in variants])
            continue
        named = all(len({str(r.config.get("name")) for r in v.runs}) == 1 for v in variants) and all(
            (names[i] == names[j]) == (sig[i] == sig[j]) for i in range(len(variants)) for j in range(len(variants)))
        factors.append(label or ("experiment" if named else f"{short_key(ks[0])} +{len(ks) - 1} keys"))
        values.append(names if named else [f"#{i + 1}" for i in sig])
    for i, v in enumerate(variants):
        by_keys = v.label == " ".join(f"{short_key(k)}={x}" for k, x in v.choices.items())
        v.settings, v.choices = v.choices, {f: vals[i] for f, vals in zip(factors, values)}
        if by_keys:
            v.label = " ".join(f"{short_key(f)}={x}" for f, x in v.choices.items())
    return factors


def sort_variants(variants: list[Variant], metric: str) -> list[Variant]:
    """Best first in the metric's direction (variants with a diverged run after those without, variants without
    the metric last); unranked metrics keep order."""
    direction = metric_direction(metric)
    if direction is None:
        return variants
    sign = 1 if direction == "min" else -1
    return sorted(variants, key=lambda v: (v.stat(metric) is None, bool(v.diverged(metric)),
                                           sign * (v.stat(metric).mean if v.stat(metric) else 0)))
