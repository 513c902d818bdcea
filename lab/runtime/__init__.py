"""The run-time: what surrounds a LightningModule in a run. One module per concern: cli (the one-line error
exit, config tree, resolvers), trainer (strategies and their checks), loggers, checkpoints (reading, rebuilding
models), callbacks, training (one `lab.train` run), evaluation, inference (inputs and batched prediction)."""
