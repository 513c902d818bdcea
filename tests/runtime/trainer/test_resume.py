"""Exact resume: a run interrupted after step k and resumed from its last.ckpt continues the uninterrupted
run's train-loss curve step for step (same batches, same optimizer state, same dropout masks), with and
without gradient accumulation, for every datamodule's sampler (LM windows; classifier and translator bucketed
batches; translator token-budget and random batches), and under DDP.

The "interrupted" run is the uninterrupted one: tests.interrupt.SnapshotLast copies its last.ckpt (written
by the validation before step k + 1) aside at step k + 1, which is the file a run killed then leaves behind.
Each case is picked so that the checkpoint falls mid-epoch (and, for the sentence datamodules, in a later
epoch than the first), where skipping too few or too many batches changes the next step's loss.
trainer.val_check_interval counts optimizer steps (lab.runtime.trainer.intervals scales it by the accumulation), so
every validation, and the checkpoint it writes, falls on a step boundary.
"""
from __future__ import annotations

import random

import pytest
from conftest import TINY_LM, metric_by_step, read_metrics, run_dirs, train

# save_top_k=-1: Lightning writes last.ckpt only when it also writes a top-k checkpoint, i.e. when the monitored
# metric improved; keeping every validation's checkpoint makes last.ckpt the latest validation's
QUIET = ["logger.wandb.mode=disabled", "callbacks.progress=null", "test=false", "trainer.log_every_n_steps=1",
         "callbacks.checkpoint.save_top_k=-1"]
LM = [*TINY_LM, *QUIET, "model.n_layers=1", "model.d_model=32", "model.dropout=0.1", "task.samples=null",
      "task.scheduler.warmup_steps=2", "data.eval_batches=1"]


def classifier_args(tmp_path) -> list[str]:
    """80 sentences of 2..13 words (64 train after the 80/10/10 split): 8 bucketed batches of 8 per epoch."""
    rng = random.Random(0)
    rows = ["text\tlabel"]
    for i in range(80):
        label = ("good", "bad")[i % 2]
        words = [rng.choice(["the", "film", "plot", "cast", "was", "very", "not", "quite"]) for _ in range(1 + i % 12)]
        rows.append(f"{' '.join(words)} {label}\t{label}")
    (tmp_path / "reviews.tsv").write_text("\n".join(rows) + "\n")
    return ["+experiment=encoder_classifier", "data=text_classification", f"data.train_file={tmp_path}/reviews.tsv",
            "data.vocab_size=200", "data.batch_size=8", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
            "model.max_seq_len=32", "task.scheduler.warmup_steps=2", "task.num_examples=0", *QUIET]


def translator_args(tmp_path) -> list[str]:
    """60 training pairs of 1..12 words in token-budget batches: batch sizes and batch counts vary by epoch."""
    with open(tmp_path / "pairs.tsv", "w") as f:
        for i in range(80):
            words = " ".join(["wort"] * (1 + (i * 7) % 12))
            f.write(f"{words} {i}.\tword {i} {words}.\n")
    return ["+experiment=translator_small", "data=parallel_text", f"data.train_file={tmp_path}/pairs.tsv",
            "data.valid_size=10", "data.test_size=10", "data.vocab_size=300", "data.batch_tokens=400",
            "data.eval_batch_size=10", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
            "task.scheduler.warmup_steps=2", "task.val_bleu_sentences=8", "task.val_decoding.max_len_offset=2",
            "task.num_examples=0", *QUIET]


# name, data args, optimizer steps, steps between validations (each writes last.ckpt), step of the interruption
CASES = {
    "lm": (lambda p: LM, 12, 4, 6),
    # µP away from its base (lab.nn.mup): its per-parameter lrs are param groups of their own, saved and restored
    "lm-mup": (lambda p: [*LM, "model.parametrization=mup", "model.mup_base_width=16"], 12, 4, 6),
    "classifier": (classifier_args, 18, 5, 11),  # resumes at step 10: epoch 1, 2 steps in
    "translator": (translator_args, 16, 5, 12),  # resumes at step 10, after an epoch of another batch count
    # 60 pairs in batches of 12: 5 per epoch; resumes at step 8, epoch 1 (an even batch count per epoch with
    # accumulation 2, so every validation, and the checkpoint it writes, falls between optimizer steps)
    "translator-random-batches": (lambda p: [*translator_args(p), "data.batch_tokens=null", "data.batch_size=12"], 14, 4, 10),
}


def interrupted_and_resumed(tmp_path, args: list[str], steps: int, every: int, stop: int, accum: int):
    """-> (train/loss by step of the uninterrupted run, of the run resumed from its last.ckpt before `stop`)."""
    common = [*args, f"trainer.max_steps={steps}", f"trainer.accumulate_grad_batches={accum}",
              f"trainer.val_check_interval={every}"]  # optimizer steps (lab scales it by the accumulation)
    snapshot = tmp_path / "interrupted.ckpt"
    train([*common, "+callbacks.snapshot._target_=tests.interrupt.SnapshotLast", f"+callbacks.snapshot.at_step={stop}",
           f"+callbacks.snapshot.to={snapshot}"], tmp_path / "full")
    train([*common, f"ckpt_path={snapshot}"], tmp_path / "resumed")
    (full,) = run_dirs(tmp_path / "full")
    (resumed,) = run_dirs(tmp_path / "resumed")
    return metric_by_step(read_metrics(full), "train/loss"), metric_by_step(read_metrics(resumed), "train/loss")


def assert_same_curve(full: dict[int, float], resumed: dict[int, float], start: int, steps: int):
    assert sorted(resumed) == list(range(start, steps)), "the resumed run did not continue from the checkpoint's step"
    assert len({round(v, 4) for v in resumed.values()}) > 1, "a flat curve cannot tell batches apart"
    for step, loss in resumed.items():
        assert loss == pytest.approx(full[step], rel=1e-5, abs=1e-6), f"step {step}: resumed {loss} vs {full[step]}"


@pytest.mark.parametrize("accum", [1, 2], ids=["accum1", "accum2"])
@pytest.mark.parametrize("case", CASES)
def test_resumed_run_continues_the_uninterrupted_curve(tmp_path, case, accum):
    make_args, steps, every, stop = CASES[case]
    full, resumed = interrupted_and_resumed(tmp_path, make_args(tmp_path), steps, every, stop, accum)
    assert_same_curve(full, resumed, (stop - 1) // every * every, steps)


def test_resumed_muon_run_continues_the_uninterrupted_curve(tmp_path):
    """MuonAdamW (momentum buffers and AdamW moments in one state) with the warmup-stable-decay schedule, the
    decay under way at the interruption: the same curve step for step."""
    args = [*LM, "+task/optimizer=muon", "task.scheduler._target_=lab.tasks.optim.warmup_stable_decay",
            "+task.scheduler.decay_fraction=0.75"]
    full, resumed = interrupted_and_resumed(tmp_path, args, 12, 4, 6, accum=1)
    assert_same_curve(full, resumed, 4, 12)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["lm", "classifier"])
def test_resumed_ddp_run_continues_the_uninterrupted_curve(tmp_path, case):
    """2 CPU processes with accumulation 2: each rank skips its own share of the consumed batches."""
    make_args, steps, every, stop = CASES[case]
    args = [*make_args(tmp_path), "trainer=ddp_cpu"]
    full, resumed = interrupted_and_resumed(tmp_path, args, steps, every, stop, accum=2)
    assert_same_curve(full, resumed, (stop - 1) // every * every, steps)
