"""The recipe's machinery: validation BLEU on a fixed subset choosing the best checkpoint, lab.eval's paired
bootstrap against another system (compare_to), and the EMA of the weights in what is saved and tested."""
from __future__ import annotations

import lightning as L
import pytest
import sacrebleu
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lab.data.parallel import ParallelTextDataModule
from lab.models.decoding import greedy_translate
from lab.models.seq2seq import EncoderDecoder
from lab.tasks.optim import inverse_sqrt
from lab.tasks.translation import TranslationTask
from tests.conftest import TINY_LM, read_metrics, run_dirs, run_module, train, translator_eval

SUBSET = 13  # not a multiple of the evaluation batch (5): the subset ends inside a batch


class Validations(L.Callback):
    """What each validation decoded (index, source, reference, hypothesis) and scored, before the task logs it."""

    def __init__(self):
        self.decoded, self.bleu = [], []

    def on_validation_epoch_end(self, trainer, task):
        if not trainer.sanity_checking:
            self.decoded.append(sorted(task.outputs))

    def on_validation_end(self, trainer, task):
        if not trainer.sanity_checking:
            self.bleu.append((trainer.global_step, float(trainer.callback_metrics["val/bleu"])))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny translator of "quelle nummer i hier." -> "target number i here." after 80 steps: its greedy
    outputs share words with the references, so BLEU is neither 0 nor 100 and moves between validations."""
    tmp = tmp_path_factory.mktemp("bleu")
    with open(tmp / "pairs.tsv", "w") as f:
        for i in range(300):
            f.write(f"quelle nummer {i} hier.\ttarget number {i} here.\n")
    dm = ParallelTextDataModule(str(tmp / "pairs.tsv"), cache_dir=str(tmp / "cache"), vocab_size=300, valid_size=40,
                                test_size=20, batch_size=16, eval_batch_size=5, seed=3)
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(0)
    model = EncoderDecoder(dm.vocab["vocab_size"], 0, 1, 2, d_model=32, n_layers=1, n_heads=2, max_seq_len=32)
    task = TranslationTask(model, lambda groups: torch.optim.Adam(groups, lr=3e-3),
                           lambda opt: inverse_sqrt(opt, warmup_steps=10), val_bleu_sentences=SUBSET,
                           val_decoding={"beam_size": 1, "max_len_ratio": 1.0, "max_len_offset": 4})
    seen, best = Validations(), ModelCheckpoint(dirpath=tmp / "ckpt", monitor="val/bleu", mode="max", save_top_k=1,
                                                filename="best-step{step}", auto_insert_metric_name=False)
    trainer = L.Trainer(max_steps=80, val_check_interval=20, check_val_every_n_epoch=None, callbacks=[seen, best], logger=False, accelerator="cpu",
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=1)
    trainer.fit(task, datamodule=dm)
    return dm, task, trainer, seen, best


def test_val_bleu_decodes_the_same_first_sentences_every_validation(trained):
    dm, _, _, seen, _ = trained
    valid = dm.datasets["valid"].pairs
    assert len(seen.decoded) == 4
    for decoded in seen.decoded:
        assert [(i, s, r) for i, s, r, _ in decoded] == [(i, *valid[i]) for i in range(SUBSET)]
    assert len({tuple(h for *_, h in d) for d in seen.decoded}) > 1  # the model changed; the subset did not


def test_val_bleu_equals_sacrebleu_of_the_subsets_greedy_outputs_decoded_one_by_one(trained):
    dm, task, trainer, _, _ = trained
    (metrics,) = trainer.validate(task, datamodule=dm, verbose=False)
    model, valid = task.model.eval(), dm.datasets["valid"]
    hyps = []
    for i in range(SUBSET):  # alone, unpadded: independent of the batching the task used
        src = torch.as_tensor(valid[i][1])[None]
        (ids,) = greedy_translate(model, src, max_len_ratio=1.0, max_len_offset=4)
        hyps.append(dm.tokenizer.decode(ids))
    refs = [valid.pairs[i][1] for i in range(SUBSET)]
    expected = sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score
    assert 0 < expected < 100
    assert metrics["val/bleu"] == pytest.approx(expected, abs=1e-4)
    assert metrics["val/chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-4)


def test_the_best_checkpoint_is_the_validation_with_the_highest_bleu(trained):
    *_, seen, best = trained
    scores = [b for _, b in seen.bleu]
    assert len(set(scores)) > 1  # validations differ, so the choice means something
    step = next(s for s, b in seen.bleu if b == max(scores))  # the first of equal maxima (no strict improvement)
    assert best.best_model_score.item() == pytest.approx(max(scores))
    assert best.best_model_path.endswith(f"best-step{step}.ckpt")


def test_the_recipe_option_chooses_checkpoints_by_val_bleu_through_the_cli(translator_run):
    _, run = translator_run
    rows = read_metrics(run)
    bleu = {int(r["step"]): float(r["val/bleu"]) for r in rows if r.get("val/bleu")}
    assert sorted(bleu) == [2, 5]  # steps are 0-based in the csv: validations after steps 3 and 6
    ckpt = torch.load(next((run / "checkpoints").glob("best-step*.ckpt")), map_location="cpu", weights_only=False)
    (state,) = [v for k, v in ckpt["callbacks"].items() if k.startswith("RunCheckpoint")]
    assert state["monitor"] == "val/bleu" and state["best_model_score"].item() == pytest.approx(max(bleu.values()))


def test_eval_compares_with_a_system_output_file_by_sacrebleus_paired_bootstrap(translator_run, translator_tested, tmp_path):
    tested, outputs = translator_tested
    assert tested.returncode == 0, tested.stderr[-2000:]
    refs = (outputs / "test.reference").read_text().splitlines()
    hyps = (outputs / "test.hypothesis").read_text().splitlines()
    assert len(refs) == len(hyps) == 40
    # the other system: the references themselves for the first half, this checkpoint's output for the rest
    (tmp_path / "other.en").write_text("".join(line + "\n" for line in refs[:20] + hyps[20:]))
    out = translator_eval(translator_run, f"compare_to={tmp_path / 'other.en'}", "bootstrap_samples=200")
    assert out.returncode == 0, out.stderr[-2000:]
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score
    other = sacrebleu.corpus_bleu(refs[:20] + hyps[20:], [refs], tokenize="13a").score
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("BLEU: ckpt_path"))
    assert f"ckpt_path {bleu:.2f}" in line and f"compare_to {other:.2f}" in line
    p = float(line.rsplit("p = ", 1)[1])
    assert p < 0.05  # half the sentences perfect: a real difference
    assert "BLEU|nrefs:1|bs:200|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:" in out.stdout
    assert "chrF2|nrefs:1|bs:200|seed:12345" in out.stdout

    (tmp_path / "short.en").write_text("only one line\n")
    bad = translator_eval(translator_run, f"compare_to={tmp_path / 'short.en'}")
    assert bad.returncode == 2 and "has 1 lines, but the test split has 40 sentences" in bad.stderr


def test_eval_compares_two_checkpoints_on_the_same_test_split(translator_run):
    _, run = translator_run
    best = next((run / "checkpoints").glob("best-step*.ckpt"))
    out = translator_eval(translator_run, f"compare_to={best}", "bootstrap_samples=100")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "paired bootstrap resampling (sacreBLEU), 40 test sentences" in out.stdout
    assert "BLEU|nrefs:1|bs:100" in out.stdout


def test_ema_checkpoints_hold_the_hand_computed_average_and_the_test_uses_it(tmp_path):
    """decay 0.5 over 4 steps of a tiny GPT, a checkpoint after every step: each one's raw weights
    (current_model_state) give the EMA by hand, e_1 = w_1, e_k = d e_(k-1) + (1 - d) w_k, which must be its
    state_dict; inference loads that; the test after training and lab.eval see the same (averaged) model."""
    from lab.checkpoints.reading import load_model

    d = 0.5
    train([*TINY_LM, "trainer.max_steps=4", "trainer.val_check_interval=1", "callbacks=ema", f"callbacks.ema.decay={d}",
           "callbacks.checkpoint.monitor=null", "callbacks.checkpoint.save_top_k=-1", "callbacks.progress=null"],
          tmp_path, env={"OMP_NUM_THREADS": "1"})  # a validation, so a kept checkpoint, after every step
    (run,) = run_dirs(tmp_path)
    ckpts = [torch.load(run / "checkpoints" / f"best-step{k}.ckpt", map_location="cpu", weights_only=False)
             for k in range(1, 5)]
    ema = None
    for ckpt in ckpts:
        raw = ckpt["current_model_state"]
        ema = dict(raw) if ema is None else {k: d * ema[k] + (1 - d) * raw[k] for k in raw}
        for k, v in ema.items():
            torch.testing.assert_close(ckpt["state_dict"][k], v, rtol=1e-5, atol=1e-6)
    name = "model.lm_head.weight" if "model.lm_head.weight" in ema else next(iter(ema))
    assert not torch.allclose(ema[name], ckpts[-1]["current_model_state"][name])  # the average is not the last weights

    model, _, _ = load_model(run / "checkpoints" / "last.ckpt")
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, ema[f"model.{k}"], rtol=1e-5, atol=1e-6)
    tested = float(next(r["test/loss"] for r in read_metrics(run) if r.get("test/loss")))
    out = run_module("lab.eval", [f"ckpt_path={run / 'checkpoints' / 'best-step4.ckpt'}"], tmp_path,
                     env={"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"test/loss: {tested:.4f}" in out.stdout  # lab.eval loads state_dict (the EMA): the same model was tested


def test_ema_decay_outside_0_1_is_one_error_line(tmp_path):
    out = run_module("lab.train", [*TINY_LM, "callbacks=ema", "callbacks.ema.decay=1.5"], tmp_path)
    assert out.returncode == 2 and "callbacks.ema.decay=1.5: give a decay in (0, 1)" in out.stderr


def test_eval_on_the_validation_split_decodes_the_validation_sentences(translator_run, translator_tested, tmp_path):
    out = translator_eval(translator_run, "split=valid", f"outputs_dir={tmp_path / 'valid'}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "on the validation split (the metrics below are named test/*)" in out.stdout
    tested, test_outputs = translator_tested
    assert tested.returncode == 0, tested.stderr[-2000:]
    valid_sources = (tmp_path / "valid" / "test.source").read_text().splitlines()
    test_sources = (test_outputs / "test.source").read_text().splitlines()
    assert len(valid_sources) == len(test_sources) == 40 and not set(valid_sources) & set(test_sources)
