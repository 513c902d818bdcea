"""A Hugging Face directory's sentencepiece model (`tokenizer.model` as Llama-2-era checkpoints ship it,
`spiece.model` as T5's do) as a `tokenizers` object that gives the ids transformers' own tokenizer gives: read
from the model's proto with the `sentencepiece` package, built as transformers 5 builds LlamaTokenizer (BPE with
byte fallback, no normaliser, one "▁" before the text only) and T5Tokenizer (Unigram after the file's
normalisation, a "▁" before every whitespace-separated word), and Marian's source.spm + vocab.json as transformers'
MarianTokenizer reads them (sentencepiece's own segmentation, vocab.json's ids)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from lab.data.sources.stream import content_hash
from lab.errors import DataError

log = logging.getLogger("lab")

FILES = ("tokenizer.model", "spiece.model")
MARIAN = ("source.spm", "vocab.json")  # and target.spm, which lab does not read (spm_tokenizer says why)
UNIGRAM, BPE = 1, 2  # sentencepiece's TrainerSpec.model_type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED = 1, 2, 3, 4  # its SentencePiece.type


def spm_file(directory: Path) -> Path | None:
    """The directory's sentencepiece model: tokenizer.model, spiece.model or (with vocab.json) Marian's source.spm."""
    if all((Path(directory) / n).is_file() for n in MARIAN):
        return Path(directory) / MARIAN[0]
    return next((f for f in (Path(directory) / n for n in FILES) if f.is_file()), None)


def spm_key(file: Path) -> str:
    """The bytes of every file spm_tokenizer reads for this model (a cache key)."""
    files = [file, *(file.with_name(n) for n in ("vocab.json", "tokenizer_config.json"))]
    return "+".join(content_hash(f) for f in files if f.is_file())


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


def _extra_ids(file: Path) -> int:
    """How many sentinels T5Tokenizer adds: tokenizer_config.json's extra_ids, 100 without one."""
    return _json(file.with_name("tokenizer_config.json")).get("extra_ids", 100)


def _unigram(proto, extra_ids: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: PLC0415

    # T5Tokenizer appends the sentinels to the Unigram's entries, last first (<extra_id_0> is the highest id), so a
    # text's "<extra_id_3>" is that entry, as in T5's own span-corruption inputs
    sentinels = [(f"<extra_id_{i}>", 0.0) for i in reversed(range(extra_ids))]
    tok = Tokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces] + sentinels,
                                   unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
    if proto.normalizer_spec.precompiled_charsmap:
        tok.normalizer = normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def _json(file: Path) -> dict:
    try:
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    except ValueError as e:
        raise DataError(f"{file} is not JSON ({e})") from e


def _marian(file: Path, proto):
    """MarianTokenizer: sentencepiece's segmentation of the text (the file's normaliser, its whitespace handling,
    its pieces' scores), then each piece's id in vocab.json. A Unigram over vocab.json's entries in id order with
    the pieces' scores, where every entry that is not a piece of source.spm (the control pieces, target-only
    pieces, language codes) scores so low that a text of known characters never takes it, as sentencepiece
    never does."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: PLC0415

    if proto.trainer_spec.model_type != UNIGRAM:
        raise DataError(f"{file} is not a Unigram sentencepiece model, as Marian's are; lab reads Marian's Unigram")
    config = _json(file.with_name("tokenizer_config.json"))
    if config.get("separate_vocabs") or file.with_name("target_vocab.json").is_file():
        raise DataError(f"{file.parent} has separate source and target vocabularies (target_vocab.json); lab's "
                        "translator has one vocabulary for both sides: give a Marian model with a shared vocab.json")
    vocab = _json(file.with_name("vocab.json"))
    itos = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in itos] != list(range(len(itos))):
        raise DataError(f"{file.with_name('vocab.json')}'s ids are not 0..{len(itos) - 1}, each once; lab reads a "
                        "vocabulary without gaps")
    names = {k: config.get(f"{k}_token", d) for k, d in (("eos", "</s>"), ("unk", "<unk>"), ("pad", "<pad>"))}
    if names["unk"] not in vocab:
        raise DataError(f"{file.with_name('vocab.json')} has no {names['unk']} entry, which MarianTokenizer requires")
    scores = {p.piece: p.score for p in proto.pieces if p.type in (NORMAL, USER_DEFINED)}
    absent = [p for p in scores if p not in vocab]
    if absent:  # MarianTokenizer gives them vocab.json's <unk>; a Unigram cannot give two entries one id
        raise DataError(f"{file} has {len(absent)} pieces vocab.json lacks ({', '.join(absent[:3])}); lab reads "
                        "a Marian vocabulary that holds every piece of source.spm")
    low = min(scores.values()) - 1e6
    tok = Tokenizer(models.Unigram([(t, scores.get(t, low)) for t in itos], unk_id=vocab[names["unk"]],
                                   byte_fallback=False))
    spec = proto.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    steps.append(normalizers.Replace(" ", "▁"))
    if spec.add_dummy_prefix:
        steps.append(normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    specials = [t for t in itos if t in names.values()]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    # a language code (">>fr<<") before the text is one token, as MarianTokenizer takes it off before sentencepiece
    tok.add_tokens([AddedToken(t, normalized=False) for t in itos if t.startswith(">>") and t.endswith("<<")])
    known = {p for p in scores if len(p) == 1}  # sentencepiece reads any other character as unknown
    odd = [t for t in itos if t not in scores and not set(t) <= known and set(t) & known]
    if odd:
        log.warning(f"{file.parent}: {len(odd)} entries of vocab.json ({', '.join(odd[:3])}) are not pieces of "
                    "source.spm and mix characters it knows with characters it does not: a text that contains "
                    "one gets that entry's id, where MarianTokenizer gives the pieces' (or <unk>)")
    if file.with_name("target.spm").is_file() and content_hash(file.with_name("target.spm")) != content_hash(file):
        log.info(f"{file.parent}: target.spm differs from source.spm; lab tokenizes both sides of a pair with "
                 "source.spm (one vocabulary), where MarianTokenizer(text_target=) uses target.spm")
    return tok, specials


# the tokenizers whose ids lab reproduces from the .spm alone; others shift ids (Pegasus: +103 for its own
# specials) or add pieces of their own, so their ids would be wrong without a word
READS = {UNIGRAM: ("T5Tokenizer", {"t5", "mt5", "umt5"}), BPE: ("LlamaTokenizer", {"llama", "mistral", "mixtral"})}


def _refuse_other_family(file: Path, kind) -> None:
    """One error when tokenizer_config.json's tokenizer_class or config.json's model_type names a tokenizer
    other than the one lab reads this kind of model as (a Pegasus spiece.model is a Unigram, but not T5's)."""
    reads, model_types = READS[kind]
    named = _json(file.with_name("tokenizer_config.json")).get("tokenizer_class")
    model_type = _json(file.with_name("config.json")).get("model_type")
    if named is not None and named.removesuffix("Fast") != reads:
        other = named
    elif named is None and model_type is not None and model_type not in model_types:
        other = f"the tokenizer of model_type {model_type!r}"
    else:
        return
    raise DataError(f"{file.parent}: {other} is not {reads}, the one lab reads {file.name} as, so its ids could differ; "
                    "save the tokenizer with transformers (save_pretrained) to get tokenizer.json")


def spm_tokenizer(file: Path):
    """(the `tokenizers` object, lab's kind, its special tokens in id order) of a sentencepiece model file."""
    proto = _proto(file)
    if file.name == MARIAN[0]:
        log.info(f"{file.parent}: Marian's source.spm and vocab.json, read as transformers' MarianTokenizer reads them")
        tok, specials = _marian(file, proto)
        return tok, "unigram", specials
    kind = proto.trainer_spec.model_type
    if kind not in (UNIGRAM, BPE):
        raise DataError(f"{file} is a sentencepiece model of type {kind}, which lab does not read (it reads BPE, as "
                        "Llama's, and Unigram, as T5's); save the tokenizer with transformers to get tokenizer.json")
    _refuse_other_family(file, kind)
    specials = [p.piece for p in proto.pieces if p.type in (UNKNOWN, CONTROL)]
    log.info(f"{file}: a sentencepiece {'BPE' if kind == BPE else 'Unigram'} model, read as transformers' "
             f"{'LlamaTokenizer' if kind == BPE else 'T5Tokenizer'} reads it")
    return (_bpe(proto) if kind == BPE else _unigram(proto, _extra_ids(file))), "bpe" if kind == BPE else "unigram", specials
