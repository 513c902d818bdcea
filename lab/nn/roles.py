"""What each parameter of a model is for: one table, declared by the model, read by the optimizer's grouping and
weight decay, Muon's split and (next) per-role initialisation and learning rates."""
from __future__ import annotations

import enum

from torch import nn


class Role(enum.Enum):
    HIDDEN = "hidden"
    """A matrix of a linear layer inside a Block (attention and FFN projections, shared experts): width to width."""
    ROUTER = "router"
    """A mixture-of-experts router's matrix (inside a Block; width to number of experts)."""
    EXPERT = "expert"
    """Routed experts' stacked matrices, [E, out, in]."""
    EMBEDDING = "embedding"
    """Lookup tables: token embeddings (also when an output layer shares the tensor), learned positions,
    relative position biases."""
    READOUT = "readout"
    """The output layer's matrix (to the vocabulary or the labels) when it is its own tensor."""
    HEAD = "head"
    """A matrix of a task head outside the Blocks (BERT's pooler, the MLM head's transform): width to width like a
    hidden matrix, but trained as part of the head."""
    VECTOR = "vector"
    """Norm gains, biases (experts' stacked biases too: 2-D only because stacked) and other 1-D parameters."""


MUON_ROLES = frozenset({Role.HIDDEN, Role.ROUTER, Role.EXPERT})
"""The matrices inside Blocks that lab.tasks.optim.MuonAdamW gives Muon: hidden projections, routers, and experts'
3-D stacks (each expert's matrix orthogonalised on its own)."""
NO_DECAY_ROLES = frozenset({Role.VECTOR})
"""Roles that never get weight decay: gains and biases."""


class ResidualProjection(nn.Linear):
    """A linear layer whose output is added to the residual stream (attention's and the FFN's output
    projections): GPT-2's init scales it by 1/sqrt(2 n_layers), model.zero_init_proj starts it at zero."""
