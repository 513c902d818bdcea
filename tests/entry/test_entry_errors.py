"""Mistakes on the entry points' command lines (lab.train, generate, classify, translate, eval, fill_mask), called
in-process: exit code 2, one short `error:` line that names the problem and a fix, no traceback."""
from __future__ import annotations

import gzip
import importlib
import os
import pickle
import re
import sys
from pathlib import Path

import pytest
from conftest import LIMIT

from tests.data.test_data_files import BASE


def run_entry(module: str, args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """python -m lab.<module> <args> in this process: (exit code, stderr)."""
    mod = importlib.import_module(f"lab.{module}")
    conf = Path(__file__).resolve().parents[2] / "conf"  # in-process, Hydra looks for config_path as a package
    monkeypatch.setattr(sys, "argv", [f"lab/{module}.py", f"--config-path={conf}", *args])
    with pytest.raises(SystemExit) as e:
        mod.main()
    return e.value.code, capsys.readouterr().err


def unsafe_pickle(path: Path) -> Path:
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo ran",))
    path.write_bytes(pickle.dumps(Payload()))
    return path


ENTRY = [
    ("train", ["--max_steps=20"], r"--max_steps=20 is not an option: settings are key=value overrides without dashes; give trainer.max_steps=20$"),
    ("train", ["--lr=0.01", "trainer.max_steps=2"], r"give task.optimizer.lr=0.01$"),
    ("train", ["--max_step=3"], r"give trainer.max_steps=3$"),
    ("train", ["max_steps=20"], r"^max_steps is not a config key; did you mean trainer.max_steps=20\?$"),
    ("train", ["+experiment=gpt_nano_char", "data.batch=3"], r"^data.batch is not a config key; did you mean data.batch_size\?"),
    ("train", ["--nonsense=1"], r"--nonsense=1 is not an option, and nonsense is not a setting of lab.train"),
    ("generate", ["prompt=hi"], r"^ckpt_path is required but not set; give it on the command line, e.g. ckpt_path=<value>$"),
    ("classify", ["text=hi"], r"^ckpt_path is required but not set"),
    ("translate", ["text=hi"], r"^ckpt_path is required but not set"),
    ("eval", [], r"^ckpt_path is required but not set"),
    ("fill_mask", ["text=a [MASK] film"], r"^ckpt_path is required but not set"),
    ("generate", ["ckpt_path=EVIL", "prompt=hi"], r"EVIL holds executable objects \(posix.system\), not only tensors"),
    ("classify", ["ckpt_path=EVIL", "text=hi"], r"EVIL holds executable objects \(posix.system\)"),
    ("translate", ["ckpt_path=PLAIN", "text=hi"], r"PLAIN cannot be read \(UnpicklingError.*\); it is damaged or not a checkpoint"),
    ("eval", ["ckpt_path=EVIL", "compare_to=TMP/nope"], r"^compare_to=\S*nope does not exist; give a run directory"),
    ("eval", ["ckpt_path=EVIL", "compare_to=TMP"], r"^compare_to=\S* is a directory without checkpoints"),
    ("eval", ["ckpt_path=EVIL", "outputs_dir=TMP/afile"], r"^outputs_dir=\S*afile is a file, not a folder; give a new or empty"),
    ("eval", ["ckpt_path=EVIL", "outputs_dir=TMP"], r"^outputs_dir=\S* holds files that are not lab.eval's test sentences "
     r"\(afile, evil.ckpt, plain.ckpt, train.tsv\); give a new or empty folder, or add overwrite=true"),
    ("translate", ["ckpt_path=EVIL", "text=hallo", "output_file=TMP"], r"^output_file=\S* is a directory; give a file name"),
    ("translate", ["ckpt_path=EVIL", "text=hallo", "output_file=TMP/no/such/out.en"],
     r"^output_file=\S*out.en: its directory does not exist; create it \(mkdir -p \S+no/such\) or give another path$"),
    ("train", ["+experiment=gpt_nano_char", "trainer.strategy=ddp_fsdp_xyz"], r"trainer.strategy='ddp_fsdp_xyz' is not a strategy Lightning knows; e.g. auto"),
    ("train", ["+experiment=gpt_nano_char", "trainer.strategy=ddpp"], r"trainer.strategy='ddpp' is not a strategy Lightning knows; did you mean trainer.strategy=ddp\?"),
    ("train", ["+experiment=gpt_nano_char", "trainer.accelerator=gpux"], r"trainer.accelerator='gpux' must be one of auto, cpu, gpu"),
    ("train", ["+experiment=gpt_nano_char", "paths.runs_dir=TMP/afile"], r"cannot create the run directory \S*afile\S* \(Not a directory\); set paths.runs_dir="),
    ("train", ["+experiment=encoder_classifier", "data=text_classification", "data.train_file=TMP/train.tsv"],
     r"train.tsv is a gzip-compressed file, not text"),
]


@pytest.mark.parametrize("module,args,expected", ENTRY, ids=[f"{m}-{'-'.join(a)[:40]}" for m, a, _ in ENTRY])
def test_entry_point_mistakes_are_one_line(tmp_path, monkeypatch, capsys, module, args, expected):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "train.tsv").write_bytes(gzip.compress(BASE.encode()))
    unsafe_pickle(tmp_path / "evil.ckpt")
    (tmp_path / "plain.ckpt").write_bytes(pickle.dumps({"state_dict": {}}))
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    args = [a.replace("EVIL", str(tmp_path / "evil.ckpt")).replace("PLAIN", str(tmp_path / "plain.ckpt"))
            .replace("TMP", str(tmp_path)) for a in args]
    code, err = run_entry(module, args, monkeypatch, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("using ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("error: ") and len(lines[0]) <= LIMIT + 7, lines[0]
    assert re.search(expected.replace("EVIL", re.escape(str(tmp_path / "evil.ckpt"))).replace(
        "PLAIN", re.escape(str(tmp_path / "plain.ckpt"))), lines[0].removeprefix("error: ")), lines[0]


def test_lm_samples_from_a_prompt_the_char_vocabulary_lacks(tmp_path, monkeypatch, capsys):
    """The default sample prompt ("ROMEO.\\n") on a corpus with no capitals and no newline encodes to nothing: the
    samples start at a document boundary instead of an IndexError after training."""
    (tmp_path / "a.txt").write_text("to be or not to be that is the question " * 40)
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    conf = Path(__file__).resolve().parents[2] / "conf"
    monkeypatch.setattr(sys, "argv", ["lab/train.py", f"--config-path={conf}", "+experiment=gpt_nano_char", "data=text_files",
                                      f"data.corpus.train_files=[{tmp_path / 'a.txt'}]", "model.n_layers=1", "model.d_model=16",
                                      "model.n_heads=2", "model.max_seq_len=16", "data.batch_size=2", "data.eval_batches=1",
                                      "trainer.max_steps=2", "trainer.val_check_interval=2", "task.samples.max_new_tokens=4",
                                      "task.scheduler.warmup_steps=1", "logger.wandb.mode=disabled", "callbacks.progress=null"])
    importlib.import_module("lab.train").main()
    log = next((tmp_path / "runs").rglob("train.log")).read_text()
    assert "samples @ step 2 | prompt: ROMEO." in log and "Traceback" not in log
