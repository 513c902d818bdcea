"""LightningModules: one per task, sharing lab.tasks.base."""
