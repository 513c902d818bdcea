"""Translate with a trained translator: python -m lab.translate ckpt_path=<run dir or .ckpt> text="Wie spät ist es?"
beam_size=5, or input_file=in.de (or lines on stdin) [output_file=out.en]: one translation per input line, in
order; a blank input line gives a blank output line. n_best=N: each output line holds the N best translations with
their length-normalised scores, tab-separated (score, text, score, text, ...); no_repeat_ngram=n: no n-gram twice."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit
from lab.runtime.cli.help import exit_with_help
from lab.runtime.inference.inputs import take_text_arguments, taken


@hydra.main(config_path="../conf", config_name="translate", version_base="1.3")
@user_errors_exit
def run(cfg: DictConfig) -> None:
    from lab.checkpoints.reading import load_model, trained_length  # noqa: PLC0415
    from lab.data.sources.text import normalize_sentence  # noqa: PLC0415
    from lab.runtime.inference.inputs import check_output_file, progress, read_texts, say_blank, write_lines  # noqa: PLC0415
    from lab.runtime.inference.predict import (  # noqa: PLC0415
        check_settings,
        checkpoint_for,
        pick_device,
        translate_lines,
    )

    settings = check_settings(cfg, "beam_size", "length_penalty", "max_len_ratio", "max_len_offset", "batch_size",
                              "n_best", "no_repeat_ngram")
    if settings["n_best"] is not None and settings["n_best"] > settings["beam_size"]:  # before anything is read
        raise LabError(f"n_best={settings['n_best']} is out of range: beam search keeps beam_size={settings['beam_size']} "
                       "hypotheses; raise beam_size to at least n_best")
    check_output_file(taken("output_file"), "output_file")  # written at the end: checked before the work
    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    path, meta = checkpoint_for("lab.translate", str(cfg.ckpt_path))
    lines = read_texts(taken("text"), taken("input_file"), "input_file")
    model, tokenizer, _ = load_model(path, device)
    todo = [i for i, line in enumerate(lines) if normalize_sentence(line)]
    say_blank(len(lines) - len(todo), len(lines))
    batch_size, beam_size = settings.pop("batch_size"), settings.pop("beam_size")
    t0 = time.perf_counter()
    with progress(len(todo), "translating") as advance:
        translations = translate_lines(model, tokenizer, [lines[i] for i in todo], batch_size, beam_size,
                                       trained_length(meta), advance, **settings)
    elapsed = time.perf_counter() - t0
    out = [""] * len(lines)
    for i, t in zip(todo, translations):
        out[i] = t
    output_file = taken("output_file")
    if output_file:
        with open(Path(output_file).expanduser(), "w", encoding="utf-8") as f:
            write_lines(out, f)
        print(f"{len(lines)} lines -> {output_file} in {elapsed:.1f}s (beam {beam_size})", file=sys.stderr)
    else:
        write_lines(out)


def main() -> None:
    take_text_arguments("text", "input_file", "output_file")  # verbatim, before Hydra parses the command line
    run()


if __name__ == "__main__":
    exit_with_help("translate")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
