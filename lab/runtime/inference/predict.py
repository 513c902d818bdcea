"""Inference behind the entry points: device choice, settings checked before anything loads, the checkpoint
of the right task, and each task's batched prediction (classify,
fill_mask, translate_lines). Texts are normalised exactly as training text was (lab.data.sources.text)."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lab.data.sources.text import normalize_sentence
from lab.errors import LabError
from lab.runtime.inference.inputs import warn

MASK = "[MASK]"  # the fill-mask marker; anywhere else "[MASK]" is ordinary text


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise LabError(f"device={name!r} is not a device ({e}); use auto, cpu or cuda") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LabError(f"device={name} but no CUDA GPU is visible to torch {torch.__version__}; use device=cpu or device=auto")
    return device


def _number(kind: type, value: Any) -> Any:
    """value as kind (int: an integer; float: a finite number), or None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is int:
        return int(value) if float(value).is_integer() else None
    return float(value) if math.isfinite(value) else None


# name -> (type, test, allowed range as said to the user, null allowed)
SETTINGS: dict[str, tuple[type, Callable[[Any], bool], str, bool]] = {
    "temperature": (float, lambda v: v >= 0, "a number >= 0 (0 = greedy)", False),
    "top_k": (int, lambda v: v >= 1, "an integer >= 1, or null for no top-k filter", True),
    "top_p": (float, lambda v: 0 < v <= 1, "a number in (0, 1], or null for no nucleus filter", True),
    "max_new_tokens": (int, lambda v: v >= 1, "an integer >= 1", False),
    "num_samples": (int, lambda v: v >= 1, "an integer >= 1", False),
    "beam_size": (int, lambda v: v >= 1, "an integer >= 1 (1 = greedy)", False),
    "length_penalty": (float, lambda v: True, "a finite number (1.0 = divide by length, 0 = none)", False),
    "max_len_ratio": (float, lambda v: v > 0, "a number > 0", False),
    "max_len_offset": (int, lambda v: v >= 0, "an integer >= 0", False),
    "batch_size": (int, lambda v: v >= 1, "an integer >= 1", False),
    "n_best": (int, lambda v: v >= 1, "an integer from 1 to beam_size, or null for the best translation only", True),
    "no_repeat_ngram": (int, lambda v: v >= 0, "an integer >= 0 (0 = off)", False),
}


def check_settings(cfg, *names: str) -> dict[str, Any]:
    """-> {name: value as its type}; the first value out of range is one LabError naming it and the range."""
    out = {}
    for name in names:
        kind, ok, allowed, nullable = SETTINGS[name]
        value = cfg.get(name)
        if value is None and nullable:
            out[name] = None
            continue
        v = _number(kind, value)
        if v is None or not ok(v):
            raise LabError(f"{name}={value} is out of range: {name} must be {allowed}")
        out[name] = v
    return out


# entry point -> the task whose checkpoints it reads
TASKS = {
    "lab.generate": "lab.tasks.language_model.LanguageModelTask",
    "lab.classify": "lab.tasks.classification.ClassificationTask",
    "lab.fill_mask": "lab.tasks.mlm.MLMTask",
    "lab.translate": "lab.tasks.translation.TranslationTask",
}


def checkpoint_for(entry: str, ckpt_path: str) -> tuple[Path, dict[str, Any]]:
    """A checkpoint file (or run directory: its best, else last checkpoint) -> (path, lab metadata), refused
    with one line when it comes from another task, before any model is built."""
    from lab.checkpoints.reading import lab_metadata, read_checkpoint, resolve_checkpoint  # noqa: PLC0415

    path = resolve_checkpoint(ckpt_path)
    meta = lab_metadata(read_checkpoint(path, metadata_only=True), path)
    task = (meta["config"].get("task") or {}).get("_target_", "?")
    if task != TASKS[entry]:
        other = [e for e, t in TASKS.items() if t == task]
        hint = f"use {other[0]}" if other else "no inference entry point reads it"
        raise LabError(f"ckpt_path={path} is a {task.rsplit('.', 1)[-1]} checkpoint, but {entry} needs a "
                       f"{TASKS[entry].rsplit('.', 1)[-1]} one; {hint}")
    return path, meta


def say_truncated(cut: list[int], total: int, length: int, what: str) -> None:
    """One line for the inputs cut to the trained length: how many, and how many tokens at most."""
    cut = [c for c in cut if c > 0]
    if cut:
        warn(f"{len(cut)} of {total} texts are longer than the {length} tokens ({what}) the model was trained on; "
             f"truncated to it, losing up to {max(cut)} tokens")


def classify(model, tokenizer, labels: list[str], texts: list[str], max_length: int, batch_size: int = 64,
             advance: Callable[[int], None] = lambda n: None) -> list[tuple[str, float]]:
    """-> [(label, probability)] per text, the most probable label of each; texts longer than max_length
    (the trained length) are truncated as in training, said in one line."""
    from lab.data.batching import pad_batch  # noqa: PLC0415
    from lab.data.classification import encode_sentence  # noqa: PLC0415

    device = next(model.parameters()).device
    ids = [encode_sentence(tokenizer, t, max_length) for t in texts]
    say_truncated([len(encode_sentence(tokenizer, t, 1 << 30)) - len(i) for t, i in zip(texts, ids)], len(texts),
                  max_length, "[CLS] and [SEP] included")
    out = []
    for i in range(0, len(texts), batch_size):
        batch = pad_batch(ids[i : i + batch_size], tokenizer.token_id("[PAD]"))
        with torch.no_grad():
            probs = model(batch.to(device)).float().softmax(-1)  # [B, C]
        p, y = probs.max(-1)
        out += [(labels[k], float(q)) for k, q in zip(y.tolist(), p.tolist())]
        advance(len(batch))
    return out


def encode_masked(tokenizer, text: str) -> list[int]:
    """The text normalised as training text, each [MASK] marker as the mask id, everything else (other
    special-token strings included) as ordinary text."""
    pieces = normalize_sentence(text).split(MASK)
    ids = tokenizer.encode(pieces[0])
    for piece in pieces[1:]:
        ids += [tokenizer.token_id(MASK), *tokenizer.encode(piece)]
    return ids


def mask_windows(ids: list[int], masks: list[int], room: int) -> list[tuple[int, list[int]]]:
    """-> (start, ids[start:start + room]) per input row: the whole text if it fits, else one window of room
    tokens per [MASK], centred on it where the text allows (a sliding window: no mask is lost, and every
    position is one the model was trained on)."""
    if len(ids) <= room:
        return [(0, ids)]
    starts = [min(max(0, m - room // 2), len(ids) - room) for m in masks]
    return [(s, ids[s : s + room]) for s in starts]


def fill_mask(model, tokenizer, text: str, top_k: int, max_length: int) -> tuple[list[list[tuple[str, float]]], int]:
    """-> (for each [MASK] in text, left to right, the top_k (token, probability) predictions; the text's
    length in tokens, [CLS]/[SEP] included). Texts longer than max_length (trained) are read in windows."""
    cls, sep, mask = (tokenizer.token_id(t) for t in ("[CLS]", "[SEP]", MASK))
    ids = encode_masked(tokenizer, text)
    masks = [i for i, t in enumerate(ids) if t == mask]
    if not masks:
        return [], len(ids) + 2
    windows = mask_windows(ids, masks, max_length - 2)
    rows = torch.tensor([[cls, *w, sep] for _, w in windows])  # [W, T], all rows equally long
    if len(windows) == 1:
        select = rows == mask  # every mask of the one row, left to right
    else:  # row k answers mask k only
        select = torch.zeros_like(rows, dtype=torch.bool)
        for k, ((start, _), m) in enumerate(zip(windows, masks)):
            select[k, m - start + 1] = True
    device = next(model.parameters()).device
    with torch.no_grad():
        probs = model(rows.to(device), select=select.to(device)).float().softmax(-1)  # [masks, V]
    top = probs.topk(top_k, dim=-1)
    return [[(tokenizer.decode([i], skip_special=False), float(p)) for i, p in zip(idx.tolist(), val.tolist())]
            for val, idx in zip(top.values, top.indices)], len(ids) + 2


def encode_source(tokenizer, line: str, eos_id: int) -> list[int]:
    """A translator's source as training encoded it: normalised text, then </s>."""
    return [*tokenizer.encode(normalize_sentence(line)), eos_id]


def translate_lines(model, tokenizer, lines: list[str], batch_size: int, beam_size: int, max_tokens: int,
                    advance: Callable[[int], None] = lambda n: None, **settings) -> list[str]:
    """Sentences -> translations, batch_size at a time (sorted by length so batches carry little padding);
    sources longer than max_tokens (the trained length, </s> included) are truncated, said in one line, and
    translations use at most max_tokens decoder positions, as in training. With settings n_best=N, each line
    holds the N best translations with their length-normalised scores, tab-separated: score, text, score, text."""
    from lab.data.batching import pad_batch  # noqa: PLC0415
    from lab.models.decoding import translate_ids  # noqa: PLC0415

    device = next(model.parameters()).device
    full = [encode_source(tokenizer, line, model.eos_id) for line in lines]
    ids = [s if len(s) <= max_tokens else s[: max_tokens - 1] + [model.eos_id] for s in full]
    say_truncated([len(f) - len(s) for f, s in zip(full, ids)], len(lines), max_tokens, "</s> included")
    order = sorted(range(len(lines)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(lines)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad_batch([ids[i] for i in chunk], model.pad_id).to(device)
        hyps = translate_ids(model, src, beam_size, max_positions=max_tokens, **settings)  # trained target length
        for i, hyp in zip(chunk, hyps):
            out[i] = ("\t".join(f"{score:.4f}\t{tokenizer.decode(h)}" for h, score in hyp)
                      if settings.get("n_best") else tokenizer.decode(hyp))
        advance(len(chunk))
    return out


def encode_prompt(tokenizer, prompt: str, window: int) -> list[int]:
    """A prompt as LM training text was encoded (lab.data.sources.text.normalize_document: line breaks and spacing
    kept); characters the vocabulary lacks and context beyond the trained window are said in one line each."""
    from lab.data.sources.text import normalize_document  # noqa: PLC0415

    text = normalize_document(prompt)
    unknown = tokenizer.unknown(text)
    if unknown:
        warn(f"the prompt has {len(unknown)} characters the model's vocabulary lacks ({''.join(unknown)!r}); "
             "they are left out")
    ids = tokenizer.encode(text)
    if len(ids) > window:
        warn(f"the prompt has {len(ids)} tokens, more than the {window} the model was trained on; generation "
             f"conditions on its last {window}")
    return ids


class TokenStream:
    """on_token for lab.models.decoding.generate (batch of one): writes the text as tokens arrive, holding back
    a token that ends in the middle of a UTF-8 character (byte-level BPE) until it is complete."""

    def __init__(self, tokenizer, out):
        self.tokenizer, self.out, self.ids, self.shown = tokenizer, out, [], 0

    def __call__(self, next_id: torch.Tensor) -> None:  # [1, 1]
        self.ids.append(int(next_id[0, 0]))
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):
            self.out.write(text[self.shown :])
            self.out.flush()
            self.shown = len(text)
