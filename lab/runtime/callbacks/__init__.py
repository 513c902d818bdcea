"""Callbacks shared by every task."""
from lab.runtime.callbacks.checkpointing import RunCheckpoint
from lab.runtime.callbacks.ema import EMA
from lab.runtime.callbacks.progress import Progress
from lab.runtime.callbacks.throughput import Throughput

__all__ = ["EMA", "Progress", "RunCheckpoint", "Throughput"]
