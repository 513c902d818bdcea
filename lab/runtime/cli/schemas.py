"""Every structured-config schema, registered with Hydra's ConfigStore when lab.runtime.cli.errors is imported
(before any config is composed). A conf/ file names its schema first in its defaults list, e.g.
`- /schema/task/language_model@_here_`, then `_self_`; the schemas live next to the code they configure.
A new schema: its dataclass there, one row here, one defaults line in the YAML file that uses it."""
from __future__ import annotations

from hydra.core.config_store import ConfigStore

from lab.data import config as data
from lab.tasks import config as task

SCHEMAS: list[tuple[str, str, type]] = [
    ("schema/task", "language_model", task.LanguageModelTaskConfig),
    ("schema/task", "classification", task.ClassificationTaskConfig),
    ("schema/task", "mlm", task.MLMTaskConfig),
    ("schema/task", "translation", task.TranslationTaskConfig),
    ("schema/task/optimizer", "muon", task.MuonAdamWConfig),
    ("schema/task/scheduler", "warmup_cosine", task.WarmupCosineConfig),
    ("schema/task/scheduler", "inverse_sqrt", task.InverseSqrtConfig),
    ("schema/task/scheduler", "warmup_stable_decay", task.WarmupStableDecayConfig),
    ("schema/data", "lm", data.LMDataConfig),
    ("schema/data", "mlm", data.MLMDataConfig),
    ("schema/data", "text_classification", data.TextClassificationDataConfig),
    ("schema/data", "labelled_files", data.LabelledFilesDataConfig),
    ("schema/data", "parallel", data.ParallelDataConfig),
    ("schema/data", "parallel_text", data.ParallelTextDataConfig),
    ("schema/data/corpus", "shakespeare", data.ShakespeareConfig),
    ("schema/data/corpus", "text_files", data.TextFilesConfig),
    ("schema/data/corpus", "ding", data.DingConfig),
    ("schema/data/source", "movie_reviews", data.MovieReviewsConfig),
]

for group, name, node in SCHEMAS:
    ConfigStore.instance().store(group=group, name=name, node=node)
