"""Callbacks shared by every task."""
from lab.runtime.callbacks.checkpointing import RunCheckpoint
from lab.runtime.callbacks.throughput import Throughput

__all__ = ["RunCheckpoint", "Throughput"]
