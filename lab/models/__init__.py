"""nn.Modules built from lab.nn."""
from __future__ import annotations

import inspect


def build_model(model_cfg, vocab: dict[str, int]):
    """The one place the data's vocabulary facts (vocab_size, pad_id, ...) reach a model: each fact the
    model's constructor takes is passed; no config hard-codes a vocabulary size."""
    from hydra.utils import get_class, instantiate  # noqa: PLC0415

    params = inspect.signature(get_class(model_cfg._target_)).parameters
    facts = {k: v for k, v in vocab.items() if k in params}
    return instantiate(model_cfg, **facts, _convert_="all")
