"""Every logged metric is the global one (docs/scale_out.md, "What each logged metric is"): a tiny MoE language model
run 12 steps at global batch 12 in one process, in one process accumulating 2 micro-batches of 6, and in 2 DDP
processes of 6 logs the same values, step for step (slow: subprocess runs).

The learning rate is too small to change a float32 weight, so the three runs hold the same weights at every step
and differ only in how each global batch is split: a routing decision that float noise in the weights would flip
(one token's expert: 7e-4 of an expert's share) cannot blur the comparison. Which values agree follows from what
each one is: the training loss and the routing statistics that are means over tokens (z_loss, entropy, dropped,
expert shares) are means over the step's micro-batches and processes, so all three runs agree (logging the last
micro-batch's or rank 0's value is off by O(1e-2)); the load-balancing loss (and the aux loss it is part of) is a
product of two means, computed per micro-batch as the gradient uses it (and per validation batch, which
accumulation and DDP split too), so it depends on the split and is not compared. Validation statistics are means
over every process's batches."""
from __future__ import annotations

import pytest
from conftest import TINY_LM, read_metrics, run_dirs, train

# dropless routing: with a capacity, a micro-batch of 6 drops other tokens than a batch of 12
ARGS = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=12", "trainer.val_check_interval=6", "test=false", "callbacks.progress=null", "task.samples=null",
    "model.moe={num_experts:4,top_k:2,capacity_factor:null}", "data.eval_batches=2", "task.optimizer.lr=1e-12",
    "task.scheduler.min_lr=0"]
TOLERANCE = dict(rel=1e-4, abs=1e-6)
PER_MICRO_BATCH = ("load_balance", "aux_loss")  # products of means: per (micro-)batch, as the gradient sees them


def logged(run) -> dict[tuple[int, str], float]:
    """(step, metric) -> value for every train/ and val/ metric the run logged."""
    return {(int(r["step"]), k): float(v) for r in read_metrics(run) for k, v in r.items()
            if v and k.startswith(("train/", "val/"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[tuple[int, str], float]]:
    out = {}
    for name, extra in [("one", []), ("accumulate", ["trainer.accumulate_grad_batches=2"]), ("ddp", ["trainer=ddp_cpu"])]:
        where = tmp_path_factory.mktemp(name)
        train([*ARGS, *extra], where)
        (run,) = run_dirs(where)
        out[name] = logged(run)
    return out


def assert_same(a: dict, b: dict, keys) -> None:
    keys = sorted(keys)
    assert keys
    wrong = [(k, a[k], b[k]) for k in keys if a[k] != pytest.approx(b[k], **TOLERANCE)]
    assert not wrong, wrong[:5]


@pytest.mark.slow
def test_each_run_logs_the_same_metrics_at_the_same_steps(runs):
    one = runs["one"]
    assert set(runs["accumulate"]) == set(runs["ddp"]) == set(one)
    assert {s for s, k in one if k == "train/loss"} == set(range(12))
    assert {"train/moe/decoder.0/expert_3", "val/moe/decoder.1/z_loss", "train/aux_loss"} <= {k for _, k in one}


@pytest.mark.slow
def test_accumulated_micro_batches_log_the_steps_mean(runs):
    """train/loss and the routing statistics of a step of 2 accumulated micro-batches are their mean: the last
    micro-batch's value (Lightning's on_step value) differs from the 12-row batch's by O(1e-2)."""
    one, accumulate = runs["one"], runs["accumulate"]
    assert_same(one, accumulate, [k for k in one if not k[1].endswith(PER_MICRO_BATCH)])


@pytest.mark.slow
def test_two_ddp_processes_log_the_global_values(runs):
    """Under DDP every value is reduced over both processes: as one process logs it for the whole batch."""
    one, ddp = runs["one"], runs["ddp"]
    assert_same(one, ddp, [k for k in ddp if not k[1].endswith(PER_MICRO_BATCH)])
