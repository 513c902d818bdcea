"""A Hugging Face directory's sentencepiece model (`tokenizer.model` as Llama-2-era checkpoints ship it,
`spiece.model` as T5's do) as a `tokenizers` object that gives the ids transformers' own tokenizer gives: read
from the model's proto with the `sentencepiece` package, built as transformers 5 builds LlamaTokenizer (BPE with
byte fallback, no normaliser, one "▁" before the text only) and T5Tokenizer (Unigram after the file's
normalisation, a "▁" before every whitespace-separated word)."""
from __future__ import annotations

import logging
from pathlib import Path

from lab.errors import DataError

log = logging.getLogger("lab")

FILES = ("tokenizer.model", "spiece.model")
UNIGRAM, BPE = 1, 2  # sentencepiece's TrainerSpec.model_type
NORMAL, UNKNOWN, CONTROL = 1, 2, 3  # its SentencePiece.type


def spm_file(directory: Path) -> Path | None:
    return next((f for f in (Path(directory) / n for n in FILES) if f.is_file()), None)


def _proto(file: Path):
    try:
        from sentencepiece import sentencepiece_model_pb2  # noqa: PLC0415 - only directories without tokenizer.json
    except ImportError as e:
        raise DataError(f"{file} is a sentencepiece model, which needs the sentencepiece package; "
                        "pip install 'lab[spm]'") from e
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(file.read_bytes())
    return proto


def _bpe(proto):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    # sentencepiece's BPE keeps no merge list: a merge's rank is the merged piece's score (as transformers derives it)
    normal = {p.piece: (p.score, i) for i, p in enumerate(proto.pieces) if p.type == NORMAL}
    ranked = sorted((-normal[t][0], normal[t][1], t[:k], t[k:])
                    for t in normal for k in range(1, len(t)) if t[:k] in normal and t[k:] in normal)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for *_, a, b in ranked],
                               unk_token=proto.trainer_spec.unk_piece, fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1)])
    return tok


def _unigram(proto):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: PLC0415

    tok = Tokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=proto.trainer_spec.unk_id,
                                   byte_fallback=False))
    if proto.normalizer_spec.precompiled_charsmap:
        tok.normalizer = normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def spm_tokenizer(file: Path):
    """(the `tokenizers` object, lab's kind, its special tokens in id order) of a sentencepiece model file."""
    proto = _proto(file)
    kind = proto.trainer_spec.model_type
    if kind not in (UNIGRAM, BPE):
        raise DataError(f"{file} is a sentencepiece model of type {kind}, which lab does not read (it reads BPE, as "
                        "Llama's, and Unigram, as T5's); save the tokenizer with transformers to get tokenizer.json")
    specials = [p.piece for p in proto.pieces if p.type in (UNKNOWN, CONTROL)]
    log.info(f"{file}: a sentencepiece {'BPE' if kind == BPE else 'Unigram'} model, read as transformers' "
             f"{'LlamaTokenizer' if kind == BPE else 'T5Tokenizer'} reads it")
    return (_bpe(proto) if kind == BPE else _unigram(proto)), "bpe" if kind == BPE else "unigram", specials
