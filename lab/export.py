"""Export a trained model to the Hugging Face format: python -m lab.export ckpt_path=<ckpt or run dir> out_dir=<dir>"""
from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from lab.checkpoints.export_dir import ExportConfig
from lab.runtime.cli.errors import user_errors_exit

ConfigStore.instance().store(group="schema", name="export", node=ExportConfig)


@hydra.main(config_path="../conf", config_name="export", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.checkpoints import export_dir  # noqa: PLC0415
    from lab.checkpoints.reading import load_model, resolve_checkpoint  # noqa: PLC0415
    from lab.errors import LabError  # noqa: PLC0415
    from lab.hf.exporting import export  # noqa: PLC0415

    # what the conversion drops or changes is said in lab's log lines; inference configs switch Hydra's logging off
    said = logging.getLogger("lab")
    said.disabled = False
    said.setLevel(logging.INFO)
    said.addHandler(logging.StreamHandler())
    if not cfg.get("out_dir"):
        raise LabError("give out_dir=<directory for model.safetensors, config.json and the tokenizer>")
    out = Path(str(cfg.out_dir)).expanduser()
    export_dir.check_out_dir(out, "huggingface", cfg.overwrite)  # before the model is loaded
    path = resolve_checkpoint(str(cfg.ckpt_path))  # a run directory: its best checkpoint, said in one line
    model, tok, meta = load_model(path, "cpu")
    with export_dir.writing(out, "huggingface", cfg.overwrite) as tmp:  # replaced whole, or refused
        done = export(model, tok, meta, tmp)
    print(f"wrote {done.hf_class} to {out}: {', '.join(done.files)} "
          f"(load with transformers' {done.auto_class}.from_pretrained({str(out)!r}) and "
          f"AutoTokenizer.from_pretrained({str(out)!r}))")


if __name__ == "__main__":
    main()
