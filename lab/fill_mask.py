"""Top-k predictions for each [MASK] of a text: python -m lab.fill_mask ckpt_path=<mlm ckpt> text="a [MASK] film" """
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.cli import user_errors_exit
from lab.errors import LabError


def fill_mask(model, tokenizer, text: str, top_k: int, max_length: int) -> list[list[tuple[str, float]]]:
    """-> for each [MASK] in text (left to right), the top_k (token, probability) predictions."""
    import torch  # noqa: PLC0415

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


@hydra.main(config_path="../conf", config_name="fill_mask", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.checkpoint import load_model  # noqa: PLC0415
    from lab.inference import pick_device  # noqa: PLC0415

    model, tokenizer, meta = load_model(cfg.ckpt_path, pick_device(cfg.device))
    if not hasattr(model, "mlm_head"):
        raise LabError(f"{cfg.ckpt_path} is not a masked-LM checkpoint; lab.fill_mask needs an encoder_mlm run")
    print(cfg.text)
    for n, predictions in enumerate(fill_mask(model, tokenizer, str(cfg.text), int(cfg.top_k), model.cfg.max_seq_len), 1):
        print(f"[MASK] {n}: " + "  ".join(f"{tok} {p:.3f}" for tok, p in predictions))


if __name__ == "__main__":
    main()
