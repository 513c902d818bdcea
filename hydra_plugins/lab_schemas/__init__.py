"""Hydra imports every module under hydra_plugins before it composes anything: importing lab's schema module here
gives every composition (entry points, tests and benchmarks calling hydra.compose, sweeps) the typed schemas that
conf/ files name in their defaults lists."""
import lab.runtime.cli.schemas  # noqa: F401
