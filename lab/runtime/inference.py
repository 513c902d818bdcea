"""Inference behind the entry points: device choice, reading inputs from text= or a file, and each task's
batched prediction (classify, fill_mask, translate_lines)."""
from __future__ import annotations

from pathlib import Path

import torch

from lab.errors import LabError


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


def read_inputs(text: str | None, file: str | None, file_key: str = "file") -> list[str]:
    """The texts to process: `text="..."` or a file with one text per line (blank lines skipped)."""
    if (text is None) == (file is None):
        raise LabError(f'give exactly one of text="..." or {file_key}=<path with one text per line>')
    if text is not None:
        return [str(text)]
    path = Path(str(file)).expanduser()
    if not path.is_file():
        raise LabError(f"{file_key}={path} does not exist")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def classify(model, tokenizer, labels: list[str], texts: list[str], max_length: int, batch_size: int = 64):
    """-> [(label, probability)] per text, the most probable label of each."""
    from lab.data.batching import pad_batch  # noqa: PLC0415
    from lab.data.classification import encode_sentence  # noqa: PLC0415

    device = next(model.parameters()).device
    out = []
    for i in range(0, len(texts), batch_size):
        ids = pad_batch([encode_sentence(tokenizer, t, max_length) for t in texts[i : i + batch_size]],
                        tokenizer.token_id("[PAD]"))
        with torch.no_grad():
            probs = model(ids.to(device)).float().softmax(-1)  # [B, C]
        p, y = probs.max(-1)
        out += [(labels[k], float(q)) for k, q in zip(y.tolist(), p.tolist())]
    return out


def fill_mask(model, tokenizer, text: str, top_k: int, max_length: int) -> list[list[tuple[str, float]]]:
    """-> for each [MASK] in text (left to right), the top_k (token, probability) predictions."""
    from lab.data.classification import encode_sentence  # noqa: PLC0415

    ids = torch.tensor([encode_sentence(tokenizer, text, max_length)])
    where = ids == tokenizer.token_id("[MASK]")  # [1, T]
    if not where.any():
        raise LabError(f"text has no [MASK] token: {text!r}; write [MASK] where a word should be predicted")
    with torch.no_grad():
        probs = model(ids.to(next(model.parameters()).device), select=where.to(next(model.parameters()).device)).softmax(-1)
    top = probs.topk(top_k, dim=-1)
    return [[(tokenizer.decode([i], skip_special=False), float(p)) for i, p in zip(idx.tolist(), val.tolist())]
            for val, idx in zip(top.values, top.indices)]


def translate_lines(model, tokenizer, lines: list[str], batch_size: int, beam_size: int, **settings) -> list[str]:
    """Sentences -> translations, batch_size at a time (sorted by length so batches carry little padding)."""
    from lab.data.batching import pad_batch  # noqa: PLC0415
    from lab.models.decoding import translate_ids  # noqa: PLC0415

    device = next(model.parameters()).device
    ids = [tokenizer.encode(line)[: model.max_seq_len - 1] + [model.eos_id] for line in lines]
    order = sorted(range(len(lines)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(lines)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad_batch([ids[i] for i in chunk], model.pad_id).to(device)
        hyps = translate_ids(model, src, beam_size, **settings)
        for i, hyp in zip(chunk, hyps):
            out[i] = tokenizer.decode(hyp)
    return out
