"""What the rest of lab (blocks, init, parameter roles, the tasks) knows of a mixture-of-experts layer without
importing its implementation (lab.nn.moe): the record a routed layer returns, and the parts it declares."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn


class Routing(NamedTuple):
    """One routed layer's forward: auxiliary losses (already weighted, in the graph; summed into the task loss)
    and routing statistics (detached, for logging). A NamedTuple: torch.compile and FSDP2 pass it through."""

    losses: dict[str, torch.Tensor]
    stats: dict[str, torch.Tensor]


class Aux(NamedTuple):
    """What a model's forward returns beside its output when asked (return_aux=True): every routed layer's
    record, by layer name ("decoder.1": model.decoder.layers[1]), in the order the layers ran."""

    routing: dict[str, Routing]

    @classmethod
    def of(cls, **stacks: dict[int, Routing]) -> Aux:
        """{stack name: {layer index: record}} -> an Aux named "<stack>.<index>"."""
        return cls({f"{stack}.{i}": r for stack, layers in stacks.items() for i, r in layers.items()})

    def loss(self) -> torch.Tensor | float:
        """The sum of every layer's auxiliary losses; 0.0 for a dense model."""
        total: torch.Tensor | float = 0.0
        for routing in self.routing.values():
            for value in routing.losses.values():
                total = total + value
        return total


class StackedExperts(nn.Module):
    """Experts whose weights are stacked tensors rather than nn.Linear layers: they initialise themselves by
    lab.nn.init_weights' rule (residual_std for the output projection); 3-D parameters are Role.EXPERT
    matrices, the others (stacked biases) Role.VECTOR."""

    def init_parameters(self, std: float, residual_std: float) -> None:
        raise NotImplementedError


class RoutedFFN(nn.Module):
    """A feed-forward layer that routes tokens to experts: forward(x, token_mask) -> (output, Routing).
    router: its nn.Linear (Role.ROUTER); experts: its StackedExperts."""

    router: nn.Linear
    experts: StackedExperts

    def inactive_parameters(self) -> int:
        """Parameters a token does not pass through (lab.nn.params.count_parameters' active count)."""
        raise NotImplementedError
