"""Parameter counts that every model reports the same way."""
from __future__ import annotations

from torch import nn

from lab.nn.positions import LearnedPositions, RelativePositionBias
from lab.nn.routing import RoutedFFN


def count_parameters(model: nn.Module) -> dict[str, int]:
    """total: every trainable parameter once (tied weights counted once).
    active: parameters a single token passes through; differs from total only for MoE layers, which
    report the experts a token does not visit (RoutedFFN.inactive_parameters).
    matmul: active parameters a token meets in a matrix product, i.e. active minus the lookup tables (token
    embeddings that no output layer shares, learned positions, relative position biases): the 6N of a FLOPs
    estimate (nanoGPT and PaLM leave the lookups out too). A tied embedding is the output layer's matrix, so it counts."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in params)
    inactive = sum(m.inactive_parameters() for m in model.modules() if isinstance(m, RoutedFFN))
    in_products = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookups = {id(p): p for m in model.modules() if isinstance(m, nn.Embedding | LearnedPositions | RelativePositionBias)
               for p in m.parameters() if p.requires_grad and id(p) not in in_products}
    return {"total": total, "active": total - inactive,
            "matmul": total - inactive - sum(p.numel() for p in lookups.values())}


def flops_per_token(cfg, counts: dict[str, int], seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) of a model with lab.nn config `cfg` and parameter counts
    `counts` (lab.nn.params.count_parameters) at `seq_len` positions: 6 per parameter in a matrix product plus
    the attention scores and their weighted sum (PaLM appendix B)."""
    return 6 * counts["matmul"] + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len
