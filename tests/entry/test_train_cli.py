"""The training CLI end to end, in subprocesses, on a small slice of the real corpus."""
from __future__ import annotations

import pytest
import torch
from conftest import TINY_LM, metric_by_step, read_metrics, run_dirs, run_module, train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    result = train(TINY_LM + ["trainer.max_steps=40", "trainer.val_check_interval=20"], runs)
    (run,) = run_dirs(runs)
    return run, result


def test_run_dir_holds_config_checkpoints_metrics_and_log(tiny_run):
    run, _result = tiny_run
    assert (run / "config.yaml").is_file() and (run / "train.log").is_file()
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert len(list((run / "checkpoints").glob("best-step*.ckpt"))) == 1
    val = metric_by_step(read_metrics(run), "val/loss")
    assert sorted(val) == [19, 39]  # validated at steps 20 and 40 (logged 0-based)
    assert val[39] < val[19], "validation loss did not improve while training"
    assert "samples @ step" in (run / "train.log").read_text()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 40


def test_resume_continues_the_same_curve(tiny_run, tmp_path):
    """20 steps, then resume from last.ckpt to 40: the losses equal the uninterrupted 40-step run's."""
    run, _ = tiny_run
    train(TINY_LM + ["trainer.max_steps=20", "trainer.val_check_interval=20"], tmp_path / "a")
    (first,) = run_dirs(tmp_path / "a")
    train(TINY_LM + ["trainer.max_steps=40", "trainer.val_check_interval=20",
                     f"ckpt_path={first}/checkpoints/last.ckpt"], tmp_path / "b")
    (resumed,) = run_dirs(tmp_path / "b")
    ckpt = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 40
    full, cont = metric_by_step(read_metrics(run), "train/loss"), metric_by_step(read_metrics(resumed), "train/loss")
    assert min(cont) >= 20, "the resumed run started again from step 0"
    for step in cont:
        assert cont[step] == pytest.approx(full[step], rel=1e-4), f"step {step} differs from the uninterrupted run"
    assert metric_by_step(read_metrics(resumed), "val/loss")[39] == pytest.approx(
        metric_by_step(read_metrics(run), "val/loss")[39], rel=1e-4)


def test_generate_samples_from_the_checkpoint_with_kv_cache(tiny_run, tmp_path):
    run, _ = tiny_run
    args = [f"ckpt_path={run}/checkpoints/last.ckpt", "prompt=ROMEO.", "max_new_tokens=30", "top_k=5", "temperature=0.8"]
    cached = run_module("lab.generate", args, tmp_path)
    full = run_module("lab.generate", args + ["use_cache=false"], tmp_path)
    assert cached.returncode == 0, cached.stderr
    text = cached.stdout.removesuffix("\n")  # the sample only: the speed line goes to stderr
    assert text.startswith("ROMEO.") and len(text) == len("ROMEO.") + 30  # char-level: one char per token
    assert text == full.stdout.removesuffix("\n")  # same seed, same tokens, with or without the cache
    assert "--- 30 tokens in" in cached.stderr


def test_eval_reproduces_the_best_checkpoint_test_loss(tiny_run, tmp_path):
    run, _result = tiny_run
    best = next((run / "checkpoints").glob("best-step*.ckpt"))
    out = run_module("lab.eval", [f"ckpt_path={best}"], tmp_path)
    assert out.returncode == 0, out.stderr
    printed = float(out.stdout.split("test/loss:")[1].split()[0])
    logged = metric_by_step(read_metrics(run), "test/loss")
    assert printed == pytest.approx(next(iter(logged.values())), abs=1e-3)


@pytest.mark.parametrize("args,message", [
    (["model.norm=batch"], "model.norm='batch' is not supported"),
    (["model.n_heads=3"], "not divisible by model.n_heads=3"),
    (["data.tokenizer=words"], "data.tokenizer='words' is not supported"),
    (["data.batch_size=13", "trainer.accumulate_grad_batches=2"], "not divisible by devices x accumulate_grad_batches"),
    (["ckpt_path=/no/such.ckpt"], "checkpoint /no/such.ckpt does not exist"),
    (["logger.wandb.mode=loud"], "logger.wandb.mode='loud' is not valid"),
], ids=["norm", "heads", "tokenizer", "batch", "checkpoint", "wandb-mode"])
def test_user_mistakes_get_one_clear_message(args, message, tmp_path):
    result = run_module("lab.train", TINY_LM + args, tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_experiment_lists_the_available_ones(tmp_path):
    result = run_module("lab.train", ["+experiment=gpt_smal"], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "experiment=gpt_smal: no such option" in result.stderr and "did you mean gpt_small?" in result.stderr


def test_corrupt_checkpoint_is_refused_before_training(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    result = run_module("lab.train", TINY_LM + [f"ckpt_path={bad}"], tmp_path)
    assert result.returncode == 2 and "cannot be read" in result.stderr and "Traceback" not in result.stderr


def test_wandb_offline_without_credentials_never_prompts(tmp_path):
    args = [a for a in TINY_LM if not a.startswith("logger.wandb")] + ["trainer.max_steps=2", "trainer.val_check_interval=2"]
    result = run_module("lab.train", args, tmp_path, env={"WANDB_API_KEY": "", "NETRC": str(tmp_path / "none"), "HOME": str(tmp_path)},
                        timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    assert list((run / "wandb").glob("offline-run-*")), "no offline W&B run was written"
    assert "logging offline" in (run / "train.log").read_text()


def test_ddp_cpu_two_processes_complete(tmp_path):
    train(TINY_LM + ["trainer=ddp_cpu", "trainer.max_steps=6", "trainer.val_check_interval=6", "data.batch_size=12"], tmp_path, timeout=240)
    (run,) = run_dirs(tmp_path)  # rank 1 writes no second run directory
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    assert (run / "train.log").read_text().count("setup took") == 1  # rank 1 reports nothing of its own
