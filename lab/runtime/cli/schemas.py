"""The typed schemas of conf/: one ConfigStore entry per schema, under schema/<its config group>/<name>.

A conf/ file names its schema first in its defaults list (`- /schema/model/gpt@_here_`, then `_self_`) and sets only
what differs from the schema's defaults. Hydra then composes a typed node: a wrong type, a missing value or an
unknown key is OmegaConf's error at composition (translated to one line in lab.runtime.cli.errors), and the
schema's own validation (its __post_init__: ranges, choices, cross-field rules) runs early in
lab.runtime.cli.config_checks. Imported by lab.runtime.cli.errors, which every entry point imports before Hydra
composes, and by hydra_plugins/lab_schemas, which Hydra itself imports before any composition (tests and benchmarks
calling hydra.compose, sweeps)."""
from __future__ import annotations

import dataclasses
import typing

from hydra.core.config_store import ConfigStore

from lab.data import config as data
from lab.models.encoder import EncoderClassifierConfig, MaskedLMConfig
from lab.models.gpt import GPTConfig
from lab.models.seq2seq import EncoderDecoderConfig
from lab.runtime.cli.ladder import LadderConfig
from lab.tasks import config as task

# (config group, name) -> schema: stored as schema/<group>/<name>.
SCHEMAS: dict[tuple[str, str], type] = {
    ("model", "gpt"): GPTConfig,
    ("model", "encoder_classifier"): EncoderClassifierConfig,
    ("model", "encoder_mlm"): MaskedLMConfig,
    ("model", "seq2seq"): EncoderDecoderConfig,
    ("task", "language_model"): task.LanguageModelTaskConfig,
    ("task", "classification"): task.ClassificationTaskConfig,
    ("task", "mlm"): task.MLMTaskConfig,
    ("task", "translation"): task.TranslationTaskConfig,
    ("task/optimizer", "muon"): task.MuonAdamWConfig,
    ("task/scheduler", "warmup_cosine"): task.WarmupCosineConfig,
    ("task/scheduler", "inverse_sqrt"): task.InverseSqrtConfig,
    ("task/scheduler", "warmup_stable_decay"): task.WarmupStableDecayConfig,
    ("data", "lm"): data.LMDataConfig,
    ("data", "mlm"): data.MLMDataConfig,
    ("data", "text_classification"): data.TextClassificationDataConfig,
    ("data", "labelled_files"): data.LabelledFilesDataConfig,
    ("data", "parallel"): data.ParallelDataConfig,
    ("data", "parallel_text"): data.ParallelTextDataConfig,
    ("data/corpus", "shakespeare"): data.ShakespeareConfig,
    ("data/corpus", "text_files"): data.TextFilesConfig,
    ("data/corpus", "ding"): data.DingConfig,
    ("data/source", "movie_reviews"): data.MovieReviewsConfig,
    ("ladder", "ladder"): LadderConfig,
}


def schema_fields(group: str) -> set[str]:
    """Every field a schema of this config group (e.g. "model") declares, `_target_` aside; nested dataclass
    fields as dotted keys (model.moe's as moe.top_k, ...)."""
    out: set[str] = set()

    def add(cls: type, prefix: str) -> None:
        types = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_"):
                out.add(prefix + f.name)
            for nested in typing.get_args(types[f.name]):
                if dataclasses.is_dataclass(nested):
                    add(nested, f"{prefix}{f.name}.")

    for (g, _), schema in SCHEMAS.items():
        if g == group:
            add(schema, "")
    return out


def schema_for(target: str) -> type | None:
    """The schema whose `_target_` is target (its fields document that target's keywords), or None. Schemas of
    settings no object is built from (ladder.*) have no `_target_`."""
    return next((s for s in SCHEMAS.values() if _target_of(s) == target), None)


def _target_of(schema: type) -> str | None:
    return next((f.default for f in dataclasses.fields(schema) if f.name == "_target_"), None)


def register() -> None:
    store = ConfigStore.instance()
    for (group, name), schema in SCHEMAS.items():
        store.store(group=f"schema/{group}", name=name, node=schema)


register()
