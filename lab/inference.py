"""Helpers for the inference entry points: device choice and checkpoint loading with clear errors."""
from __future__ import annotations

import torch


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
