"""Hydra multiruns (grid or Optuna): each job's record, skip / resume / start on a re-run, a failure that ends
its job only, and the summary at the end."""
