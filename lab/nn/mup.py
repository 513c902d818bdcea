"""µP, the maximal update parametrization (Yang et al. 2022, "Tensor Programs V", arXiv 2203.03466), as
model.parametrization=mup: the rules that make the best Adam learning rate found at a base width
(model.mup_base_width) the best at every width. Everything is relative to the base: at the base shape every
multiplier is exactly 1 and a mup model is bit for bit the sp one (docs/mup.md).

Which rule a parameter gets follows the shape rule of the `mup` package (its InfShape): each dimension of a matrix
is "infinite" when it differs from the same dimension of the base model (a twin TransformerStack built from
base_config on the meta device; outside the stacks, d_model), and the parameter's role (lab.nn.roles) says which
matrices are lookup tables. width_mult = fan_in / base fan_in.

- matrix-like (fan_in and fan_out both scale: attention and FFN projections, experts, width-to-width head
  matrices): init std x width_mult^-1/2 (variance ~ 1/fan_in), Adam lr / width_mult (weight decay x width_mult,
  so lr x weight_decay and with it AdamW's decay per step stays the base's, as mup.MuAdamW does).
- readout-like (only fan_in scales: an untied output layer, a MoE router, a head's width-to-labels matrix): the
  paper's Table 3, i.e. its Table 8's output multiplier 1/width_mult folded into the parameter (Adam is invariant
  to the gradient's scale): init std / width_mult, Adam lr / width_mult (weight decay x width_mult). No
  per-step cost.
- a tied output layer is the token embedding's tensor, which keeps the embedding's rules, so the multiplier
  cannot be folded: the logits are multiplied by 1/width_mult (output_multiplier).
- embeddings (token, positions, relative biases), norm gains and biases: unchanged.
- attention: q.k / head_dim instead of / sqrt(head_dim), taken relative to the base (attention_scale).
- width-dependent constants of sp (model.scale_embeddings' sqrt(d_model), model.output_scale's d_model^-1/2)
  are taken at the base width, so they no longer change with width.

MuonAdamW (task/optimizer=muon): its Muon part gets no learning-rate multiplier. An orthogonalised update has
every singular value 1 and Muon's adjust_lr_fn=original scales it by sqrt(max(1, fan_out/fan_in)), a ratio that
does not change when a matrix's two dimensions scale together: its spectral norm is already what the spectral
condition for feature learning (Yang, Simon, Bernstein 2023) asks of µP, so the base's Muon lr is kept. Its
AdamW part (embeddings, untied readouts, vectors) follows the rules above; the init rules apply to every matrix.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from lab.errors import ConfigError
from lab.nn.config import TransformerConfig, scaled_to_base
from lab.nn.roles import Role

INPUT_ROLES = frozenset({Role.EMBEDDING, Role.VECTOR})
"""Roles whose init and learning rate µP leaves alone (input weights, gains, biases)."""


def is_mup(cfg: TransformerConfig) -> bool:
    return cfg.parametrization == "mup"


def at_base(cfg: TransformerConfig) -> bool:
    """Is this model its own base (sp, or mup at its base shape: then every µP factor is 1)?"""
    return not is_mup(cfg) or (cfg.d_model, cfg.head_dim, cfg.d_ff) == (cfg.mup_base_width, cfg.mup_base_head_dim,
                                                                        cfg.mup_base_d_ff)


def base_width(cfg: TransformerConfig) -> int:
    """The width the sp-sized constants are taken at: model.mup_base_width under mup, d_model under sp."""
    return cfg.mup_base_width if is_mup(cfg) else cfg.d_model


def base_config(cfg: TransformerConfig) -> TransformerConfig:
    """The base model's architecture: cfg with its widths at the base shape (experts' width scaled with d_ff)."""
    moe = cfg.moe
    if moe is not None and moe.expert_hidden is not None:
        moe = dataclasses.replace(moe, expert_hidden=scaled_to_base(cfg, "moe.expert_hidden", moe.expert_hidden))
    return dataclasses.replace(cfg, d_model=cfg.mup_base_width, head_dim=cfg.mup_base_head_dim,
                               d_ff=cfg.mup_base_d_ff, moe=moe, parametrization="sp")


def attention_scale(cfg: TransformerConfig) -> float | None:
    """The factor on q.k: sp's (model.attention_scale, None = 1/sqrt(head_dim)); under mup the base head size's
    factor x base_head_dim / head_dim (1/head_dim scaling), None where that is sp's own (the base), so the
    attention kernel computes exactly what it computes under sp."""
    if not is_mup(cfg) or cfg.head_dim == cfg.mup_base_head_dim:
        return cfg.attention_scale
    at_base = cfg.attention_scale if cfg.attention_scale is not None else cfg.mup_base_head_dim ** -0.5
    return at_base * cfg.mup_base_head_dim / cfg.head_dim


def output_multiplier(cfg: TransformerConfig) -> float | None:
    """The factor on a language model's last hidden state before its output layer: model.output_scale's
    d^-1/2 (at the base width under mup) times, for a tied output layer under mup, base width / width. None: 1."""
    factor = base_width(cfg) ** -0.5 if cfg.output_scale else 1.0
    if is_mup(cfg) and cfg.tie_embeddings:
        factor *= cfg.mup_base_width / cfg.d_model
    return None if factor == 1.0 else factor


def embedding_scale(cfg: TransformerConfig) -> float:
    """model.scale_embeddings' factor on token embeddings: sqrt of the (base) width; 1 when off."""
    return math.sqrt(base_width(cfg)) if cfg.scale_embeddings else 1.0


@dataclasses.dataclass(frozen=True)
class Scale:
    """One parameter's µP factors relative to sp: on its init std and on its Adam lr (1/lr on its weight decay)."""

    init: float = 1.0
    lr: float = 1.0


def parameter_scales(model: nn.Module, cfg: TransformerConfig, roles: dict[str, Role]) -> dict[str, Scale]:
    """Parameter name (as in roles) -> its Scale; all 1 under sp and at the base shape."""
    if not is_mup(cfg):
        return {name: Scale() for name in roles}
    from lab.nn.blocks import TransformerStack  # noqa: PLC0415 - blocks imports this module

    base_cfg = base_config(cfg)
    base_shapes: dict[str, torch.Size] = {}
    for prefix, m in model.named_modules():
        if isinstance(m, TransformerStack):
            with torch.device("meta"):
                twin = TransformerStack(base_cfg, m.causal, cross_attention=m.layers[0].cross_attn is not None)
            base_shapes.update({f"{prefix}.{n}": p.shape for n, p in twin.named_parameters()})
    params = dict(model.named_parameters())
    scales = {}
    for name, role in roles.items():
        shape = params[name].shape
        if role in INPUT_ROLES or len(shape) < 2:
            scales[name] = Scale()
            continue
        base = base_shapes.get(name) or torch.Size(cfg.mup_base_width if d == cfg.d_model else d for d in shape)
        fan_in_mult, fan_out_mult = shape[-1] / base[-1], shape[-2] / base[-2]
        if fan_in_mult == 1.0:  # input-like or finite: unchanged
            scales[name] = Scale()
        elif fan_out_mult != 1.0:  # matrix-like
            scales[name] = Scale(init=fan_in_mult ** -0.5, lr=1 / fan_in_mult)
        else:  # readout-like: Table 8's output multiplier folded in
            scales[name] = Scale(init=1 / fan_in_mult, lr=1 / fan_in_mult)
    return scales


@torch.no_grad()
def rescale_init(model: nn.Module, cfg: TransformerConfig, roles: dict[str, Role]) -> None:
    """Multiply each parameter drawn by sp's init by its Scale.init (a model's last step of construction): the same
    random draw, so a mup model at its base shape is the sp one exactly."""
    params = dict(model.named_parameters())
    for name, scale in parameter_scales(model, cfg, roles).items():
        if scale.init != 1.0:
            params[name].mul_(scale.init)


def refuse_init_from(cfg: TransformerConfig, init_from: str | None) -> None:
    """model.init_from loads weights trained (and shaped) under sp; a mup model would read them with other scales."""
    if init_from and is_mup(cfg):
        raise ConfigError(f"model.init_from={init_from} loads sp weights; µP's multipliers would read them at other "
                          "scales: set model.parametrization=sp to fine-tune them")
