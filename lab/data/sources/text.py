"""The one normalisation of raw text, shared by the datamodules (where text enters training) and the inference
entry points (where a user's text enters), so that a model sees at inference what it saw in training.

Two granularities, because language modelling reads documents whose line breaks and indentation are data:
- `normalize_document`: Unicode NFC (a "ä" typed as a + combining diaeresis is the "ä" of the corpus) and
  Windows/old-Mac line ends as "\\n". Used for LM corpora and generation prompts.
- `normalize_sentence`: the above, then every run of whitespace (tabs, newlines, non-breaking spaces) as one
  space and none at either end. Used for the one-sentence tasks: classification, MLM lines, translation.
"""
from __future__ import annotations

import unicodedata


def normalize_document(text: str) -> str:
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


def normalize_sentence(text: str) -> str:
    return " ".join(normalize_document(text).split())
