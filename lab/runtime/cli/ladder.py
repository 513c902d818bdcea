"""Model ladders (`+ladder=<name>`, conf/ladder/, docs/ladders.md): one family at several sizes, each trained on a
token budget that follows from its size, so that a scaling law can be fitted per variant (lab.report's scaling view).

The ladder's schema (LadderConfig, one named RungConfig per size) and `apply_ladder`, which sets the run's model
shape and its trainer.max_steps, warmup and validation interval from the chosen rung (`ladder.rung`, which the
ladder's conf file sweeps over every rung in a multirun) before anything else reads the config. The counts the
budget rests on are the ones every run records (`parameter_counts`: status.json's params/*)."""
from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from lab.errors import ConfigError
from lab.nn import Role
from lab.nn.params import count_parameters, flops_per_token

log = logging.getLogger("lab")

LM_TASK = "lab.tasks.language_model.LanguageModelTask"
# The settings a ladder sets for each rung: what differs between the rungs of one variant, not a variant's choice
# (lab.report's scaling view groups runs across them).
RUNG_KEYS = ("model.d_model", "model.n_layers", "model.n_heads", "trainer.max_steps", "trainer.val_check_interval",
             "task.scheduler.warmup_steps", "task.scheduler.total_steps", "trainer.devices", "trainer.num_nodes",
             "trainer.accumulate_grad_batches")
# A rung's own trainer settings (RungConfig fields of the same names): how its jobs are laid out, not what they train.
RUNG_TRAINER_KEYS = ("devices", "num_nodes", "accumulate_grad_batches")
# Parameters that are not counted in N (Kaplan et al. 2020): the vocabulary-sized lookup and output matrices.
VOCABULARY_ROLES = frozenset({Role.EMBEDDING, Role.READOUT})
# The launchers that give each job its rung's launcher settings (hydra_plugins/lab_launchers).
PER_JOB_LAUNCHERS = "hydra_plugins.lab_launchers."


@dataclass
class RungConfig:
    """One size of a ladder."""

    d_model: int = MISSING
    """Width of the residual stream."""
    n_layers: int = MISSING
    """Number of blocks."""
    n_heads: int | None = None
    """Attention heads; None: d_model // ladder.head_dim."""
    devices: int | None = None
    """trainer.devices for this rung's jobs (None: the run's). Under hydra/launcher=slurm the job's tasks_per_node and
    gpus_per_node follow it, as they follow trainer.devices; the token budget counts it (tokens per step)."""
    num_nodes: int | None = None
    """trainer.num_nodes for this rung's jobs (None: the run's); slurm's `nodes` follows it."""
    accumulate_grad_batches: int | None = None
    """trainer.accumulate_grad_batches for this rung (None: the run's): e.g. a rung on more devices that keeps the
    tokens per step of the others, or a large rung whose micro-batch must shrink."""
    launcher: dict[str, Any] = field(default_factory=dict)
    """This rung's job's launcher settings over the launcher's own (hydra.launcher.* of hydra/launcher=submitit_local
    or slurm, e.g. {timeout_min: 120, mem_gb: 64}): each rung asks for what its size needs. Other launchers run
    every job alike and the rung's log line says these are not used."""


@dataclass
class LadderConfig:
    """ladder.*: the rungs, the token budget rule and the schedule that follows from it. The learning rate is the
    preset's at every rung: under µP (model.parametrization=mup) it transfers across the rungs' widths (lr_rule)."""

    rungs: dict[str, RungConfig] = field(default_factory=dict)
    """Rung name -> shape, smallest first."""
    rung: str = MISSING
    """The rung this run trains: one of rungs (a ladder's conf file sweeps every rung in a multirun)."""
    tokens_per_param: float = 20.0
    """Training tokens = this x the non-embedding parameters a token passes through (Hoffmann et al. 2022: 20)."""
    flops: float | None = None
    """Training FLOPs per rung instead (an isoFLOP ladder): tokens = flops / FLOPs per token; None: tokens_per_param."""
    head_dim: int = 64
    """Head width of rungs that leave n_heads unset."""
    warmup_fraction: float | None = 0.1
    """Warmup steps = this x the rung's steps; None: the preset's task.scheduler.warmup_steps at every rung."""
    val_checks: int = 4
    """Validations per run, the last at the last step: steps are rounded up to a multiple of this."""

    def __post_init__(self) -> None:
        for name, value, ok, meaning in (
                ("tokens_per_param", self.tokens_per_param, self.tokens_per_param > 0, "> 0"),
                ("flops", self.flops, self.flops is None or self.flops > 0, "> 0 or null"),
                ("head_dim", self.head_dim, self.head_dim > 0, "> 0"),
                ("warmup_fraction", self.warmup_fraction, self.warmup_fraction is None or 0 <= self.warmup_fraction < 1,
                 "in [0, 1) or null"),
                ("val_checks", self.val_checks, self.val_checks >= 1, ">= 1")):
            if not ok:
                raise ConfigError(f"ladder.{name}={value} must be {meaning}")


def parameter_counts(model) -> dict[str, int]:
    """status.json's params/total, params/active (what a token passes through: less than total for MoE) and
    params/non_embedding: the active ones less the vocabulary-sized matrices (token embedding, position tables,
    untied output layer): N of a ladder's budget."""
    counts = count_parameters(model)
    named = dict(model.named_parameters())
    vocabulary = sum(named[n].numel() for n, role in model.parameter_roles().items() if role in VOCABULARY_ROLES)
    return {"params/total": counts["total"], "params/active": counts["active"],
            "params/non_embedding": counts["active"] - vocabulary}


def _shape(ladder: LadderConfig) -> tuple[str, int, int, int]:
    if ladder.rung not in ladder.rungs:
        raise ConfigError(f"ladder.rung={ladder.rung} is not a rung of this ladder; choose one of "
                          f"{', '.join(ladder.rungs)} (a multirun, -m, trains them all)")
    rung = ladder.rungs[ladder.rung]
    if rung.n_heads is None and rung.d_model % ladder.head_dim:
        raise ConfigError(f"ladder rung {ladder.rung}: d_model={rung.d_model} is not a whole number of heads of "
                          f"ladder.head_dim={ladder.head_dim}; set ladder.rungs.{ladder.rung}.n_heads, or a d_model "
                          f"that is a multiple of {ladder.head_dim}")
    for key in RUNG_TRAINER_KEYS:
        if getattr(rung, key) is not None and getattr(rung, key) < 1:
            raise ConfigError(f"ladder.rungs.{ladder.rung}.{key}={getattr(rung, key)} must be >= 1 (or null: the run's "
                              f"trainer.{key})")
    heads = rung.n_heads if rung.n_heads is not None else rung.d_model // ladder.head_dim
    if heads < 1 or rung.d_model % heads:
        raise ConfigError(f"ladder rung {ladder.rung}: d_model={rung.d_model} does not divide into {heads} heads "
                          f"(n_heads={rung.n_heads}, head_dim={ladder.head_dim}); set ladder.rungs.{ladder.rung}.n_heads "
                          f"to a divisor of {rung.d_model}")
    return ladder.rung, rung.d_model, rung.n_layers, heads


def apply_ladder(cfg: DictConfig) -> None:
    """With a `ladder` in cfg: set the chosen rung's model shape, then trainer.max_steps from the budget at the run's
    batch and context, the warmup and the validation interval; log one line that says what it set and why.
    Raises ConfigError (one line, naming the fix) for a non-LM task, a shape that does not divide, or a budget
    no longer than the warmup."""
    if cfg.get("ladder") is None:
        return
    ladder = OmegaConf.to_object(cfg.ladder)  # the schema's own checks (__post_init__) run here
    if cfg.task.get("_target_") != LM_TASK:
        raise ConfigError(f"+ladder fits a law to the language-model loss, but task is {cfg.task.get('_target_')}; "
                          "use an LM preset (e.g. +experiment=gpt_small) or drop +ladder")
    name, d_model, n_layers, heads = _shape(ladder)
    with open_dict(cfg):
        cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads = d_model, n_layers, heads
    layout = _set_rung_trainer(cfg, ladder)
    from lab.models import build_model  # noqa: PLC0415 - the models load after the command line is checked

    with torch.device("meta"):  # the shape alone: no memory, no initialisation cost
        model = build_model(cfg.model, {"vocab_size": 256})
    counts = parameter_counts(model)
    n = counts["params/non_embedding"]
    seq_len = int(cfg.data.get("block_size") or cfg.model.max_seq_len)
    devices = cfg.trainer.get("devices")
    world = (int(devices) if str(devices).isdigit() else 1) * int(cfg.trainer.get("num_nodes") or 1)
    per_step = int(cfg.data.batch_size) * seq_len * int(cfg.trainer.get("accumulate_grad_batches") or 1) * world
    per_token = flops_per_token(model.cfg, count_parameters(model), seq_len)
    if ladder.flops is not None:
        tokens, rule = ladder.flops / per_token, f"{ladder.flops:.3g} FLOPs / {per_token:,.0f} per token"
    else:
        tokens, rule = ladder.tokens_per_param * n, f"{ladder.tokens_per_param:g} x {n:,} non-embedding params"
    # a whole number of validation intervals: the last validation (the loss the scaling fit reads) is the last step
    steps = math.ceil(tokens / per_step / ladder.val_checks) * ladder.val_checks
    scheduler = cfg.task.get("scheduler")
    warmup = None
    if scheduler is not None and "warmup_steps" in scheduler:
        warmup = int(scheduler.warmup_steps) if ladder.warmup_fraction is None else round(ladder.warmup_fraction * steps)
        if steps <= warmup:
            raise ConfigError(f"ladder rung {name} trains {steps} steps ({rule}), no more than its warmup of {warmup}; "
                              "set ladder.warmup_fraction (e.g. 0.1), or raise ladder.tokens_per_param")
    with open_dict(cfg):
        cfg.trainer.max_steps = steps
        cfg.trainer.val_check_interval = steps // ladder.val_checks
        if warmup is not None:
            cfg.task.scheduler.warmup_steps = warmup
    if rung_settings := dict(ladder.rungs[name].launcher):
        target = str(_launcher_target())
        if not target.startswith(PER_JOB_LAUNCHERS):
            log.warning("ladder rung %s: its launcher settings %s are not used: the launcher (%s) runs every job "
                        "alike; hydra/launcher=submitit_local or slurm applies them", name, rung_settings, target)
    log.info("ladder rung %s: d_model=%d n_layers=%d n_heads=%d%s; tokens = %s = %s = %d steps of %s tokens "
             "(batch x context x devices); warmup %s, validation every %d steps; %s",
             name, d_model, n_layers, heads, "".join(f" {k}={v}" for k, v in layout.items()), rule, f"{tokens:,.0f}",
             steps, f"{per_step:,}", warmup, cfg.trainer.val_check_interval, lr_rule(cfg))


def _set_rung_trainer(cfg: DictConfig, ladder: LadderConfig) -> dict[str, int]:
    """Set the rung's own trainer settings (devices, num_nodes, accumulate_grad_batches) on cfg.trainer; returns
    them as trainer.<key> -> value, for the rung's log line."""
    rung = ladder.rungs[ladder.rung]
    layout = {f"trainer.{key}": getattr(rung, key) for key in RUNG_TRAINER_KEYS if getattr(rung, key) is not None}
    with open_dict(cfg):
        for key, value in layout.items():
            OmegaConf.update(cfg, key, value)
    return layout


def _launcher_target() -> str | None:
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415 - only for a rung with launcher settings

    return HydraConfig.get().launcher.get("_target_") if HydraConfig.initialized() else None


def rung_launcher(cfg: DictConfig, launcher: dict[str, Any]) -> dict[str, Any]:
    """The launcher settings of the job's rung over `launcher` (the sweep's resolved hydra.launcher), for lab's
    submitit launchers (hydra_plugins.lab_launchers) to submit this job with: the rung's own
    (`ladder.rungs.<rung>.launcher`), and those of the launcher's settings that follow the trainer's (slurm's
    tasks_per_node, gpus_per_node and nodes follow trainer.devices and num_nodes) when the rung sets the trainer's;
    {} without a ladder. Raises ConfigError, before any job starts, for a rung the ladder lacks or a setting that is
    not among the launcher's."""
    if cfg.get("ladder") is None:
        return {}
    ladder = OmegaConf.to_object(cfg.ladder)
    name = _shape(ladder)[0]
    settings = dict(ladder.rungs[name].launcher)
    unknown = sorted(set(settings) - set(launcher))
    if unknown:
        raise ConfigError(f"ladder.rungs.{name}.launcher.{unknown[0]} is not a setting of this launcher; "
                          f"use one of {', '.join(sorted(launcher))}")
    if _set_rung_trainer(cfg := copy.deepcopy(cfg), ladder):  # the job's launcher config, re-resolved with the rung's trainer
        followed = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
        settings = {**{k: v for k, v in followed.items() if k in launcher and v != launcher[k]}, **settings}
    return settings


def lr_rule(cfg: DictConfig) -> str:
    """What the learning rate is at this rung, said in the rung's log line: under µP the preset's lr is the base
    width's and the per-parameter rates follow the width (lab.nn.mup); under sp it is the same at every width."""
    lr = cfg.task.optimizer.get("lr")
    if cfg.model.get("parametrization") == "mup":
        return (f"lr: the preset's ({lr}) at the µP base width {cfg.model.get('mup_base_width')}, scaled per parameter "
                "to this width (model.parametrization=mup; depth is not transferred: docs/mup.md)")
    return f"lr: the preset's ({lr}) at every rung (sp: not transferred across widths; model.parametrization=mup does)"
