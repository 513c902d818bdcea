"""Sequence-to-sequence translation: teacher forcing, label smoothing, BLEU/chrF of decoded text."""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from lab.errors import LabError
from lab.models.decoding import translate_ids
from lab.nn import Aux
from lab.tasks.base import Task

log = logging.getLogger("lab")


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int) -> torch.Tensor:
    """Mean over non-pad target tokens of (1 - e) * -log p(y) + e * mean_v -log p(v) (Szegedy et al. 2016;
    Vaswani et al. 5.4 use e = 0.1). logits [B, T, V], target [B, T]."""
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=pad_id, label_smoothing=smoothing)


def corpus_scores(hypotheses: list[str], references: list[str]):
    """sacreBLEU's corpus BLEU (tokenize 13a) and chrF on detokenized text -> (bleu, chrf, bleu metric, chrf metric)."""
    from sacrebleu.metrics import BLEU, CHRF  # noqa: PLC0415

    bleu, chrf = BLEU(tokenize="13a"), CHRF()
    return bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references]), bleu, chrf


class TranslationTask(Task):
    """Teacher-forced training with label-smoothed cross-entropy; validation reports loss (unsmoothed nats
    per target token), perplexity, and BLEU/chrF of decoded sentences; the test split is decoded with
    test_decoding (beam search) and prints sacreBLEU's signature with the score.

    val_decoding / test_decoding: {beam_size, length_penalty, max_len_ratio, max_len_offset, no_repeat_ngram};
    beam_size 1 is greedy. val_bleu_sentences: the first N sentences of the validation split (by their index in
    the split, whatever the batch size or device count) are decoded each validation for val/bleu and val/chrf,
    the same N every time, so `optimized_metric=val/bleu optimized_mode=max` picks the best checkpoint by a
    comparable score; null: all. Decoding dominates a CPU validation. num_examples: source / reference /
    hypothesis rows logged each validation. test_outputs: (source, reference, hypothesis) of the last test,
    in split order (lab.eval compares them with another system's). val_bleu_batches: the older setting, read
    from older checkpoints' configs and ignored (said in one line).
    """

    def __init__(self, model, optimizer, scheduler=None, label_smoothing: float = 0.1, val_decoding: dict | None = None,
                 test_decoding: dict | None = None, val_bleu_sentences: int | None = 200, num_examples: int = 5,
                 val_bleu_batches: int | None = None, finetune: dict | None = None):
        super().__init__(model, optimizer, scheduler, finetune)
        if val_bleu_batches is not None:  # the setting of older lab versions, still in their checkpoints' configs
            log.warning("task.val_bleu_batches=%s is no longer used: task.val_bleu_sentences=%s validation sentences are "
                        "decoded (the same ones at every validation)", val_bleu_batches, val_bleu_sentences)
        if val_bleu_sentences is not None and val_bleu_sentences < 0:
            raise LabError(f"task.val_bleu_sentences={val_bleu_sentences}: give the number of validation sentences to "
                           "decode (0: none), or null for all")
        self.label_smoothing = label_smoothing
        self.val_decoding, self.test_decoding = dict(val_decoding or {"beam_size": 1}), dict(test_decoding or {"beam_size": 5})
        self.val_bleu_sentences, self.num_examples = val_bleu_sentences, num_examples
        self.val_loss = MeanMetric()
        self.outputs: list[tuple[int, str, str, str]] = []  # (index, source, reference, hypothesis) of this evaluation

    def _loss(self, batch, smoothing: float) -> tuple[torch.Tensor, Aux]:
        tgt = batch["target"]  # [B, T]: bos y1 .. yn eos pad..
        logits, aux = self.model(batch["source"], tgt[:, :-1], return_aux=True)  # each next token: [B, T-1, V]
        return label_smoothed_cross_entropy(logits, tgt[:, 1:], smoothing, self.model.pad_id), aux

    def training_step(self, batch, batch_idx):
        loss, aux = self._loss(batch, self.label_smoothing)
        aux_total = self.aux_loss(aux)
        self.log_train({"train/loss": loss}, prog_bar=True)
        return loss + aux_total

    def count_tokens(self, batch) -> int:
        return int((batch["source"] != self.model.pad_id).sum() + (batch["target"] != self.model.pad_id).sum())

    def sequence_length(self, batch) -> int:
        return int(batch["target"].shape[-1])

    def on_fit_start(self) -> None:
        checkpoint = self.trainer.checkpoint_callback
        monitor = checkpoint.monitor if checkpoint is not None else None
        if monitor in ("val/bleu", "val/chrf") and self.val_bleu_sentences == 0:
            raise LabError(f"the best checkpoint is chosen by {monitor}, but task.val_bleu_sentences=0 decodes no "
                           "validation sentence; set it (e.g. 200) or optimized_metric=val/loss")
        n = "all" if self.val_bleu_sentences is None else f"the first {self.val_bleu_sentences}"
        log.info("val/bleu, val/chrf: %s validation sentences, decoded with %s at every validation", n, self.val_decoding)

    def _eval_step(self, batch, stage: str, decoding: dict, rows: torch.Tensor) -> None:
        """Loss (and the routing statistics, eval-mode capacity) over the whole batch; the rows marked in `rows`
        [B] (bool) are decoded too."""
        n_tokens = (batch["target"][:, 1:] != self.model.pad_id).sum()
        loss, aux = self._loss(batch, 0.0)
        self.val_loss.update(loss, weight=n_tokens)
        self.log_routing(stage, aux)
        if bool(rows.any()):
            tok = self.trainer.datamodule.tokenizer
            hyps = [tok.decode(ids) for ids in translate_ids(self.model, batch["source"][rows], **decoding)]
            keep = rows.tolist()
            picked = [[x for x, k in zip(column, keep) if k] for column in
                      (batch["index"].tolist(), batch["source_text"], batch["reference_text"])]
            self.outputs += zip(*picked, hyps)

    def validation_step(self, batch, batch_idx):
        n = self.val_bleu_sentences
        rows = batch["index"] < n if n is not None else torch.ones_like(batch["index"], dtype=torch.bool)
        self._eval_step(batch, "val", self.val_decoding, rows & (not self.trainer.sanity_checking))

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test", self.test_decoding, torch.ones_like(batch["index"], dtype=torch.bool))

    def _gathered_outputs(self) -> list[tuple[str, str, str]]:
        """(source, reference, hypothesis) of every process, in split order."""
        outputs, self.outputs = self.outputs, []
        if self.trainer.world_size > 1:
            parts: list = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, outputs)  # corpus BLEU needs every sentence in one place
            outputs = [row for part in parts for row in part]
        by_index = {row[0]: row[1:] for row in outputs}  # a distributed sampler pads with repeated rows
        return [by_index[i] for i in sorted(by_index)]

    def _log_eval(self, stage: str) -> tuple | None:
        loss = self.val_loss.compute()  # synced across processes by torchmetrics
        self.val_loss.reset()
        metrics = {f"{stage}/loss": loss, f"{stage}/ppl": torch.exp(loss)}
        outputs = self._gathered_outputs()
        scores = None
        if stage == "test":
            self.test_outputs = outputs
        if outputs:
            _sources, refs, hyps = map(list, zip(*outputs))
            scores = corpus_scores(hyps, refs)
            metrics[f"{stage}/bleu"], metrics[f"{stage}/chrf"] = scores[0].score, scores[1].score
            self.log_examples(f"{stage}/examples", ["source", "reference", "hypothesis"],
                              [list(row) for row in outputs[: self.num_examples]])
        self.log_dict(metrics, prog_bar=stage == "val", sync_dist=False)
        return scores

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def on_test_epoch_end(self) -> None:
        scores = self._log_eval("test")
        if scores is not None and self.trainer.is_global_zero:  # what a paper table cites: score + signature
            bleu, chrf, bleu_metric, chrf_metric = scores
            beam = self.test_decoding.get("beam_size", 5)
            for line in (bleu.format(signature=str(bleu_metric.get_signature())),
                         chrf.format(signature=str(chrf_metric.get_signature()))):
                print(f"sacrebleu (beam {beam}): {line}")
                log.info("sacrebleu (beam %s): %s", beam, line)
