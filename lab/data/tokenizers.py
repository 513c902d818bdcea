"""Tokenizers: character level, byte-level BPE and WordPiece (the latter two trained with `tokenizers`).

All share one interface (encode, decode, vocab_size, token_id, to_json) and serialise to a JSON string,
which checkpoints embed so inference never needs the training data.

`encode` reads text as text: a special token's string in it ("[PAD]", "</s>", "[MASK]") is encoded like any
other characters, as transformers' `split_special_tokens=True` does. The only special ids in a sequence are
those lab's code adds itself ([CLS]/[SEP], </s>, <|endoftext|> between documents, the fill-mask [MASK]).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from lab.data.cache import write_once
from lab.data.sources.stream import content_hash
from lab.errors import DataError

KINDS = ("char", "bpe", "wordpiece")


class CharTokenizer:
    """One id per character seen in training; an unseen character maps to [UNK] if the vocabulary has it and
    is left out otherwise (never to another special token); `unknown(text)` lists them so callers can say so."""

    kind = "char"

    def __init__(self, chars: list[str], special_tokens: list[str]):
        self.special_tokens = list(special_tokens)
        self.itos = self.special_tokens + list(chars)
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.unk = self.stoi.get("[UNK]")

    @classmethod
    def train(cls, texts: Iterable[str], special_tokens: list[str], vocab_size: int | None = None) -> CharTokenizer:
        chars: set[str] = set()
        for t in texts:
            chars.update(t)
        return cls(sorted(chars), special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def token_id(self, token: str) -> int | None:
        return self.stoi.get(token) if token in self.special_tokens else None

    def encode(self, text: str) -> list[int]:
        n, unk = len(self.special_tokens), self.unk
        ids = (self.stoi.get(c, unk) for c in text)
        return [i for i in ids if i is not None and (i >= n or i == unk)]  # a special's string is never one char

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of text that are not in the vocabulary (encoded as [UNK] or left out)."""
        return sorted({c for c in text if self.stoi.get(c, -1) < len(self.special_tokens)})

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        n = len(self.special_tokens) if skip_special else 0
        return "".join(self.itos[i] for i in ids if i >= n)

    def to_json(self) -> str:
        return json.dumps({"kind": "char", "chars": self.itos[len(self.special_tokens) :], "special_tokens": self.special_tokens})


class Rereadable:
    """Texts read anew from their source at each iteration (WordPiece training reads them twice), so a big
    sample (data.tokenizer_sample_mb, or all of a corpus) is never held in memory; a one-shot iterator would be."""

    def __init__(self, read: Callable[[], Iterable[str]]):
        self.read = read

    def __iter__(self) -> Iterator[str]:
        return iter(self.read())


class HFTokenizer:
    """A `tokenizers.Tokenizer`: trained (byte-level BPE or WordPiece) or a model directory's (any kind)."""

    def __init__(self, backend, kind: str, special_tokens: list[str]):
        self.backend, self.kind, self.special_tokens = backend, kind, list(special_tokens)
        backend.encode_special_tokens = True  # "[PAD]" in a text is the five characters, not the pad id
        # a text's ids are all of it: a tokenizer.json that sets truncation or padding (data.tokenizer_from) would
        # cut every piece of a corpus to its max_length and pad a batch's encodings with pad ids
        backend.no_truncation()
        backend.no_padding()

    @classmethod
    def train(cls, texts: Iterable[str], special_tokens: list[str], vocab_size: int, kind: str = "bpe") -> HFTokenizer:
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: PLC0415

        if kind == "bpe":  # GPT-2 style: bytes, so nothing is ever unknown
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=special_tokens,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                min_frequency=2,
                show_progress=False,
            )
        else:  # BERT style
            tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
            tok.normalizer = normalizers.BertNormalizer(lowercase=True)
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tok.decoder = decoders.WordPiece()
            texts = list(texts) if isinstance(texts, Iterator) else texts  # read twice: the alphabet, then training
            first = Tokenizer.from_str(tok.to_str())
            first.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=1, special_tokens=special_tokens, show_progress=False))
            # the trainer numbers the "##x" pieces in hash-map order (a new one in every training) and breaks ties
            # between equally frequent merges by id, so each training gave other ids and merges. Given to it first,
            # in code point order (its own order for the single characters), they have fixed ids
            alphabet = sorted(set(first.get_vocab()) - set(special_tokens), key=lambda t: (len(t), t))
            trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special_tokens + alphabet, show_progress=False)
        tok.train_from_iterator(texts, trainer)
        if kind == "wordpiece":  # the alphabet stays in the vocabulary (same ids) but not as special tokens
            d = json.loads(tok.to_str())
            d["added_tokens"] = [t for t in d["added_tokens"] if t["content"] in special_tokens]
            tok = Tokenizer.from_str(json.dumps(d))
        return cls(tok, kind, special_tokens)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def token_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def unknown(self, text: str) -> list[str]:
        """Byte-level BPE knows every text; WordPiece says [UNK] itself: nothing is left out."""
        return []

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "backend": self.backend.to_str(), "special_tokens": self.special_tokens})


Tok = CharTokenizer | HFTokenizer


def training_key(kind: str) -> str:
    """kind in a cache key of what a trained tokenizer's ids build: "wordpiece2" since WordPiece training is
    deterministic (HFTokenizer.train), so no cache keeps ids of the earlier per-process vocabularies."""
    return "wordpiece2" if kind == "wordpiece" else kind


def train_tokenizer(kind: str, texts: Iterable[str], special_tokens: list[str], vocab_size: int) -> Tok:
    if kind not in KINDS:
        raise DataError(f"data.tokenizer={kind!r} is not supported; choose one of {', '.join(KINDS)}")
    if kind == "char":
        return CharTokenizer.train(texts, special_tokens)
    return HFTokenizer.train(texts, special_tokens, vocab_size, kind)


def tokenizer_from_json(data: str) -> Tok:
    d = json.loads(data)
    if d["kind"] == "char":
        return CharTokenizer(d["chars"], d["special_tokens"])
    from tokenizers import Tokenizer  # noqa: PLC0415 - char-level runs never load it

    return HFTokenizer(Tokenizer.from_str(d["backend"]), d["kind"], d["special_tokens"])


def hf_tokenizer_key(directory: Path) -> str:
    """data.tokenizer_from's part of a datamodule's cache key: its tokenizer.json's bytes (not the directory's name),
    or one error line. from2: since a file's truncation and padding are ignored (HFTokenizer)."""
    from lab.data.spm_files import spm_file, spm_key  # noqa: PLC0415

    file = Path(directory) / "tokenizer.json"
    if file.is_file():
        return f"from2:{content_hash(file)}"
    if (spm := spm_file(directory)) is not None:
        return f"from2:{spm_key(spm)}"
    raise DataError(f"data.tokenizer_from={directory} has no tokenizer.json (nor a sentencepiece tokenizer.model or "
                    "Marian's source.spm + vocab.json); give a Hugging Face model directory (config.json, "
                    "model.safetensors, tokenizer.json)")


def tokenizer_from_hf_dir(path: Path) -> Tok:
    """A Hugging Face model directory's tokenizer.json as lab's tokenizer (lab.hf imports it with the
    model): the `tokenizers` object itself (lab adds no specials to a text's ids: the file's post-processor is
    not used), or, for a word-level vocabulary of single characters (lab's own character export), lab's
    character tokenizer. Without tokenizer.json, its sentencepiece model (lab.data.spm_files)."""
    from tokenizers import Tokenizer  # noqa: PLC0415

    from lab.data.spm_files import spm_file, spm_tokenizer  # noqa: PLC0415

    if not (Path(path) / "tokenizer.json").is_file() and (file := spm_file(path)) is not None:
        return HFTokenizer(*spm_tokenizer(file))
    backend = Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
    d = json.loads(backend.to_str())
    specials = [t["content"] for t in sorted(d["added_tokens"], key=lambda t: t["id"]) if t["special"]]
    kind = d["model"]["type"]
    if kind == "WordLevel":
        itos = [s for s, _ in sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1])]
        if itos[: len(specials)] == specials and all(len(c) == 1 for c in itos[len(specials) :]):
            return CharTokenizer(itos[len(specials) :], specials)
    return HFTokenizer(backend, {"BPE": "bpe", "WordPiece": "wordpiece"}.get(kind, kind.lower()), specials)


def load_or_train(path: Path, kind: str, texts: Iterator[str] | Iterable[str], special_tokens: list[str], vocab_size: int) -> Tok:
    """Cached by path; the caller keys the path by corpus fingerprint and tokenizer settings."""
    if path.exists():
        try:
            return tokenizer_from_json(path.read_text())
        except (ValueError, KeyError, Exception) as e:  # any parse failure means a bad cache file
            raise DataError(f"cached tokenizer {path} is unreadable ({e}); delete it and run again") from e
    tok = train_tokenizer(kind, texts, special_tokens, vocab_size)
    return tokenizer_from_json(write_once(path, tok.to_json()))  # a racer that published first wins
