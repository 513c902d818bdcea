"""The encoder experiments through the CLI (subprocesses, a few steps each): MLM pretraining -> fine-tuning
with init_from, from scratch, and the inference entry points on the checkpoints they write."""
from __future__ import annotations

import pytest
from conftest import read_metrics, run_dirs, run_module, train

SMALL = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=32", "data.batch_size=16",
         "trainer.max_steps=6", "trainer.val_check_interval=3", "trainer.log_every_n_steps=1",
         "logger.wandb.mode=disabled", "callbacks.progress=null"]
CLASSIFY = [*SMALL, "data.eval_batches=3"]


def last_run(runs_dir):
    return run_dirs(runs_dir)[-1]


@pytest.fixture(scope="module")
def mlm_ckpt(tmp_path_factory):
    runs = tmp_path_factory.mktemp("mlm")
    train(["+experiment=encoder_mlm", *SMALL, "data.max_length=32", "data.eval_batches=2",
           "data.corpora.1.max_works=2"], runs)
    return last_run(runs) / "checkpoints" / "last.ckpt"


def test_mlm_run_reports_masked_accuracy_and_fills_masks(mlm_ckpt, tmp_path):
    rows = read_metrics(mlm_ckpt.parents[1])
    assert any(r.get("val/acc") for r in rows) and any(r.get("train/loss") for r in rows)
    out = run_module("lab.fill_mask", [f"ckpt_path={mlm_ckpt}", "text=a [MASK] film with a [MASK] cast", "top_k=3"], tmp_path)
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()  # per [MASK] a column of top_k (token, probability), then the text
    *masks, text = line.split("\t")
    assert text == "a [MASK] film with a [MASK] cast" and [len(m.split()) for m in masks] == [2 * 3, 2 * 3], out.stdout


def test_pretrained_classifier_loads_the_encoder_and_inference_agrees(mlm_ckpt, tmp_path):
    result = train(["+experiment=encoder_classifier_pretrained", f"model.init_from={mlm_ckpt}", *CLASSIFY], tmp_path)
    log = (last_run(tmp_path) / "train.log").read_text()
    assert "loaded" in log and "new (trained from init): pool.dense.weight, pool.dense.bias, classifier.weight, classifier.bias" in log, result.stdout[-2000:]
    run = last_run(tmp_path)
    test_acc = [float(r["test/acc"]) for r in read_metrics(run) if r.get("test/acc")]
    best = next((run / "checkpoints").glob("best-*.ckpt"))
    ev = run_module("lab.eval", [f"ckpt_path={best}"], tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert f"test/acc: {test_acc[-1]:.4f}" in ev.stdout  # the same test split and weights give the same number

    lines = tmp_path / "lines.txt"
    lines.write_text("a gorgeous, moving film\nthe worst movie of the year\n")
    out = run_module("lab.classify", [f"ckpt_path={best}", f"file={lines}"], tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [ln.split("\t") for ln in out.stdout.strip().splitlines()]
    assert len(rows) == 2 and all(r[0] in ("negative", "positive") and 0.5 <= float(r[1]) <= 1 for r in rows)


def test_classifier_from_scratch_reports_test_accuracy_and_f1(tmp_path):
    train(["+experiment=encoder_classifier", *CLASSIFY, "model.pooling=attention"], tmp_path)
    rows = read_metrics(last_run(tmp_path))
    assert any(r.get("test/acc") for r in rows) and any(r.get("test/f1") for r in rows)
    assert any(r.get("val/acc") for r in rows)


@pytest.mark.slow  # the refusal itself is tested on the model (test_encoder.py); this is the CLI's one-line exit
def test_init_from_with_another_model_size_is_refused(mlm_ckpt, tmp_path):
    out = run_module("lab.train", ["+experiment=encoder_classifier_pretrained", f"model.init_from={mlm_ckpt}",
                                   *CLASSIFY, "model.d_model=64"], tmp_path)
    assert out.returncode == 2 and "does not fit this encoder" in out.stderr, out.stderr[-2000:]
