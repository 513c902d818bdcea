"""Resuming: the checkpoint's config is compared with the run's before any work, and a longer run continues
the learning rate where it was instead of jumping to the new plan."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import TINY_LM, metric_by_step, read_metrics, run_dirs, run_module, train

from lab.errors import LabError
from lab.runtime.trainer.resume import Resume, check_vocabulary, config_changes
from lab.tasks.optim import WarmupCosine

LR, MIN_LR, WARMUP = 1e-3, 1e-4, 5


def cosine_lr(step: int, total: int, start: int = WARMUP, start_lr: float = LR) -> float:
    """Hand-written reference: linear warmup, then cosine from start_lr at `start` to MIN_LR at `total`."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - start) / (total - start))
    return MIN_LR + (start_lr - MIN_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def schedule(total: int) -> WarmupCosine:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=LR)
    return WarmupCosine(opt, WARMUP, total, MIN_LR)


def lrs(sched: WarmupCosine, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    return out


def test_fresh_schedule_is_warmup_then_cosine():
    assert lrs(schedule(30), 35) == pytest.approx([cosine_lr(s, 30) for s in range(35)], rel=1e-12)


@pytest.mark.parametrize("stop", [3, 12, 30], ids=["in-warmup", "mid-decay", "decay-finished"])
def test_longer_resume_continues_the_learning_rate(stop):
    """30-step plan stopped at `stop`, resumed with a 60-step plan: the first resumed step uses the lr the
    old plan gave there, and the decay then reaches MIN_LR at step 60 (a rebuilt plan jumped instead)."""
    first = schedule(30)
    before = lrs(first, stop)
    resumed = schedule(60)
    resumed.load_state_dict(first.state_dict())
    after = lrs(resumed, 60 - stop + 5)
    old_plan_at_stop = cosine_lr(stop, 30)
    assert after[0] == pytest.approx(old_plan_at_stop, rel=1e-12)  # no jump
    start, start_lr = (WARMUP, LR) if stop < WARMUP else (stop, old_plan_at_stop)
    assert after == pytest.approx([cosine_lr(s, 60, start, start_lr) for s in range(stop, 65)], rel=1e-12)
    assert after[60 - stop] == pytest.approx(MIN_LR)
    assert before == pytest.approx([cosine_lr(s, 30) for s in range(stop)])
    if stop >= WARMUP:  # the bug this replaces: the new plan's value at the resumed step
        assert abs(cosine_lr(stop, 60) - after[0]) > 1e-5


def test_config_changes_ignore_the_run_directory():
    saved = {"paths": {"output_dir": "/r/a"}, "ckpt_path": None, "callbacks": {"dirpath": "/r/a/checkpoints"},
             "trainer": {"max_steps": 20}, "model": {"moe": None}}
    now = {"paths": {"output_dir": "/r/b"}, "ckpt_path": "/r/a/x.ckpt", "callbacks": {"dirpath": "/r/b/checkpoints"},
           "trainer": {"max_steps": 40}, "model": {"moe": {"top_k": 2}}}
    assert config_changes(saved, now) == {"trainer.max_steps": (20, 40), "model.moe": (None, "<absent>"),
                                          "model.moe.top_k": ("<absent>", 2)}


def test_another_vocabulary_is_one_error_naming_the_data_setting():
    resume = Resume("x.ckpt", {"vocab_size": 65, "pad_id": 0}, {"data.tokenizer": ("char", "bpe")})
    check_vocabulary(resume, {"vocab_size": 65, "pad_id": 0})
    with pytest.raises(LabError, match=r"vocab_size 65 -> 512.*data.tokenizer 'char' -> 'bpe'"):
        check_vocabulary(resume, {"vocab_size": 512, "pad_id": 0})


# ---- through the CLI, from one 20-step checkpoint whose 30-step schedule is mid-decay -------------------------
BASE = [*TINY_LM, f"task.scheduler.warmup_steps={WARMUP}", "trainer.val_check_interval=20", "test=false"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    runs = tmp_path_factory.mktemp("first")
    train([*BASE, "trainer.max_steps=20", "task.scheduler.total_steps=30"], runs)
    (run,) = run_dirs(runs)
    return run / "checkpoints" / "last.ckpt"


def lr_by_step(run) -> dict[int, float]:
    rows = read_metrics(run)
    column = next(k for k in rows[0] if k.startswith("lr-") and k.endswith("pg1"))
    return metric_by_step(rows, column)


def test_extending_max_steps_on_resume_keeps_the_lr_continuous_and_says_so(checkpoint, tmp_path):
    first = lr_by_step(checkpoint.parents[1])
    assert first[19] == pytest.approx(cosine_lr(19, 30))
    result = train([*BASE, "trainer.max_steps=40", "task.optimizer.lr=0.005", f"ckpt_path={checkpoint}"], tmp_path)
    (run,) = run_dirs(tmp_path)
    resumed = lr_by_step(run)
    assert sorted(resumed) == list(range(20, 40))
    # continuous at the seam, then the documented rule: cosine from there to min_lr at the new end
    assert resumed == pytest.approx({s: cosine_lr(s, 40, 20, cosine_lr(20, 30)) for s in range(20, 40)}, rel=1e-6)
    log = (run / "train.log").read_text()
    warning = [line for line in log.splitlines() if "setting(s) changed" in line]
    assert len(warning) == 1 and "trainer.max_steps 20 -> 40" in warning[0]
    assert "task.optimizer.lr 0.001 -> 0.005 (kept from the checkpoint)" in warning[0]
    assert "lr schedule: total_steps 30 -> 40 at step 20" in log
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args,named", [
    (["model.n_layers=2"], "model.n_layers 4 -> 2"),
    (["model.d_model=64", "model.n_heads=4"], "model.d_model 128 -> 64"),
    (["+experiment=translator_small", "logger.wandb.mode=disabled"], "another task (LanguageModelTask; this run: "
                                       "TranslationTask)"),
], ids=["layers", "width", "task"])
def test_resuming_another_model_or_task_is_one_error_before_any_work(checkpoint, tmp_path, args, named):
    base = [] if args[0].startswith("+experiment") else BASE
    result = run_module("lab.train", [*base, *args, f"ckpt_path={checkpoint}"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "error:" in line]
    assert len(errors) == 1 and named in errors[0] and "Traceback" not in result.stderr
    assert not list(tmp_path.rglob("*.ckpt")), "a checkpoint was written: work started before the check"
    assert "data: " not in result.stdout, "the data was prepared before the check"


def test_a_setting_that_keeps_the_shapes_is_only_a_warning(checkpoint, tmp_path):
    result = train([*BASE, "trainer.max_steps=22", "model.dropout=0.1", f"ckpt_path={checkpoint}"], tmp_path)
    assert "model.dropout 0.0 -> 0.1" in result.stdout


def test_a_checkpoint_from_before_grouped_query_attention_resumes_with_one_note():
    """A run saved before model.n_kv_heads existed (no such key) builds the same parameters as null (one key/value
    head per query head): resuming is the warning's one listed change, not a refusal."""
    from omegaconf import OmegaConf

    from lab.models.gpt import GPTConfig
    from lab.runtime.trainer.resume import parameter_shapes

    now = OmegaConf.to_container(OmegaConf.structured(GPTConfig))  # conf/model/gpt.yaml: the schema's defaults
    saved = {k: v for k, v in now.items() if k != "n_kv_heads"}
    vocab = {"vocab_size": 65}
    assert parameter_shapes(saved, vocab) == parameter_shapes(now, vocab)
    assert config_changes({"model": saved}, {"model": now}) == {"model.n_kv_heads": ("<absent>", None)}
    grouped = parameter_shapes({**now, "positions": "rotary", "n_kv_heads": 2}, vocab)
    assert grouped["decoder.layers.0.self_attn.qkv_proj.weight"] == (128 + 2 * 2 * 32, 128)  # a GQA run: refused
