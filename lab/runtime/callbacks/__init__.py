"""Callbacks shared by every task."""
from lab.runtime.callbacks.pruning import OptunaPruning
from lab.runtime.callbacks.throughput import Throughput

__all__ = ["OptunaPruning", "Throughput"]
