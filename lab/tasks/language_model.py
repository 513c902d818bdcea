"""Next-token language modelling."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from lab.data.sources.text import normalize_document
from lab.models.decoding import generate
from lab.nn import Aux
from lab.tasks.base import Task


class LanguageModelTask(Task):
    """Cross-entropy on next tokens. Validation reports loss (nats/token), perplexity and bits per byte:
    loss * tokens_per_byte / ln 2, comparable across tokenizers because it is per byte of raw text."""

    def __init__(self, model, optimizer, scheduler=None, samples: dict | None = None, finetune: dict | None = None):
        """samples: {prompts, max_new_tokens, temperature, top_k, top_p}, generated after every validation."""
        super().__init__(model, optimizer, scheduler, finetune)
        self.samples = dict(samples or {})
        self.samples_step: int | None = None  # the step at which samples were last logged
        self.val_loss = MeanMetric()

    def _loss(self, batch) -> tuple[torch.Tensor, Aux]:
        x, y = batch  # [B, T], [B, T]
        logits, aux = self.model(x, return_aux=True)  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()), aux

    def compile_for_training(self) -> None:
        """compile=true: the model and the loss as one compiled graph, so the [B*T, V] float32 logits of the
        cross-entropy are fused rather than written out (+8% tokens/s for gpt2_small_gpu on an H100:
        experiments/gpu/README.md). Decoding (the samples) runs the model uncompiled: no recompilation for
        its shapes."""
        self._loss = torch.compile(self._loss)

    def training_step(self, batch, batch_idx):
        loss, aux = self._loss(batch)
        aux_total = self.aux_loss(aux)
        self.log_train({"train/loss": loss}, prog_bar=True)
        return loss + aux_total

    def _eval_step(self, batch, stage: str) -> None:
        loss, aux = self._loss(batch)
        # weighted by the scored targets: a test window scores only the tokens no earlier window scored (-100)
        self.val_loss.update(loss, weight=int((batch[1] != -100).sum()))
        self.log_routing(stage, aux)  # averaged over the batches (eval-mode capacity)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def _log_eval(self, stage: str) -> None:
        loss = self.val_loss.compute()  # synced across processes by torchmetrics
        self.val_loss.reset()
        tokens_per_byte = self.trainer.datamodule.tokens_per_byte(stage)
        metrics = {f"{stage}/loss": loss, f"{stage}/ppl": torch.exp(loss)}
        if tokens_per_byte:
            metrics[f"{stage}/bpb"] = loss * tokens_per_byte / math.log(2)
        # already reduced over processes by torchmetrics: logged as floats, so Lightning neither reduces again
        # nor warns that epoch-level tensors should be synced
        self.log_dict({k: float(v) for k, v in metrics.items()}, prog_bar=stage == "val", sync_dist=False)

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")
        if self.samples and not self.trainer.sanity_checking:
            self.log_samples()

    def log_samples(self) -> None:
        tok = self.trainer.datamodule.tokenizer
        settings = {k: v for k, v in self.samples.items() if k != "prompts"}
        eos = [self.trainer.datamodule.vocab["eos_id"]]  # a prompt of characters the corpus lacks: a document start
        rows = [[p, tok.decode(self.sample(tok.encode(normalize_document(p)) or eos, **settings))]  # as lab.generate
                for p in self.samples.get("prompts", ["\n"])]
        self.log_examples("samples", ["prompt", "text"], rows)
        self.samples_step = self.global_step

    def log_final_samples(self) -> None:
        if self.samples and self.samples_step != self.global_step:
            self.log_samples()

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def sample(self, prompt_ids: list[int], max_new_tokens: int, **sampling) -> list[int]:
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        was_training = self.model.training
        self.model.eval()
        out = generate(self.model, ids, max_new_tokens, **sampling)
        self.model.train(was_training)
        return out[0].tolist()
