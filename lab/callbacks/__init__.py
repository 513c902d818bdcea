"""Callbacks shared by every task."""
from lab.callbacks.throughput import Throughput

__all__ = ["Throughput"]
