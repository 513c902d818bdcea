"""A checkpoint from someone else runs no code and touches no file (issue 19).

Crafted files, each of which would run a payload if lab loaded it the old way (torch.load(weights_only=False),
Hydra's instantiate of whatever `_target_` the saved config names, OmegaConf interpolation), are given to
every entry point that takes a checkpoint. Each must end with exit 2 and one `error:` line naming the file,
and the payload's markers must be untouched: `created` must not appear, `precious` must keep its content."""
from __future__ import annotations

import os
import pickle
import re

import pytest
import torch
from conftest import TINY_LM, run_module

PRECIOUS = "precious\n"


class Payload:
    """Unpickling this runs a shell command (what a malicious checkpoint does)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def lab_entry(tmp_path) -> dict:
    """The `lab` entry of a checkpoint, plain data only, with lab's own targets everywhere."""
    return {
        "config": {
            "model": {"_target_": "lab.models.gpt.GPT", "d_model": 8, "n_layers": 1, "n_heads": 2, "max_seq_len": 16,
                      "moe": None},
            "task": {"_target_": "lab.tasks.language_model.LanguageModelTask",
                     "optimizer": {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
                     "scheduler": {"_target_": "lab.tasks.optim.warmup_cosine", "_partial_": True, "warmup_steps": 1,
                                   "total_steps": 2}},
            "data": {"_target_": "lab.data.lm.LMDataModule", "corpus": {"_target_": "lab.data.corpora.Shakespeare"},
                     "cache_dir": str(tmp_path / "cache")},
            "trainer": {"_target_": "lightning.pytorch.Trainer", "precision": "32-true"},
        },
        "vocab": {"vocab_size": 10},
        "tokenizer": "{}",
    }


def file_handler(tmp_path) -> dict:
    """Instantiating this truncates `precious` (logging.FileHandler opens it with mode w)."""
    return {"_target_": "logging.FileHandler", "filename": str(tmp_path / "precious"), "mode": "w"}


def save(ckpt: dict, path):
    torch.save(ckpt, path)
    return path


def with_config(tmp_path, edit) -> dict:
    meta = lab_entry(tmp_path)
    edit(meta["config"])
    return {"state_dict": {}, "lab": meta}


def sharded_dir(tmp_path, index: bytes, meta_pt: dict):
    d = tmp_path / "sharded.ckpt"
    d.mkdir()
    (d / ".metadata").write_bytes(index)
    torch.save(meta_pt, d / "meta.pt")
    return d


def pickle_payload(tmp_path):
    run = Payload(f"echo pwned > {tmp_path / 'created'}; : > {tmp_path / 'precious'}")
    return save({"state_dict": {}, "lab": lab_entry(tmp_path), "extra": run}, tmp_path / "evil.ckpt")


def model_target(tmp_path):
    return save(with_config(tmp_path, lambda c: c.update(model=file_handler(tmp_path))), tmp_path / "evil.ckpt")


def task_target(tmp_path):
    return save(with_config(tmp_path, lambda c: c.update(task=file_handler(tmp_path))), tmp_path / "evil.ckpt")


def nested_target(tmp_path):  # the model is lab's, one of its fields is not
    return save(with_config(tmp_path, lambda c: c["model"].update(moe=file_handler(tmp_path))), tmp_path / "evil.ckpt")


def data_target(tmp_path):  # lab.eval rebuilds the datamodule
    return save(with_config(tmp_path, lambda c: c["data"].update(corpus=file_handler(tmp_path))), tmp_path / "evil.ckpt")


def optimizer_target(tmp_path):  # a partial: it would run when the task builds its optimizer
    def edit(c):
        c["task"]["optimizer"] = {**file_handler(tmp_path), "_partial_": True}
    return save(with_config(tmp_path, edit), tmp_path / "evil.ckpt")


def interpolation(tmp_path):  # ${lab.sqlite:...} creates directories when resolved
    return save(with_config(tmp_path, lambda c: c["model"].update(d_model=f"${{lab.sqlite:{tmp_path}/created/x.db}}")),
                tmp_path / "evil.ckpt")


def sharded_meta(tmp_path):  # the FSDP directory's meta.pt carries the payload
    run = Payload(f"echo pwned > {tmp_path / 'created'}")
    return sharded_dir(tmp_path, pickle.dumps({}), {"lab": lab_entry(tmp_path), "extra": run})


def sharded_index(tmp_path):  # torch pickles the .metadata index itself, with plain pickle
    return sharded_dir(tmp_path, pickle.dumps(Payload(f"echo pwned > {tmp_path / 'created'}")), {"lab": lab_entry(tmp_path)})


EXECUTABLE = "holds executable objects"
FOREIGN = "asks to build 'logging.FileHandler'"
CASES = {  # crafted file -> what the error line says
    "pickle": (pickle_payload, EXECUTABLE + r" \(posix\.system\)"),
    "model-target": (model_target, FOREIGN + " at config.model._target_"),
    "task-target": (task_target, FOREIGN + " at config.task._target_"),
    "nested-target": (nested_target, FOREIGN + r" at config.model.moe._target_"),
    "data-target": (data_target, FOREIGN + r" at config.data.corpus._target_"),
    "optimizer-target": (optimizer_target, FOREIGN + r" at config.task.optimizer._target_"),
    "interpolation": (interpolation, r"has an interpolation .*lab\.sqlite.* at config\.model\.d_model"),
    "fsdp-meta.pt": (sharded_meta, r"meta\.pt " + EXECUTABLE + r" \(posix\.system\)"),
    "fsdp-.metadata": (sharded_index, r"\.metadata " + EXECUTABLE + r" \(posix\.system\)"),
}
ENTRY_POINTS = {  # entry point -> arguments around the checkpoint path
    "generate": ("lab.generate", lambda p: [f"ckpt_path={p}", "prompt=x"]),
    "classify": ("lab.classify", lambda p: [f"ckpt_path={p}", "text=x"]),
    "fill_mask": ("lab.fill_mask", lambda p: [f"ckpt_path={p}", "text='a [MASK] b'"]),
    "translate": ("lab.translate", lambda p: [f"ckpt_path={p}", "text=x"]),
    "eval": ("lab.eval", lambda p: [f"ckpt_path={p}"]),
    "train-resume": ("lab.train", lambda p: [*TINY_LM, f"ckpt_path={p}"]),
}
# Every pair runs with -m '' (make test-slow); the quick suite runs every crafted file through lab.generate
# and the pickle payload through eval and a resumed training run.
QUICK = {("generate", c) for c in CASES} | {("eval", "pickle"), ("train-resume", "pickle")}
MATRIX = [pytest.param(e, c, id=f"{e}-{c}", marks=() if (e, c) in QUICK else pytest.mark.slow)
          for e in ENTRY_POINTS for c in CASES]


def assert_refused(out, path, message: str, tmp_path) -> None:
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2, out.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert str(path) in errors[0] and re.search(message, errors[0]), errors[0]
    assert not (tmp_path / "created").exists(), "the payload ran"
    assert (tmp_path / "precious").read_text() == PRECIOUS, "the payload touched a file"
    runs = tmp_path / "runs"
    assert not runs.exists() or not list(runs.rglob("checkpoints/*")), "a run wrote a checkpoint"


@pytest.mark.parametrize(("entry", "case"), MATRIX)
def test_crafted_checkpoint_is_refused_without_running_anything(tmp_path, entry, case):
    (tmp_path / "precious").write_text(PRECIOUS)
    make, message = CASES[case]
    path = make(tmp_path)
    module, args = ENTRY_POINTS[entry]
    assert_refused(run_module(module, args(path), tmp_path / "runs"), path, message, tmp_path)


@pytest.mark.parametrize("case", ["fsdp-meta.pt", pytest.param("fsdp-.metadata", marks=pytest.mark.slow)])
def test_consolidating_a_crafted_sharded_directory_is_refused(tmp_path, case):
    (tmp_path / "precious").write_text(PRECIOUS)
    make, message = CASES[case]
    path = make(tmp_path)
    out = run_module("lab.checkpoint", ["consolidate", str(path), str(tmp_path / "out.ckpt")], tmp_path / "runs")
    assert_refused(out, path, message, tmp_path)
    assert not (tmp_path / "out.ckpt").exists()


@pytest.mark.slow
def test_a_crafted_tokenizer_source_is_refused_before_training(tmp_path):
    """data.tokenizer_from (fine-tuning from a pretrained encoder) reads a checkpoint in lab.data."""
    (tmp_path / "precious").write_text(PRECIOUS)
    path = pickle_payload(tmp_path)
    out = run_module("lab.train", ["+experiment=encoder_classifier_pretrained", f"model.init_from={path}",
                                   "logger.wandb.mode=disabled"], tmp_path / "runs")
    assert_refused(out, path, EXECUTABLE, tmp_path)


# ---- in-process: the crafted files really are dangerous, and lab's own structure passes ----

@pytest.mark.parametrize("case", ["pickle", "fsdp-meta.pt", "fsdp-.metadata"])
def test_the_pickle_payloads_run_when_loaded_the_old_way(tmp_path, case):
    """Without weights_only (or with plain pickle for the index) the crafted files do run their command:
    the refusals above are what stops them."""
    (tmp_path / "precious").write_text(PRECIOUS)
    path = CASES[case][0](tmp_path)
    if case == "fsdp-.metadata":
        pickle.loads((path / ".metadata").read_bytes())
    else:
        torch.load(path / "meta.pt" if path.is_dir() else path, weights_only=False)
    assert (tmp_path / "created").exists()


@pytest.mark.parametrize("case", [c for c in CASES if c.endswith("-target")])
def test_the_foreign_targets_truncate_a_file_when_instantiated(tmp_path, case):
    from hydra.utils import instantiate

    (tmp_path / "precious").write_text(PRECIOUS)
    ckpt = torch.load(CASES[case][0](tmp_path), weights_only=True)  # plain data: weights_only alone lets it in
    handler = instantiate(file_handler(tmp_path))
    handler.close()
    assert (tmp_path / "precious").read_text() == "" and "lab" in ckpt


def test_labs_own_targets_pass_the_check(tmp_path):
    from lab.checkpoints.reading import lab_metadata

    ckpt = {"state_dict": {}, "lab": lab_entry(tmp_path)}
    assert lab_metadata(ckpt, "x")["config"]["model"]["_target_"] == "lab.models.gpt.GPT"


@pytest.mark.parametrize(("target", "allowed"), [
    ("lab.models.gpt.GPT", True),
    ("lab.tasks.optim.warmup_cosine", True),
    ("lab.data.corpora.TextFiles", True),
    ("torch.optim.AdamW", True),
    ("torch.optim.lr_scheduler.LambdaLR", False),  # not an optimizer
    ("lab.data.classification.Path", False),  # pathlib.Path reached through a lab module's namespace
    ("lab.data.lm.np.save", False),  # numpy's, through lab.data.lm's import
    ("lab.runtime.cli.errors._sqlite_url", False),  # lab's, but run-time machinery that creates directories
    ("lab.models.gpt.GPT.forward", False),  # not a top-level name of its module
    ("os.system", False),
    ("builtins.exec", False),
    ("lab.nope.Thing", False),
])
def test_only_labs_model_task_nn_data_classes_and_optimizers_may_be_built(target, allowed):
    from lab.checkpoints.reading import _is_lab_target

    assert _is_lab_target(target) is allowed


def test_a_damaged_file_is_not_mistaken_for_an_executable_one(tmp_path):
    """Both fail torch's weights-only unpickler; only a refused global is "executable objects"."""
    from lab.checkpoints.reading import read_checkpoint
    from lab.errors import LabError, UnsafeFileError

    (tmp_path / "precious").write_text(PRECIOUS)
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    with pytest.raises(LabError, match=r"cannot be read \(UnpicklingError: Unsupported operand \d+\); it is damaged") as e:
        read_checkpoint(damaged)
    assert not isinstance(e.value, UnsafeFileError)
    with pytest.raises(UnsafeFileError, match=r"holds executable objects \(posix\.system\)"):
        read_checkpoint(pickle_payload(tmp_path))
