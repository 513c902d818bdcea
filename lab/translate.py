"""Translate with a trained translator: python -m lab.translate ckpt_path=... text="Wie spät ist es?" beam_size=5"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli import user_errors_exit
from lab.runtime.help import exit_with_help


@hydra.main(config_path="../conf", config_name="translate", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from lab.runtime.checkpoints import load_model  # noqa: PLC0415
    from lab.runtime.inference import pick_device, read_inputs, translate_lines  # noqa: PLC0415

    lines = read_inputs(cfg.text, cfg.input_file, "input_file")
    if int(cfg.beam_size) < 1:
        raise LabError(f"beam_size must be >= 1, got {cfg.beam_size}")
    model, tokenizer, _ = load_model(cfg.ckpt_path, pick_device(cfg.device))
    if not hasattr(model, "encode") or not hasattr(model, "bos_id"):
        raise LabError(f"{cfg.ckpt_path} is not a translator checkpoint; lab.translate needs a seq2seq run")
    settings = {"max_len_ratio": float(cfg.max_len_ratio), "max_len_offset": int(cfg.max_len_offset),
                "length_penalty": float(cfg.length_penalty)}
    t0 = time.perf_counter()
    translations = translate_lines(model, tokenizer, lines, int(cfg.batch_size), int(cfg.beam_size), **settings)
    elapsed = time.perf_counter() - t0
    if cfg.output_file:
        Path(str(cfg.output_file)).expanduser().write_text("".join(t + "\n" for t in translations), encoding="utf-8")
        print(f"{len(lines)} sentences -> {cfg.output_file} in {elapsed:.1f}s (beam {cfg.beam_size})", file=sys.stderr)
    else:
        print("\n".join(translations))


if __name__ == "__main__":
    exit_with_help("translate")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
