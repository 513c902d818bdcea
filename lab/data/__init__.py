"""LightningDataModules (lm, mlm, classification, parallel) and the corpora they read, which configs and saved
checkpoints name as `_target_` and so stay at this package's top; the LM's token shards, tokenizers, batching,
the shared cache; where text comes from and how it is read in lab.data.sources. Never imports lab.models or
lab.tasks."""
