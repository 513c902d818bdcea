"""Validation BLEU (lab.tasks.translation): decoded on a fixed subset, equal to sacrebleu of the greedy outputs,
choosing the best checkpoint."""
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
from tests.conftest import read_metrics

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
