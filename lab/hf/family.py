"""What a Hugging Face family is to lab (docs/hf_families.md): one transformers class, the kind of lab model it
holds, and the two mappings between them. Export writes `to_hf`'s config.json and tensors; import reads config.json
through `config_from_hf` and the tensors through `to_hf` run backwards (lab.hf.mapping), so the weight
mapping is written once and a round trip lab -> HF -> lab is bit-exact by construction. Also here: what the
families' mappings share (reading a config.json setting lab can reproduce, a bias lab may lack)."""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch

from lab.errors import LabError

log = logging.getLogger("lab")

# the kind of lab model a family holds: lab.models.gpt.GPT, seq2seq.EncoderDecoder, encoder.MaskedLM and
# encoder.EncoderClassifier (lab.hf.registry.MODELS); it decides the specials and the tokenizer's rules too
Kind = Literal["lm", "seq2seq", "mlm", "encoder"]


class Family(ABC):
    """One transformers class and its mappings; registered with one entry in lab.hf.registry.FAMILIES.

    `to_hf` must be a pure rearrangement of the model's parameters (split, transpose, reorder, stack, constant
    zeros where lab has no parameter): import inverts it element by element."""

    hf_class: ClassVar[str]  # config.json's "architectures", e.g. "GPT2LMHeadModel"
    auto_class: ClassVar[str]  # the transformers Auto class that loads it, e.g. "AutoModelForCausalLM"
    kind: ClassVar[Kind]
    layout: ClassVar[str]  # what a lab model needs for check() to pass, in words (the export's error lists them)
    # lab options outside every layout that this family computes (lab.hf.exporting.lab_only refuses them elsewhere)
    computes: ClassVar[frozenset[str]] = frozenset()  # "qk_norm", "output_scale"
    # another family's hf_class that export writes when both reproduce a model (Mistral's layout is Llama's)
    exported_as: ClassVar[str | None] = None

    @abstractmethod
    def check(self, model) -> list[str]:
        """The settings (as "model.k=v") that keep the model from being reproduced exactly; empty when it can be."""

    @abstractmethod
    def to_hf(self, model, meta: dict) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """-> (config.json, state dict): the model in this class's names. meta: the checkpoint's `lab` entry
        (label names), {} for a model built in code."""

    @abstractmethod
    def config_from_hf(self, config: dict, state: dict[str, torch.Tensor], tok) -> dict[str, Any]:
        """config.json (and the file's tensors, where a setting shows only in them, e.g. all-zero biases) -> the
        lab model's arguments; one LabError where lab's layers cannot reproduce a setting."""

    def fold(self, state: Mapping[str, torch.Tensor], config: dict) -> Mapping[str, torch.Tensor]:
        """The file's tensors in the form `to_hf` writes, where the file may hold more (e.g. BERT's token types).
        state reads each tensor when asked for it (lab.hf.weights.Weights): replace only what changes (a ChainMap
        over state), so a large checkpoint is never held whole."""
        return state


def mismatches(cfg, wanted: dict[str, Any]) -> list[str]:
    """The model config's fields that differ from wanted, as "model.k=v"."""
    have = vars(cfg)
    return [f"model.{k}={v}" for k, v in wanted.items() if have[k] != v]


def bias_of(module: torch.nn.Module, n: int) -> torch.Tensor:
    """A missing bias (model.bias=false: nn.Linear and nn.LayerNorm keep bias None) is an exact zero bias in an
    always-biased layout."""
    return module.bias if module.bias is not None else torch.zeros(n)


def setting(config: dict, key: str, allowed: tuple, default=None):
    """config.json's value of key, refused in one line unless lab reproduces it (allowed)."""
    value = config.get(key, default)
    if value not in allowed:
        raise LabError(f"config.json has {key}={value!r}; lab reproduces {' or '.join(map(repr, allowed))} only "
                       "(its layers have no other setting for it)")
    return value


def has_bias(state: dict[str, torch.Tensor], is_bias) -> bool:
    """Whether any of the layout's bias tensors (is_bias(name)) is non-zero: all zero is lab's model.bias=false,
    said in one line (the same function, fewer parameters)."""
    names = [k for k in state if is_bias(k)]
    if names and not any(state[k].any() for k in names):
        log.info("all %d bias tensors are zero: imported with model.bias=false (the same function)", len(names))
        return False
    return bool(names)
