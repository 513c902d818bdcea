"""Sequence-to-sequence translation: teacher forcing, label smoothing, BLEU/chrF of decoded text."""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from lab.models.decoding import translate_ids
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

    val_decoding / test_decoding: {beam_size, length_penalty, max_len_ratio, max_len_offset}; beam_size 1 is
    greedy. val_bleu_batches: validation batches that are also decoded (null: all); decoding dominates a CPU
    validation. num_examples: source / reference / hypothesis rows logged each validation.
    """

    def __init__(self, model, optimizer, scheduler=None, label_smoothing: float = 0.1, val_decoding: dict | None = None,
                 test_decoding: dict | None = None, val_bleu_batches: int | None = 2, num_examples: int = 5):
        super().__init__(model, optimizer, scheduler)
        self.label_smoothing = label_smoothing
        self.val_decoding, self.test_decoding = dict(val_decoding or {"beam_size": 1}), dict(test_decoding or {"beam_size": 5})
        self.val_bleu_batches, self.num_examples = val_bleu_batches, num_examples
        self.val_loss = MeanMetric()
        self.outputs: list[tuple[str, str, str]] = []  # (source, reference, hypothesis) of this evaluation

    def _loss(self, batch, smoothing: float) -> torch.Tensor:
        tgt = batch["target"]  # [B, T]: bos y1 .. yn eos pad..
        logits = self.model(batch["source"], tgt[:, :-1])  # predict each next token: [B, T-1, V]
        return label_smoothed_cross_entropy(logits, tgt[:, 1:], smoothing, self.model.pad_id)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch, self.label_smoothing)
        aux = self.aux_loss("train")
        self.log("train/loss", loss, prog_bar=True)
        return loss + aux

    def count_tokens(self, batch) -> int:
        return int((batch["source"] != self.model.pad_id).sum() + (batch["target"] != self.model.pad_id).sum())

    def sequence_length(self, batch) -> int:
        return int(batch["target"].shape[-1])

    def _eval_step(self, batch, batch_idx: int, decoding: dict, decode: bool) -> None:
        n_tokens = (batch["target"][:, 1:] != self.model.pad_id).sum()
        self.val_loss.update(self._loss(batch, 0.0), weight=n_tokens)
        if decode:
            tok = self.trainer.datamodule.tokenizer
            hyps = [tok.decode(ids) for ids in translate_ids(self.model, batch["source"], **decoding)]
            self.outputs += zip(batch["source_text"], batch["reference_text"], hyps)

    def validation_step(self, batch, batch_idx):
        decode = self.val_bleu_batches is None or batch_idx < self.val_bleu_batches
        self._eval_step(batch, batch_idx, self.val_decoding, decode and not self.trainer.sanity_checking)

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, batch_idx, self.test_decoding, True)

    def _gathered_outputs(self) -> list[tuple[str, str, str]]:
        outputs, self.outputs = self.outputs, []
        if self.trainer.world_size == 1:
            return outputs
        parts: list = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(parts, outputs)  # corpus BLEU needs every sentence in one place
        return [row for part in parts for row in part]

    def _log_eval(self, stage: str) -> tuple | None:
        loss = self.val_loss.compute()  # synced across processes by torchmetrics
        self.val_loss.reset()
        metrics = {f"{stage}/loss": loss, f"{stage}/ppl": torch.exp(loss)}
        outputs = self._gathered_outputs()
        scores = None
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
