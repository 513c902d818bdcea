"""Every config mistake is one line, exit 2, before anything heavy (issue 12, item 6).

Each case runs `lab.train`'s real entry point (Hydra's command-line parsing and composition, lab's error
translation and config checks) with its overrides. To stay fast, all cases run one after another inside a
single Python subprocess (imports paid once), each with its own runs directory; a few run as their own
process too, to check the exit code end to end. Every case asserts: exit code 2, exactly one `error:` line
on stderr saying what is wrong and how to fix it, no traceback, and no checkpoint written."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, run_module
from omegaconf import open_dict

BASE = ["+experiment=gpt_nano_char", "logger.wandb.mode=disabled", "callbacks.progress=null"]
# id -> (overrides, what the error line must contain). Overrides are added to BASE unless they choose their
# own experiment (the first item names one).
CASES = {
    # Hydra's own composition and parse errors, translated
    "unknown-experiment": (["+experiment=nope"], "experiment=nope: no such option in conf/experiment/; available: "),
    "experiment-typo": (["+experiment=gpt_smal"], "did you mean gpt_small?"),
    "unknown-trainer-option": (["trainer=nope"], "trainer=nope: no such option in conf/trainer/; available: cpu, ddp"),
    "model-option-typo": (["model=gtp"], "did you mean gpt?"),
    "experiment-without-plus": (["experiment=gpt_small"], "+experiment=gpt_small adds it"),
    "unknown-model-key": (["model.nlayer=2"], "model.nlayer is not a config key; did you mean model.n_layers?"),
    "unknown-trainer-key": (["trainer.max_step=3"], "did you mean trainer.max_steps?"),
    "unknown-optimizer-key": (["task.optimizer.lrr=1"], "did you mean task.optimizer.lr?"),
    "unknown-data-key": (["data.batchsize=4"], "did you mean data.batch_size?"),
    "unknown-top-level-key": (["nmae=x"], "did you mean name?"),
    "unknown-key-says-how-to-add": (["model.wibble=1"], "+model.wibble=1"),
    "parse-unclosed-list": (["trainer.max_steps=[1,"], "cannot parse the command line"),
    "parse-no-equals": (["trainer.max_steps"], "cannot parse the command line"),
    "parse-unclosed-quote": (["name='abc"], "cannot parse the command line"),
    # Hydra's sweep syntax and unquoted non-ASCII in a single run: the line names the fix (these said none), and
    # the fix as the shell hands it on gets past the parser (to the schema's own check of the value)
    "comma-is-a-sweep": (["seed=1,2"], "seed=1,2 is a sweep; add -m to run one job per value, or write a list seed=[1,2] "
                                       "or a string seed=\"'1,2'\""),
    "comma-quoted-as-told": (["seed='1,2'"], "seed='1,2' must be"),
    "range-needs-multirun": (["seed=range(1,3)"], "seed=range(1,3) is a sweep; add -m"),
    "interval-needs-a-search": (["seed=interval(1,2)"], "add +hparams_search=optuna"),
    "non-ascii-unquoted": (["model.dropout=é"], "must be quoted; write model.dropout=\"'é'\""),
    "non-ascii-quoted-as-told": (["model.dropout='é'"], "model.dropout='é' must be a number"),
    # types and ranges
    "max-steps-not-a-number": (["trainer.max_steps=abc"], "trainer.max_steps='abc' must be a positive integer"),
    "max-steps-zero": (["trainer.max_steps=0"], "trainer.max_steps=0 must be a positive integer"),
    "max-steps-fraction": (["trainer.max_steps=1.5"], "trainer.max_steps=1.5 must be"),
    "lr-negative": (["task.optimizer.lr=-1"], "task.optimizer.lr=-1.0 must be a number in (0, inf)"),
    "lr-zero": (["task.optimizer.lr=0"], "task.optimizer.lr=0.0 must be"),
    "lr-text": (["task.optimizer.lr=fast"], "task.optimizer.lr='fast' must be"),
    "weight-decay-negative": (["task.optimizer.weight_decay=-0.1"], "task.optimizer.weight_decay=-0.1 must be"),
    "betas-above-one": (["task.optimizer.betas=[0.9,1.5]"], "task.optimizer.betas"),
    "betas-one-value": (["task.optimizer.betas=[0.9]"], "two numbers in [0, 1)"),
    "batch-size-zero": (["data.batch_size=0"], "data.batch_size=0 must be an integer >= 1"),
    "batch-size-negative": (["data.batch_size=-4"], "data.batch_size=-4 must be"),
    "eval-batches-zero": (["data.eval_batches=0"], "data.eval_batches=0 must be"),
    "translator-token-budget-zero": (["+experiment=translator_small", "logger.wandb.mode=disabled", "data.batch_tokens=0"],
                                     "data.batch_tokens"),
    "dropout-one": (["model.dropout=1.0"], "model.dropout=1.0 must be a probability in [0, 1)"),
    "dropout-negative": (["model.dropout=-0.1"], "model.dropout=-0.1 must be a probability"),
    "classifier-dropout": (["+experiment=encoder_classifier", "logger.wandb.mode=disabled", "model.classifier_dropout=2"],
                           "model.classifier_dropout=2.0 must be a probability"),
    "min-lr-negative": (["task.scheduler.min_lr=-0.1"], "task.scheduler.min_lr=-0.1 must be"),
    "warmup-negative": (["task.scheduler.warmup_steps=-1"], "task.scheduler.warmup_steps=-1 must be"),
    "min-lr-above-lr": (["task.scheduler.min_lr=1"], "task.scheduler.min_lr=1 > task.optimizer.lr"),
    "val-check-zero": (["trainer.val_check_interval=0"], "trainer.val_check_interval=0 must be"),
    "val-check-negative": (["trainer.val_check_interval=-5"], "trainer.val_check_interval=-5 must be"),
    "val-check-fraction-above-one": (["trainer.val_check_interval=1.5"], "fraction of an epoch in (0, 1]"),
    "precision-name": (["trainer.precision=fp16"], "trainer.precision='fp16' must be one of 32-true, bf16-mixed, 16-mixed"),
    "precision-typo": (["trainer.precision=bf16_mixed"], "bf16-mixed"),
    "accelerator-name": (["trainer.accelerator=tpuu"], "trainer.accelerator='tpuu' must be one of"),
    "devices-zero": (["trainer.devices=0"], "trainer.devices=0 must be"),
    "devices-list-on-cpu": (["trainer.devices=[0,1]"], "CPU devices are a process count"),
    "gpu-on-a-cpu-machine": (["trainer.accelerator=gpu"], "no CUDA GPU is visible"),
    "log-every-zero": (["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps=0 must be"),
    "accumulate-zero": (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0 must be"),
    "clip-negative": (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1 must be"),
    "heads-do-not-divide-width": (["model.n_heads=3"], "is not divisible by model.n_heads=3"),
    "kv-heads-do-not-divide-heads": (["model.n_kv_heads=3"], "model.n_kv_heads=3 does not divide model.n_heads=4; pick "
                                                            "n_kv_heads among [1, 2, 4]"),
    "head-dim-zero": (["model.head_dim=0"], "model.head_dim=0 must be"),
    "layers-zero": (["model.n_layers=0"], "model.n_layers=0 must be"),
    # the model's typed schema (lab.runtime.cli.schemas): OmegaConf's type errors, said as lab's
    "width-not-a-number": (["model.d_model=abc"], "model.d_model='abc' must be an integer; set model.d_model=<that>"),
    "width-null": (["model.d_model=null"], "model.d_model=null must be given (not null)"),
    "flag-not-boolean": (["model.zero_init_proj=maybe"], "model.zero_init_proj='maybe' must be true or false"),
    "init-std-text": (["model.init_std=big"], "model.init_std='big' must be a number"),
    "another-models-field": (["model.pooling=mean"], "model.pooling is not a config key"),
    "softcap-zero": (["model.logit_softcap=0"], "model.logit_softcap=0.0 must be a number in (0, inf) or null"),
    "moe-unknown-field": (["model.moe={num_experts:4,topk:2}"], "unknown model.moe field(s) topk; known: "),
    "moe-top-k-above-experts": (["model.moe={num_experts:4,top_k:5}"], "model.moe.top_k=5: must be between 1 and"),
    "missing-required-value": (["task.optimizer.lr=???"], "task.optimizer.lr is required but not set"),
    # the experiment needs a checkpoint that its parent experiment's model config sets to null (??? could not
    # mark it: it would silently fine-tune from nothing)
    "pretrained-without-init-from": (["+experiment=encoder_classifier_pretrained", "logger.wandb.mode=disabled"],
                                     "model.init_from is required here: give model.init_from=<path to an"),
    "added-key-nothing-takes": (["+model.nlayer=2"], "model.nlayer is not an argument of lab.models.gpt.GPT; did you mean model.n_layers?"),
    "added-data-key": (["+data.batchsize=3"], "data.batchsize is not an argument of lab.data.lm.LMDataModule; did you mean data.batch_size?"),
    "plus-on-a-schema-key": (["+task.optimizer.eps=1e-6"], "task.optimizer.eps is already a config key: give it "
                                                          "without the +, task.optimizer.eps=1e-6"),
    "added-optimizer-key": (["+task.optimizer.lrate=1"], "task.optimizer.lrate is not an argument of torch.optim.AdamW"),
    "target-typo": (["model._target_=lab.models.gpt.GTP"], "model._target_='lab.models.gpt.GTP' cannot be imported"),
    "save-top-k-below-minus-one": (["callbacks.checkpoint.save_top_k=-2"], "callbacks.checkpoint.save_top_k=-2 must be"),
    "seed-text": (["seed=abc"], "seed='abc' must be an integer"),
    "test-not-boolean": (["test=maybe"], "test='maybe' must be true or false"),
    "optimized-mode": (["optimized_mode=up"], "optimized_mode='up' must be one of min, max"),
    "broken-interpolation": (["name=${nope}"], "cannot be resolved"),
    "wandb-mode": (["logger.wandb.mode=sometimes"], "logger.wandb.mode='sometimes' is not valid; choose one of"),
    "wandb-probe-timeout": (["logger.wandb.probe_timeout=0"], "logger.wandb.probe_timeout=0 must be"),
}
CLI_CASES = ["unknown-experiment", "unknown-model-key", "lr-negative", "missing-required-value"]  # own processes


def overrides(case: str) -> list[str]:
    args, _ = CASES[case]
    return args if args[0].startswith(("+experiment=", "experiment=")) else [*BASE, *args]


# Runs lab.train's entry point once per case in this one process, as `python -m lab.train` would: sys.argv as
# the shell would give it, stderr captured, SystemExit's code recorded, LAB_RUNS_DIR per case.
RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback
from pathlib import Path
from hydra.core.global_hydra import GlobalHydra
import lab.runtime.trainer.loggers
decide_wandb = lab.runtime.trainer.loggers.decide_wandb
def stop_after_the_checks(cfg):  # the last check before data; a case that gets past it is not refused
    decide_wandb(cfg)
    raise SystemExit("passed every check")
lab.runtime.trainer.loggers.decide_wandb = stop_after_the_checks
cases, root = json.loads(sys.argv[1]), Path(sys.argv[2])
results = {}
for case, args in cases.items():
    os.environ["LAB_RUNS_DIR"] = str(root / case)
    sys.argv = ["lab.train", *args]
    err, code = io.StringIO(), 0
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_module("lab.train", run_name="__main__")  # as `python -m lab.train` (Hydra finds conf/)
        except SystemExit as e:
            code = e.code
        except BaseException:
            code = "raised"
            traceback.print_exc()
    GlobalHydra.instance().clear()
    results[case] = {"code": code, "stderr": err.getvalue()}
print("RESULTS=" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("config_errors")
    cases = {case: overrides(case) for case in CASES}
    out = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(cases), str(root)], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULTS=")), None)
    assert line, out.stdout[-3000:] + out.stderr[-3000:]
    return root, json.loads(line.removeprefix("RESULTS="))


def assert_one_error_line(code, stderr: str, expected: str) -> None:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2, stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert expected in errors[0], errors[0]
    assert len(errors[0]) < 600 or "available:" in errors[0], errors[0]  # one readable line


def no_checkpoint(runs) -> bool:
    return not any(runs.rglob("*.ckpt")) and not any(runs.rglob("metrics.csv"))


@pytest.mark.parametrize("case", list(CASES))
def test_config_mistake_is_one_line(results, case):
    root, found = results
    assert_one_error_line(found[case]["code"], found[case]["stderr"], CASES[case][1])
    assert no_checkpoint(root / case)


@pytest.mark.parametrize("case", CLI_CASES)
def test_config_mistake_from_the_shell(tmp_path, case):
    out = run_module("lab.train", overrides(case), tmp_path)
    assert_one_error_line(out.returncode, out.stderr, CASES[case][1])
    assert no_checkpoint(tmp_path)


def test_every_shipped_experiment_passes_the_checks(compose):
    """The checks refuse mistakes, not the configs lab ships (each experiment as it stands)."""
    from lab.runtime.cli.config_checks import check_config

    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        cfg = compose([f"+experiment={path.stem}", "paths.output_dir=/tmp/x", "model.init_from=x"]
                      if path.stem == "encoder_classifier_pretrained" else [f"+experiment={path.stem}", "paths.output_dir=/tmp/x"])
        with open_dict(cfg):
            del cfg["hydra"]
        check_config(cfg)


def test_a_warmup_longer_than_the_run_is_said_not_refused(compose, caplog):
    """Short tests of real experiments have one (20 steps of a 100-step warmup): one warning with how far
    the learning rate gets (50 of 100 warmup steps: 50% of its peak), not an error."""
    from lab.runtime.cli.config_checks import check_config

    cfg = compose(["+experiment=gpt_nano_char", "trainer.max_steps=50", "paths.output_dir=/tmp/x"])
    with open_dict(cfg):
        del cfg["hydra"]
    check_config(cfg)
    assert "task.scheduler.warmup_steps=100 > trainer.max_steps=50" in caplog.text and "(50% of it" in caplog.text
