"""The one registry of Hugging Face families (docs/hf_families.md): a family is one entry in FAMILIES.

Its order is the order the messages list the classes in (export's supported layouts, import's supported
architectures) and breaks a tie between equally near layouts in export's error; it never decides which class a
model is exported as: at most one family of a kind reproduces a model, unless one says which it is exported as
(Family.exported_as)."""
from __future__ import annotations

from lab.errors import LabError
from lab.hf.apertus import Apertus
from lab.hf.bert import BertForMaskedLM, BertForSequenceClassification
from lab.hf.family import Family, Kind
from lab.hf.gpt2 import GPT2
from lab.hf.llama import Llama
from lab.hf.marian import Marian
from lab.hf.mistral import Mistral
from lab.hf.mixtral import Mixtral
from lab.hf.pegasus import Pegasus
from lab.hf.qwen3 import Qwen3
from lab.hf.switch import SwitchTransformers
from lab.hf.t5 import T5
from lab.models.encoder import EncoderClassifier, MaskedLM
from lab.models.gpt import GPT
from lab.models.seq2seq import EncoderDecoder

FAMILIES: tuple[Family, ...] = (
    GPT2(), Llama(), Mixtral(), Mistral(), Qwen3(), Apertus(),
    Marian(), Pegasus(), T5(), SwitchTransformers(),
    BertForMaskedLM(), BertForSequenceClassification(),
)

# the lab model class of each kind
MODELS: dict[Kind, type] = {"lm": GPT, "seq2seq": EncoderDecoder, "mlm": MaskedLM, "encoder": EncoderClassifier}


def families(kind: Kind) -> tuple[Family, ...]:
    return tuple(f for f in FAMILIES if f.kind == kind)


def family_named(hf_class: str) -> Family | None:
    return next((f for f in FAMILIES if f.hf_class == hf_class), None)


def kind_of(model) -> Kind:
    """lm | seq2seq | mlm | encoder (the classifier): which families, specials and tokenizer rules apply."""
    kind = next((k for k, cls in MODELS.items() if isinstance(model, cls)), None)
    if kind is None:
        raise LabError(f"lab.export does not know this model ({type(model).__name__})")
    return kind
