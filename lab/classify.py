"""Label texts with a classifier checkpoint: python -m lab.classify ckpt_path=... text="..." (or file=lines.txt)"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli import user_errors_exit
from lab.runtime.help import exit_with_help


@hydra.main(config_path="../conf", config_name="classify", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.runtime.checkpoints import load_model  # noqa: PLC0415
    from lab.runtime.inference import classify, pick_device, read_inputs  # noqa: PLC0415

    texts = read_inputs(cfg.text, cfg.file)
    model, tokenizer, meta = load_model(cfg.ckpt_path, pick_device(cfg.device))
    labels = (meta.get("data") or {}).get("labels")
    if not hasattr(model, "classifier") or getattr(model, "head_kind", None) != "sequence" or not labels:
        raise LabError(f"{cfg.ckpt_path} is not a sequence classifier checkpoint (with label names) from lab.train")
    max_length = meta["data"].get("max_length", model.cfg.max_seq_len)
    for text, (label, p) in zip(texts, classify(model, tokenizer, labels, texts, max_length, int(cfg.batch_size))):
        print(f"{label}\t{p:.3f}\t{text}")


if __name__ == "__main__":
    exit_with_help("classify")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
