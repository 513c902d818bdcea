"""Callbacks shared by every task."""
from lab.runtime.callbacks.ema import EMA
from lab.runtime.callbacks.throughput import Throughput

__all__ = ["EMA", "Throughput"]
