"""Export a trained model to the Hugging Face format: python -m lab.export ckpt_path=<ckpt or run dir> out_dir=<dir>"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from lab.runtime.cli import user_errors_exit


@hydra.main(config_path="../conf", config_name="export", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.errors import LabError  # noqa: PLC0415
    from lab.runtime.checkpoints import load_model  # noqa: PLC0415
    from lab.runtime.export import export  # noqa: PLC0415

    if not cfg.get("out_dir"):
        raise LabError("give out_dir=<directory for model.safetensors, config.json and the tokenizer>")
    model, tok, meta = load_model(cfg.ckpt_path, "cpu")
    out = Path(str(cfg.out_dir)).expanduser()
    name = export(model, tok, meta, out)
    print(f"wrote {name} to {out}: model.safetensors, config.json, generation_config.json, tokenizer.json "
          f"(load with transformers' AutoModelForCausalLM.from_pretrained({str(out)!r}))")


if __name__ == "__main__":
    main()
