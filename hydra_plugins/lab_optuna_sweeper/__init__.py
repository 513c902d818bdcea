"""lab's Optuna sweeper for Hydra (+hparams_search=optuna)."""
