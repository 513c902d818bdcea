"""Parameter counts that every model reports the same way."""
from __future__ import annotations

from torch import nn


def count_parameters(model: nn.Module) -> dict[str, int]:
    """total: every trainable parameter once (tied weights counted once).
    active: parameters a single token passes through; differs from total only for MoE layers, which
    report the experts a token does not visit through `inactive_parameters()`."""
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    inactive = sum(m.inactive_parameters() for m in model.modules() if hasattr(m, "inactive_parameters"))
    return {"total": total, "active": total - inactive}
