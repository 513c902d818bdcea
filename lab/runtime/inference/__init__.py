"""After training: the inference entry points' inputs and outputs (text in, one line out per line), settings
checks, batched prediction per task, and the re-run of a checkpoint's test evaluation. Knows nothing of training."""
