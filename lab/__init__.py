"""lab: transformer experiments with Lightning and Hydra."""
