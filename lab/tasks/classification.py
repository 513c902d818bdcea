"""Sequence (or token) classification with an encoder."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Accuracy, ConfusionMatrix, F1Score, MeanMetric, MetricCollection

from lab.checkpoints.reading import read_checkpoint
from lab.errors import LabError
from lab.hf.importing import is_hf_dir
from lab.nn import Aux
from lab.tasks.base import Task

IGNORE = -100  # token labels of padding / unlabelled positions


class ClassificationTask(Task):
    """Cross-entropy with optional label smoothing and class weights. Per split (separate metric objects):
    accuracy and macro-F1; for validation and test also a confusion matrix, and after each validation a
    table of misclassified examples (W&B + run log).

    A model with `init_from` set gets that checkpoint's encoder weights when training starts (not when
    resuming, and never at inference: the trained weights are in this task's own checkpoints): a lab MLM
    checkpoint's here, a Hugging Face BERT directory's in Task.setup."""

    def __init__(self, model: nn.Module, optimizer, scheduler=None, label_smoothing: float = 0.0,
                 class_weights: list[float] | None = None, num_examples: int = 8, finetune: dict | None = None):
        super().__init__(model, optimizer, scheduler, finetune)
        num_labels = model.classifier.out_features
        self.label_smoothing, self.num_examples = label_smoothing, num_examples
        if class_weights is not None and len(class_weights) != num_labels:
            raise LabError(f"task.class_weights has {len(class_weights)} values for {num_labels} labels")
        self.register_buffer("class_weights", torch.tensor(class_weights, dtype=torch.float) if class_weights else None)

        def metrics(confusion: bool) -> MetricCollection:
            m = {"acc": Accuracy(task="multiclass", num_classes=num_labels, ignore_index=IGNORE),
                 "f1": F1Score(task="multiclass", num_classes=num_labels, average="macro", ignore_index=IGNORE)}
            if confusion:
                m["confusion"] = ConfusionMatrix(task="multiclass", num_classes=num_labels, ignore_index=IGNORE)
            return MetricCollection(m)

        # one metric object per split: their states must never mix ("train" would clash with Module.train)
        self.train_metrics, self.val_metrics, self.test_metrics = metrics(False), metrics(True), metrics(True)
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.mistakes: list[list] = []

    def setup(self, stage: str) -> None:
        path = self.model.init_from
        if is_hf_dir(str(path or "")):  # a Hugging Face BERT: Task.setup
            return super().setup(stage)
        if stage == "fit" and path and not self.trainer.ckpt_path:
            state = read_checkpoint(path)["state_dict"]
            self.model.load_encoder({k.removeprefix("model."): v for k, v in state.items()}, source=path)

    def _metrics(self, stage: str) -> MetricCollection:
        return {"train": self.train_metrics, "val": self.val_metrics, "test": self.test_metrics}[stage]

    def _step(self, batch, stage: str) -> tuple[torch.Tensor, torch.Tensor, Aux]:
        ids, labels = batch  # [B, T], [B] (or [B, T] token labels)
        logits, aux = self.model(ids, return_aux=True)  # [B, C] or [B, T, C]
        flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1)
        loss = F.cross_entropy(flat_logits, flat_labels, weight=self.class_weights,
                               label_smoothing=self.label_smoothing, ignore_index=IGNORE)
        self._metrics(stage).update(flat_logits.argmax(-1), flat_labels)
        return loss, logits, aux

    def training_step(self, batch, batch_idx):
        loss, _, aux = self._step(batch, "train")
        aux_total = self.aux_loss(aux)
        self.log_train({"train/loss": loss}, prog_bar=True)
        return loss + aux_total

    def validation_step(self, batch, batch_idx):
        loss, logits, aux = self._step(batch, "val")
        self.val_loss.update(loss, weight=batch[1].ne(IGNORE).sum())
        self.log_routing("val", aux)  # averaged over the batches (eval-mode capacity)
        if logits.dim() == 2 and len(self.mistakes) < self.num_examples:
            self._collect_mistakes(batch, logits)

    def test_step(self, batch, batch_idx):
        loss, _, aux = self._step(batch, "test")
        self.test_loss.update(loss, weight=batch[1].ne(IGNORE).sum())
        self.log_routing("test", aux)

    def _collect_mistakes(self, batch, logits: torch.Tensor) -> None:
        ids, labels = batch
        probs = logits.float().softmax(-1)
        wrong = (probs.argmax(-1) != labels).nonzero().flatten().tolist()
        for i in wrong[: self.num_examples - len(self.mistakes)]:
            self.mistakes.append([ids[i].tolist(), int(labels[i]), int(probs[i].argmax()), float(probs[i].max())])

    def _label_names(self) -> list[str]:
        dm = self.trainer.datamodule  # a lab.data.datamodule.LabDataModule
        return list(dm.labels if dm is not None and dm.labels else range(self.model.classifier.out_features))

    def _log_split(self, stage: str) -> None:
        values = self._metrics(stage).compute()  # synced across processes by torchmetrics
        self._metrics(stage).reset()
        out = {f"{stage}/acc": values["acc"], f"{stage}/f1": values["f1"]}
        if stage != "train":
            loss = self.val_loss if stage == "val" else self.test_loss
            out[f"{stage}/loss"] = loss.compute()
            loss.reset()
        self.log_dict(out, prog_bar=stage == "val")
        if "confusion" in values and not self.trainer.sanity_checking:
            names = [str(n) for n in self._label_names()]
            rows = [[names[i], *map(int, row)] for i, row in enumerate(values["confusion"].tolist())]
            self.log_examples(f"{stage}/confusion_matrix", ["true \\ predicted", *names], rows)

    def on_train_epoch_end(self) -> None:
        self._log_split("train")

    def on_validation_epoch_end(self) -> None:
        self._log_split("val")
        if self.mistakes and not self.trainer.sanity_checking:
            tok = self.trainer.datamodule.tokenizer
            names = [str(n) for n in self._label_names()]
            rows = [[tok.decode(ids) if tok else str(ids), names[y], names[p], round(q, 3)] for ids, y, p, q in self.mistakes]
            self.log_examples("val/misclassified", ["text", "label", "predicted", "prob"], rows)
        self.mistakes = []

    def on_test_epoch_end(self) -> None:
        self._log_split("test")
