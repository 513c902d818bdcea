"""lab.runtime.cli.ladder: a rung's shape and budget set trainer.max_steps, warmup and validation (against hand
counts), the non-embedding count, and each bad input is one `error:` line naming the fix."""
from __future__ import annotations

import math
import re

import pytest
from conftest import LIMIT

from lab.models.gpt import GPT
from lab.runtime.cli.ladder import apply_ladder, parameter_counts
from tests.entry.test_entry_errors import run_entry

NANO = ["+experiment=gpt_nano_char", "+ladder=smoke"]  # batch 12 x context 64 = 768 tokens a step


def gpt_block(d: int) -> int:
    """A GPT-2 block's parameters by hand: qkv, projection, FFN up and down (with biases), two layernorms."""
    return (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d


def test_rung_budget_sets_steps_warmup_and_validation_by_hand(compose):
    """Rung s (d 32, 1 layer, k = 1): N = one block + the final norm; tokens = N; steps rounded up to the 4
    validations; warmup 10%. Catches the embedding counted in N, steps from tokens without the batch, or the
    validation interval not dividing the steps."""
    cfg = compose([*NANO, "ladder.rung=s"])
    apply_ladder(cfg)
    n = gpt_block(32) + 2 * 32
    steps = math.ceil(n / 768 / 4) * 4
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads) == (32, 1, 2)  # heads: 32 / head_dim 16
    assert cfg.trainer.max_steps == steps == 20
    assert cfg.trainer.val_check_interval == steps // 4
    assert cfg.task.scheduler.warmup_steps == round(0.1 * steps)
    assert cfg.task.scheduler.total_steps == steps  # the decay follows


def test_flops_budget_divides_by_the_flops_per_token(compose):
    """ladder.flops: tokens = FLOPs / (6 x matmul params + 12 x layers x width x context)."""
    cfg = compose([*NANO, "ladder.rung=m", "ladder.flops=1e10", "ladder.val_checks=1"])
    apply_ladder(cfg)
    d, layers, t, vocab_matmul = 32, 2, 64, None
    per_token_without_head = 6 * (layers * gpt_block(d) + 2 * d) + 12 * layers * d * t
    # the tied output matrix is in a matrix product: 6 x vocab x d more per token; the meta model used vocab 256
    vocab_matmul = 6 * 256 * d
    assert cfg.trainer.max_steps == math.ceil(1e10 / (per_token_without_head + vocab_matmul) / 768)


@pytest.mark.parametrize("tied", [True, False])
def test_non_embedding_count_leaves_out_the_vocabulary_matrices(tied):
    v, d, t = 50, 32, 16
    counts = parameter_counts(GPT(vocab_size=v, d_model=d, n_heads=4, n_layers=2, max_seq_len=t, positions="learned",
                                  tie_embeddings=tied))
    blocks = 2 * gpt_block(d) + 2 * d
    assert counts["params/non_embedding"] == blocks
    assert counts["params/total"] == blocks + v * d * (1 if tied else 2) + t * d


BAD = [
    ([*NANO, "ladder.rung=s", "ladder.rungs.s.n_heads=3"],
     r"^ladder rung s: d_model=32 does not divide into 3 heads .*; set ladder.rungs.s.n_heads to a divisor of 32$"),
    ([*NANO, "ladder.rung=s", "ladder.warmup_fraction=null"],
     r"^ladder rung s trains 20 steps \(1 x 12,768 non-embedding params\), no more than its warmup of 100; set ladder.warmup_fraction"),
    (["+experiment=encoder_classifier", "+ladder=smoke", "ladder.rung=s"],
     r"^\+ladder fits a law to the language-model loss, but task is lab.tasks.classification.ClassificationTask; use an LM preset"),
    ([*NANO, "ladder.rung=xxl"], r"^ladder.rung=xxl is not a rung of this ladder; choose one of xs, s, m, l"),
    ([*NANO, "ladder.rung=s", "ladder.tokens_per_param=0"], r"^ladder.tokens_per_param=0.0 must be > 0$"),
    ([*NANO, "ladder.rung=l", "ladder.head_dim=20"],  # 48 = 2 heads of 24, not of 20
     r"^ladder rung l: d_model=48 is not a whole number of heads of ladder.head_dim=20; set ladder.rungs.l.n_heads"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=["heads", "warmup", "task", "rung", "budget", "head_dim"])
def test_bad_ladder_is_one_error_line_naming_the_fix(tmp_path, monkeypatch, capsys, args, expected):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    code, err = run_entry("train", args, monkeypatch, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("using ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("error: ") and len(lines[0]) <= LIMIT + 7, lines[0]
    assert re.search(expected, lines[0].removeprefix("error: ")), lines[0]
    assert not [p for p in (tmp_path / "runs").rglob("config.yaml") if ".hydra" not in p.parts]  # no run started


def test_a_mup_ladder_trains_each_rung_under_the_mup_rules_and_says_so(compose, caplog):
    """With model.parametrization=mup the rung's model is µP relative to the base width (the rung's width enters the
    per-parameter rates, lab.nn.mup) and the rung's line says the lr is the base width's; under sp it says the lr
    is not transferred. Catches a ladder that drops the parametrization or states the sp rule for a µP ladder."""
    cfg = compose([*NANO, "ladder.rung=m", "model.parametrization=mup", "model.mup_base_width=16"])
    with caplog.at_level("INFO", logger="lab"):
        apply_ladder(cfg)
    assert cfg.model.parametrization == "mup" and cfg.model.d_model == 32
    assert "at the µP base width 16" in caplog.text
    caplog.clear()
    cfg = compose([*NANO, "ladder.rung=m"])
    with caplog.at_level("INFO", logger="lab"):
        apply_ladder(cfg)
    assert "sp: not transferred" in caplog.text


def test_a_rungs_devices_and_accumulation_set_the_trainer_and_divide_its_steps(compose):
    """Rung l (d 48, 2 layers) on 2 devices with accumulation 3: 6 x 768 tokens per step, so its steps are
    N / 4608 rounded up to the 4 validations, by hand; the trainer gets both settings, rung xs keeps the run's.
    Catches the rung's trainer settings applied after the budget is computed (N / 768 steps)."""
    cfg = compose([*NANO, "ladder.rung=l", "trainer.devices=1", "+ladder.rungs.l.devices=2",
                   "+ladder.rungs.l.accumulate_grad_batches=3"])
    apply_ladder(cfg)
    n = 2 * gpt_block(48) + 2 * 48
    assert (cfg.trainer.devices, cfg.trainer.accumulate_grad_batches) == (2, 3)
    assert cfg.trainer.max_steps == math.ceil(n / (768 * 6) / 4) * 4 < math.ceil(n / 768 / 4) * 4
    other = compose([*NANO, "ladder.rung=xs", "trainer.devices=1", "+ladder.rungs.l.devices=2"])
    apply_ladder(other)
    assert other.trainer.devices == 1
