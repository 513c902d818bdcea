"""LightningDataModules, corpus sources, tokenizers. Never imports lab.models or lab.tasks."""
