"""Top-k predictions for each [MASK] of a text: python -m lab.fill_mask ckpt_path=<mlm ckpt> text="a [MASK] film" """
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli import user_errors_exit
from lab.runtime.help import exit_with_help


@hydra.main(config_path="../conf", config_name="fill_mask", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.runtime.checkpoints import load_model  # noqa: PLC0415
    from lab.runtime.inference import fill_mask, pick_device  # noqa: PLC0415

    model, tokenizer, _meta = load_model(cfg.ckpt_path, pick_device(cfg.device))
    if not hasattr(model, "mlm_head"):
        raise LabError(f"{cfg.ckpt_path} is not a masked-LM checkpoint; lab.fill_mask needs an encoder_mlm run")
    print(cfg.text)
    for n, predictions in enumerate(fill_mask(model, tokenizer, str(cfg.text), int(cfg.top_k), model.cfg.max_seq_len), 1):
        print(f"[MASK] {n}: " + "  ".join(f"{tok} {p:.3f}" for tok, p in predictions))


if __name__ == "__main__":
    exit_with_help("fill_mask")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
