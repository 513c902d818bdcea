"""lab's tokenizers as Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json,
special_tokens_map.json), so AutoTokenizer.from_pretrained(dir)(text) gives the ids lab's own input path gives
for that task: lab's normalisation (lab.data.sources.text) as the tokenizer's normaliser, the specials lab adds as its
post-processor ([CLS] text [SEP] for encoders, text </s> for translator sources), [MASK] recognised by the
MLM's tokenizer as lab.fill_mask recognises it, the trained length as model_max_length, left padding for causal LMs.
lab normalises every text before any tokenizer sees it, a data.tokenizer_from one included: that tokenizer's own
normaliser follows lab's, and its post-processor stays only where it adds no ids (lab's LM adds none)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("lab")

EOS = "<|endoftext|>"  # the LM data's document separator (lab.data.lm)

# what lab.data.sources.text does to a text before tokenizing, per kind of model (lm: documents; the others: sentences)
DOCUMENT, SENTENCE = "document", "sentence"
NORMALISATION = {"lm": DOCUMENT, "seq2seq": SENTENCE, "encoder": SENTENCE, "mlm": SENTENCE}


def special_ids(tok) -> dict[str, int | None]:
    return {"eos": tok.token_id(EOS)}


def _hex_class(chars) -> str:
    """A regex character class body naming each character as \\x{hex}: no character is special to the pattern."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in chars)


def lab_normalizer(granularity: str):
    """lab.data.sources.text as a `tokenizers` normaliser: Windows/old-Mac line ends as \\n, NFC; for sentences also
    every run of whitespace (Python's str.isspace, which is what str.split uses) as one space and none at
    either end."""
    from tokenizers import Regex, normalizers  # noqa: PLC0415

    steps = [normalizers.Replace("\r\n", "\n"), normalizers.Replace("\r", "\n"), normalizers.NFC()]
    if granularity == SENTENCE:
        space = _hex_class(chr(c) for c in range(0x110000) if chr(c).isspace())
        steps += [normalizers.Replace(Regex(f"[{space}]+"), " "), normalizers.Replace(Regex(r"\A | \z"), "")]
    return steps


def backend(tok, granularity: str | None = None):
    """A `tokenizers.Tokenizer` that encodes like tok: the trained one for BPE/WordPiece; for characters, a
    word-level vocabulary over single characters. lab maps an unseen character to [UNK] when the vocabulary has
    it and leaves it out otherwise: the latter is a normaliser that deletes every character outside the
    vocabulary. With granularity (DOCUMENT or SENTENCE), lab's normalisation comes first."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: PLC0415

    steps = lab_normalizer(granularity) if granularity else []
    if tok.kind != "char":
        t = Tokenizer.from_str(tok.backend.to_str())
        if t.normalizer is not None:  # WordPiece's BertNormalizer, after lab's
            steps.append(t.normalizer)
    else:
        vocab = {s: i for i, s in enumerate(tok.itos)}
        chars = tok.itos[len(tok.special_tokens):]
        if tok.unk is None:
            t = Tokenizer(models.WordLevel(vocab, unk_token=tok.special_tokens[0] if tok.special_tokens else chars[0]))
            steps.append(normalizers.Replace(Regex(f"[^{_hex_class(chars)}]"), ""))
        else:
            t = Tokenizer(models.WordLevel(vocab, unk_token=tok.itos[tok.unk]))
        t.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
        t.decoder = decoders.Fuse()  # join the characters back without spaces
        t.add_special_tokens(tok.special_tokens)
    if steps:
        t.normalizer = normalizers.Sequence(steps)
    t.encode_special_tokens = True  # as lab encodes: a special token's string in a text is text
    return t


def post_processor(kind: str, tok, specials: dict[str, int | None]):
    """The ids lab adds around a text: [CLS] text [SEP] (encoders), text </s> (a translator's source); an LM's
    prompt is its text alone."""
    from tokenizers import processors  # noqa: PLC0415

    name = lambda k: tok.decode([specials[k]], skip_special=False)  # noqa: E731
    if kind in ("encoder", "mlm"):
        cls, sep = name("cls"), name("sep")
        return processors.TemplateProcessing(single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
                                             special_tokens=[(cls, specials["cls"]), (sep, specials["sep"])])
    if kind == "seq2seq":
        eos = name("eos")
        return processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A $B:1 {eos}:1", special_tokens=[(eos, specials["eos"])])
    return None


def write(tok, out_dir: Path, kind: str, max_length: int, specials: dict[str, int | None]) -> list[str]:
    """kind: lm | seq2seq | encoder | mlm. specials: the pad / bos / eos (/ cls / sep / unk / mask) ids the model
    uses (an LM's are all its document separator). max_length: the trained length. -> the files written."""
    t = backend(tok, NORMALISATION[kind])
    processor = post_processor(kind, tok, specials)
    added = t.post_processor.num_special_tokens_to_add(False) if t.post_processor is not None else 0
    if processor is None and added:  # data.tokenizer_from's own template (a Llama's <s>): lab added none of it
        log.info("tokenizer.json: the source tokenizer's post-processor adds %d token(s) to every text, which lab's "
                 "data and prompts never had; left out, so the export gives lab's ids", added)
    if processor is not None or added:
        t.post_processor = processor
    t.save(str(out_dir / "tokenizer.json"))
    names = {f"{k}_token": tok.decode([i], skip_special=False) for k, i in specials.items() if i is not None}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "padding_side": "left" if kind == "lm" else "right",  # a batch of prompts ends where generation starts
        "clean_up_tokenization_spaces": False,
        # lab encodes special-token strings in a user's text as ordinary text; only ids it adds are special.
        # The MLM is the exception: the fill-mask pipeline needs "[MASK]" matched, and transformers matches all
        # special tokens or none, so there a typed "[CLS]" / "[SEP]" / "[PAD]" / "[UNK]" is that token too
        "split_special_tokens": kind != "mlm",
        **names,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(names, indent=2) + "\n")
    return ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
