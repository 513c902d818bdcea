"""The schemas of `task` (and of its optimizer, schedule and finetune settings): typed dataclasses that Hydra
composes conf/task/*.yaml onto (lab.runtime.cli.schemas registers them), so a wrong type, an unknown key or a
`???` left unset is refused while the config is composed. What a type cannot say (ranges, cross-key rules) is
RANGES below, checked by lab.runtime.cli.config_checks before anything is built. Light: no torch here.

A new task setting: a field on its task's dataclass (its default the task's own), an argument of the task's
__init__ with the same name, and a RANGES row when not every value of its type is valid."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import II, MISSING

from lab.errors import ConfigError, LabError

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger("lab")


@dataclass
class AdamWConfig:
    """torch.optim.AdamW (or Adam: the same keys) as the tasks build it: a partial that the task calls with its
    parameter groups. The defaults are torch's."""

    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.01
    fused: bool | None = None
    """one kernel for all tensors on a GPU; None: torch's choice."""


@dataclass
class MuonAdamWConfig(AdamWConfig):
    """lab.tasks.optim.MuonAdamW (`+task/optimizer=muon`). AdamW's keys are ??? here so that merging this onto a
    task's optimizer keeps the task's values (OmegaConf's merge never lets ??? replace a value)."""

    _target_: str = "lab.tasks.optim.MuonAdamW"
    lr: float = MISSING
    betas: list[float] = MISSING
    eps: float = MISSING
    weight_decay: float = MISSING
    fused: bool | None = MISSING
    muon_lr: float = 0.02
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5
    adjust_lr_fn: str | None = None
    muon_weight_decay: float = 0.0
    ns_dtype: str = "bfloat16"
    """Newton-Schulz's compute dtype: bfloat16 (torch.optim.Muon's; tensor cores on a GPU) or float32."""
    muon_experts: bool = True
    """MoE experts' stacked matrices in Muon (each expert's matrix orthogonalised on its own); false: in AdamW, with
    the lr and weight_decay above, to measure what Muon on experts changes (experiments/moe_ablation)."""
    muon_bucket_mb: float | None = None
    """Under FSDP2, the most MiB of whole matrices that one bucket of distributed Muon gathers to their owner ranks
    (two all-to-alls per bucket, pipelined; an owner holds at most two buckets' matrices at a time); null: one
    bucket for all."""


@dataclass
class WarmupCosineConfig:
    """lab.tasks.optim.warmup_cosine: linear warmup, then cosine decay to min_lr at the last step."""

    _target_: str = "lab.tasks.optim.warmup_cosine"
    _partial_: bool = True
    warmup_steps: int = MISSING
    total_steps: int = II("trainer.max_steps")
    min_lr: float = 0.0


@dataclass
class InverseSqrtConfig:
    """lab.tasks.optim.inverse_sqrt: linear warmup to the lr, then lr * sqrt(warmup / step)."""

    _target_: str = "lab.tasks.optim.inverse_sqrt"
    _partial_: bool = True
    warmup_steps: int = MISSING


@dataclass
class WarmupStableDecayConfig(WarmupCosineConfig):
    """lab.tasks.optim.warmup_stable_decay: warmup, constant, then a linear decay over the last decay_fraction."""

    _target_: str = "lab.tasks.optim.warmup_stable_decay"
    decay_fraction: float = 0.2


@dataclass
class Finetune:
    """task.finetune: what a run that starts from pretrained weights (model.init_from) trains."""

    freeze_embeddings: bool = False
    """token and position embeddings keep their values (a tied output layer is the same tensor: it keeps them too)."""
    freeze_blocks: int = 0
    """the first N blocks of every stack (encoder and decoder alike) keep their values."""
    head_lr: float | None = None
    """learning rate of the head: every parameter outside the embeddings and the blocks (a classifier's pooler and
    classifier, an untied output layer). None: the optimizer's lr. Schedules scale it as they scale the lr."""

    def apply(self, model: nn.Module) -> set[int]:
        """Freeze what is asked, said in one line; -> ids of the head's parameters."""
        from lab.nn import Embeddings, TransformerStack  # noqa: PLC0415

        body, frozen = set(), []
        for m in model.modules():
            if isinstance(m, Embeddings):
                body |= {id(p) for p in m.parameters()}
                frozen += list(m.parameters()) if self.freeze_embeddings else []
            elif isinstance(m, TransformerStack):
                body |= {id(p) for p in m.parameters()}
                if self.freeze_blocks > len(m.layers):
                    raise ConfigError(f"task.finetune.freeze_blocks={self.freeze_blocks} but a stack has "
                                      f"{len(m.layers)} blocks; give at most {len(m.layers)}")
                frozen += [p for block in m.layers[: self.freeze_blocks] for p in block.parameters()]
        for p in frozen:
            p.requires_grad_(False)
        if frozen:
            log.info("finetune: %d of %d parameter tensors frozen (embeddings: %s, first %d block(s) of each stack)",
                     len({id(p) for p in frozen}), len(list(model.parameters())),
                     "yes" if self.freeze_embeddings else "no", self.freeze_blocks)
        return {id(p) for p in model.parameters() if id(p) not in body}


@dataclass
class TaskConfig:
    """What every task takes. The schedule is untyped here: presets and the command line swap it inline
    (`task.scheduler._target_=...`); conf/task/scheduler's options carry their own schemas."""

    _target_: str = MISSING
    optimizer: AdamWConfig = field(default_factory=AdamWConfig)
    scheduler: Any = None
    finetune: Finetune = field(default_factory=Finetune)


@dataclass
class Samples:
    """task.samples: texts generated after every validation and at the end (lab.models.decoding.generate's)."""

    prompts: list[str] = field(default_factory=lambda: ["\n"])
    max_new_tokens: int = 200
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None


@dataclass
class LanguageModelTaskConfig(TaskConfig):
    _target_: str = "lab.tasks.language_model.LanguageModelTask"
    samples: Samples | None = field(default_factory=Samples)
    """texts generated after every validation and at the end (log + W&B table); null: none."""


@dataclass
class ClassificationTaskConfig(TaskConfig):
    _target_: str = "lab.tasks.classification.ClassificationTask"
    label_smoothing: float = 0.0
    class_weights: list[float] | None = None
    """E.g. [1.0, 3.0] to up-weight a rare label."""
    num_examples: int = 8
    """misclassified validation examples logged after each validation."""


@dataclass
class MLMTaskConfig(TaskConfig):
    _target_: str = "lab.tasks.mlm.MLMTask"


@dataclass
class TranslationTaskConfig(TaskConfig):
    _target_: str = "lab.tasks.translation.TranslationTask"
    label_smoothing: float = 0.1
    # lab.models.decoding.translate_ids's settings (greedy for beam_size 1 takes fewer of them than beam search)
    val_decoding: dict[str, Any] = field(default_factory=lambda: {"beam_size": 1})
    test_decoding: dict[str, Any] = field(default_factory=lambda: {"beam_size": 5})
    val_bleu_sentences: int | None = 200
    num_examples: int = 5


# (key, test, what it must be) for what the types above cannot say; each `what` completes "<key>=<value> must be".
RANGES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("task.optimizer.lr", lambda v: v > 0, "a number in (0, inf)"),
    ("task.optimizer.weight_decay", lambda v: v >= 0, "a number in [0, inf)"),
    ("task.optimizer.eps", lambda v: v > 0, "a number in (0, inf)"),
    ("task.optimizer.ns_dtype", lambda v: v in ("bfloat16", "float32"), "bfloat16 or float32"),
    ("task.optimizer.muon_bucket_mb", lambda v: v is None or v > 0, "a number > 0, or null for one bucket"),
    ("task.optimizer.betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1), e.g. [0.9, 0.95]"),
    ("task.scheduler.warmup_steps", lambda v: v >= 0, "an integer >= 0"),
    ("task.scheduler.min_lr", lambda v: v >= 0, "a number in [0, inf)"),
    ("task.label_smoothing", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    ("task.finetune.freeze_blocks", lambda v: v >= 0, "an integer >= 0"),
    ("task.finetune.head_lr", lambda v: v is None or v > 0, "a number > 0, or null for the optimizer's lr"),
]


def check_task(task) -> None:
    """The cross-key rule of the task's settings (task: the resolved `task` node)."""
    lr, min_lr = task.optimizer.get("lr"), (task.get("scheduler") or {}).get("min_lr")
    if min_lr is not None and lr is not None and min_lr > lr:
        raise LabError(f"task.scheduler.min_lr={min_lr} > task.optimizer.lr={lr}: the schedule would raise the "
                       "learning rate; set min_lr below lr")
