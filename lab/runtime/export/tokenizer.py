"""lab's tokenizers as Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json,
special_tokens_map.json), so AutoTokenizer.from_pretrained(dir) gives lab's token ids."""
from __future__ import annotations

import json
from pathlib import Path

EOS = "<|endoftext|>"  # the LM data's document separator (lab.data.lm)


def special_ids(tok) -> dict[str, int | None]:
    return {"eos": tok.token_id(EOS)}


def backend(tok):
    """A `tokenizers.Tokenizer` that encodes like tok: the trained one for BPE/WordPiece; for characters, a
    word-level vocabulary over single characters. lab maps an unseen character to [UNK] when the vocabulary has
    it and leaves it out otherwise: the latter is a normaliser that deletes every character outside the
    vocabulary (each written as \\x{hex}, so no character is special to the pattern)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: PLC0415

    if tok.kind != "char":
        t = Tokenizer.from_str(tok.backend.to_str())
        t.encode_special_tokens = True  # as lab encodes: a special token's string in a text is text
        return t
    vocab = {s: i for i, s in enumerate(tok.itos)}
    chars = tok.itos[len(tok.special_tokens):]
    if tok.unk is None:
        t = Tokenizer(models.WordLevel(vocab, unk_token=tok.special_tokens[0] if tok.special_tokens else chars[0]))
        known = "".join(f"\\x{{{ord(c):X}}}" for c in chars)
        t.normalizer = normalizers.Replace(Regex(f"[^{known}]"), "")
    else:
        t = Tokenizer(models.WordLevel(vocab, unk_token=tok.itos[tok.unk]))
    t.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
    t.decoder = decoders.Fuse()  # join the characters back without spaces
    t.add_special_tokens(tok.special_tokens)
    return t


def write(tok, out_dir: Path, max_length: int, specials: dict[str, int | None]) -> None:
    """specials: the pad / bos / eos ids the model uses (an LM's are all its document separator)."""
    backend(tok).save(str(out_dir / "tokenizer.json"))
    names = {f"{k}_token": tok.decode([i], skip_special=False) for k, i in specials.items() if i is not None}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        # lab encodes special-token strings in a user's text as ordinary text; only ids it adds are special
        "split_special_tokens": True,
        **names,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(names, indent=2) + "\n")
