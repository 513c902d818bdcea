"""Label texts with a classifier checkpoint: python -m lab.classify ckpt_path=... text="..." (or file=lines.txt)"""
from __future__ import annotations


import hydra
from omegaconf import DictConfig

from lab.cli import user_errors_exit
from lab.errors import LabError


def classify(model, tokenizer, labels: list[str], texts: list[str], max_length: int, batch_size: int = 64):
    """-> [(label, probability)] per text, the most probable label of each."""
    import torch  # noqa: PLC0415

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


@hydra.main(config_path="../conf", config_name="classify", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.checkpoint import load_model  # noqa: PLC0415
    from lab.inference import pick_device, read_inputs  # noqa: PLC0415

    texts = read_inputs(cfg.text, cfg.file)
    model, tokenizer, meta = load_model(cfg.ckpt_path, pick_device(cfg.device))
    labels = (meta.get("data") or {}).get("labels")
    if not hasattr(model, "classifier") or getattr(model, "head_kind", None) != "sequence" or not labels:
        raise LabError(f"{cfg.ckpt_path} is not a sequence classifier checkpoint (with label names) from lab.train")
    max_length = meta["data"].get("max_length", model.cfg.max_seq_len)
    for text, (label, p) in zip(texts, classify(model, tokenizer, labels, texts, max_length, int(cfg.batch_size))):
        print(f"{label}\t{p:.3f}\t{text}")


if __name__ == "__main__":
    main()
