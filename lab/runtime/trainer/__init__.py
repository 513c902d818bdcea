"""The Lightning Trainer around a task: strategies and the checks before Lightning starts (trainer settings,
a checkpoint to resume from), the loggers (CSV, W&B), every-N-steps settings in optimizer steps, the process
memory settings of a training run, and one fit with it (fitting: build the Trainer, fit, stop on a signal, test)."""
