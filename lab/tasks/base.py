"""What every task shares: optimizer/scheduler wiring, aux losses, checkpoint metadata, token counting."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import lightning as L
import torch

from lab.models.base import LabModel
from lab.nn import Aux
from lab.nn.fsdp import ShardsBlocks, fully_shard_blocks
from lab.nn.params import count_parameters
from lab.nn.roles import NO_DECAY_ROLES
from lab.tasks.config import Finetune
from lab.tasks.optim import apply_lr_scales, parametrized_groups
from lab.tasks.step_metrics import StepMeans

log = logging.getLogger("lab")


class Task(L.LightningModule):
    """A LightningModule around one model.

    optimizer: partial optimizer (Hydra `_partial_: true`), called with two parameter groups by the model's
    parameter roles (LabModel.parameter_roles): matrices get weight decay, Role.VECTOR (biases, norm gains, MoE
    experts' stacked biases) does not; an optimizer that takes `roles` (lab.tasks.optim.MuonAdamW) also gets
    {parameter: Role}.
    scheduler: partial schedule called with the optimizer, stepped every optimizer step.
    finetune: frozen embeddings / blocks and the head's learning rate (Finetune's fields).
    """

    def __init__(self, model: LabModel, optimizer: Callable, scheduler: Callable | None = None,
                 finetune: dict | None = None):
        super().__init__()
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.finetune = Finetune(**dict(finetune or {}))  # task.finetune, checked by its schema (lab.tasks.config)
        self.head_ids = self.finetune.apply(model)
        self.lab_metadata: dict[str, Any] = {}  # resolved config + tokenizer, set by the entry point
        # (source, reference, hypothesis) of the last test, in split order: what lab.eval writes and compares
        # (a translator's; empty for the other tasks)
        self.test_outputs: list[tuple[str, str, str]] = []
        self._rng_to_restore: dict | None = None  # a resumed checkpoint's random state, until the first step
        # training metrics of the optimizer step being accumulated (log_train)
        self._train_means, self._prog_bar = StepMeans(), set()
        self._expert_layers: dict[str, int] = {}  # MoE layer -> experts, for the W&B histogram of their shares

    def configure_optimizers(self):
        roles = self.model.parameter_roles()
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        params = [p for _, p in named]
        decay = [roles[n] not in NO_DECAY_ROLES for n, _ in named]
        groups = [
            {"params": [p for p, d in zip(params, decay) if d]},
            {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0},
        ]
        if self.finetune.head_lr is not None:  # the head's parameters in groups of their own, at head_lr
            head = lambda g: [p for p in g["params"] if id(p) in self.head_ids]  # noqa: E731
            groups = [{**g, "params": [p for p in g["params"] if id(p) not in self.head_ids]} for g in groups] + \
                     [{**g, "params": head(g), "lr": self.finetune.head_lr} for g in groups]
            groups = [g for g in groups if g["params"]]
        scales = self.model.parameter_scales()  # model.parametrization's lrs (lab.nn.mup), all 1 under sp
        groups = parametrized_groups(groups, {p: scales[n].lr for n, p in named})
        takes_roles = "roles" in inspect.signature(self.optimizer_factory).parameters
        optimizer = self.optimizer_factory(groups, **({"roles": {p: roles[n] for n, p in named}} if takes_roles else {}))
        apply_lr_scales(optimizer)
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def setup(self, stage: str) -> None:
        """model.init_from=<Hugging Face model directory>: its weights go into the model when training starts
        (not when resuming, and never at inference: the trained weights are in this task's own checkpoints)."""
        path = self.model.init_from
        if stage == "fit" and path and not self.trainer.ckpt_path:
            from lab.hf.importing import init_from  # noqa: PLC0415

            init_from(self.model, str(path), self.lab_metadata)

    def configure_model(self) -> None:
        """Under lab.runtime.trainer.strategies.FSDP2Strategy (trainer=fsdp / fsdp_cpu): shard every lab.nn Block, then the
        root, with the strategy's mixed precision, activation checkpointing and per-block compile settings.
        Other strategies leave the model whole."""
        strategy = self.trainer.strategy
        if isinstance(strategy, ShardsBlocks):
            fully_shard_blocks(self.model, self.device_mesh["data_parallel"], **strategy.fsdp_settings)

    def compile_for_training(self) -> None:
        """compile=true: torch.compile the model (lab.runtime.trainer.strategies.compile_model calls this)."""
        self.model.compile()

    def aux_loss(self, aux: Aux) -> torch.Tensor | float:
        """The auxiliary losses a training forward returned (MoE routing losses), already weighted, summed for the
        task loss; 0 for dense models. Logs their sum as `train/aux_loss` and each MoE layer's routing statistics
        (see `log_routing`)."""
        total = aux.loss()
        if isinstance(total, torch.Tensor):
            self.log_train({"train/aux_loss": total})
        self.log_routing("train", aux)
        return total

    def log_routing(self, stage: str, aux: Aux) -> None:
        """Per MoE layer, under `<stage>/moe/<layer>/`: load_balance and z_loss (unweighted), router entropy
        (nats), dropped (share of token->expert assignments over capacity), expert_<i> (share of the
        assignments routed to expert i, one CSV column each) and, with auxiliary-loss-free balancing, bias_<i>
        (expert i's selection bias). In training, every log_every_n_steps, the
        expert shares also go to W&B as a histogram over experts (one bar per expert, a heat map over steps).
        Training values are means over the step's micro-batches and the processes (log_train); validation and
        test values are means over the batches of every process (Lightning's sync_dist)."""
        layers = {name: routing.stats for name, routing in aux.routing.items()}  # e.g. "decoder.1"
        if not layers:
            return
        metrics = {}
        for layer, stats in layers.items():
            for key, value in stats.items():
                if key == "expert_fraction":
                    metrics.update({f"{stage}/moe/{layer}/expert_{i}": v for i, v in enumerate(value)})
                elif value.dim() == 1:  # per-expert values, e.g. the balancing bias: bias_<i>
                    metrics.update({f"{stage}/moe/{layer}/{key}_{i}": v for i, v in enumerate(value)})
                else:
                    metrics[f"{stage}/moe/{layer}/{key}"] = value
        if stage == "train":
            self.log_train(metrics)
            self._expert_layers = {layer: len(stats["expert_fraction"]) for layer, stats in layers.items()}
        else:
            self.log_dict(metrics, sync_dist=True)

    def log_train(self, metrics: dict[str, torch.Tensor], prog_bar: bool = False) -> None:
        """A training micro-batch's metrics. Logged once per optimizer step (on_after_backward) as each one's mean
        over the step's micro-batches and over the processes, what one process logs for the same global batch."""
        self._train_means.add(metrics)
        if prog_bar:
            self._prog_bar.update(metrics)

    def on_after_backward(self) -> None:
        """After the step's last micro-batch: its training metrics, logged before the callbacks of the step read them
        (Lightning's own test of whether this micro-batch steps the optimizer)."""
        if not self._train_means or self.trainer.fit_loop._should_accumulate():
            return  # no metrics, or the optimizer step is still accumulating
        strategy = self.trainer.strategy
        means = self._train_means.take(lambda t: strategy.reduce(t, reduce_op="mean") if self.trainer.world_size > 1 else t)
        self.log_dict({k: v for k, v in means.items() if k in self._prog_bar}, prog_bar=True)
        self.log_dict({k: v for k, v in means.items() if k not in self._prog_bar})
        if self._expert_layers and self.global_step % self.trainer.log_every_n_steps == 0:
            self._log_expert_histograms(means)

    def _log_expert_histograms(self, means: dict[str, torch.Tensor]) -> None:
        from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415

        for logger in self.loggers:
            if isinstance(logger, WandbLogger) and self.trainer.global_rank == 0:
                import wandb  # noqa: PLC0415

                charts = {}
                for layer, experts in self._expert_layers.items():
                    shares = [float(means[f"train/moe/{layer}/expert_{i}"]) for i in range(experts)]
                    edges = list(range(experts + 1))  # bin i = expert i
                    charts[f"train/moe/{layer}/experts"] = wandb.Histogram(np_histogram=(shares, edges))
                logger.log_metrics(charts, step=self.global_step)

    def log_final_samples(self) -> None:
        """After training (and the test): examples of what the trained model produces, if the task makes any
        and the last validation did not log them at this step (lab.runtime.trainer.fitting calls it)."""

    def count_tokens(self, batch) -> int:
        """Tokens processed by a training batch (the throughput callback divides by time)."""
        return int(batch[0].numel())

    def sequence_length(self, batch) -> int:
        """Positions per sequence of a training batch (the attention term of the FLOPs estimate)."""
        return int(batch[0].shape[-1])

    def parameter_counts(self) -> dict[str, int]:
        return count_parameters(self.model)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lab"] = self.lab_metadata
        # every rank's random stream (dropout) too: a resumed run draws the masks the uninterrupted run would
        # have (every rank builds the checkpoint, rank 0 writes it)
        state = torch.get_rng_state()
        checkpoint["rng"] = {"torch": self.all_gather(state).reshape(-1, state.numel()).cpu() if self.trainer.world_size > 1
                             else state[None]}
        if torch.cuda.is_initialized():
            checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get("rng")

    def on_train_batch_start(self, batch, batch_idx) -> None:
        """Restore this rank's random state of the checkpoint right before the first step: creating the data
        loader iterator on resume draws a seed the uninterrupted run did not draw at this point."""
        rng, self._rng_to_restore = self._rng_to_restore, None
        if rng:
            states = rng["torch"]
            # clone: set_rng_state reads a row view of the [world, n] tensor from its storage start (segfaults)
            torch.set_rng_state(states[self.global_rank if self.global_rank < len(states) else 0].clone())
            if "cuda" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])

    def log_examples(self, key: str, columns: list[str], rows: list[list]) -> None:
        """Examples (samples, translations, mistakes) as a W&B table and as text in the run's log."""
        from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415 - as _log_expert_histograms

        if self.trainer.global_rank != 0:
            return
        for row in rows:
            log.info("%s @ step %d | %s", key, self.global_step, " | ".join(f"{c}: {v}" for c, v in zip(columns, row)))
        for logger in self.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_text(key=key, columns=["step", *columns], data=[[self.global_step, *r] for r in rows])
