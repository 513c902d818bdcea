"""Label texts with a classifier checkpoint: python -m lab.classify ckpt_path=<run dir or .ckpt> text="..."
(or file=lines.txt, or lines on stdin). Prints label <TAB> probability <TAB> text (as the model read it), one
line per input line; a blank input line gives a blank output line."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit
from lab.runtime.cli.help import exit_with_help
from lab.runtime.inference.inputs import take_text_arguments, taken


@hydra.main(config_path="../conf", config_name="classify", version_base="1.3")
@user_errors_exit
def run(cfg: DictConfig) -> None:
    from lab.checkpoints.reading import load_model, trained_length  # noqa: PLC0415
    from lab.data.sources.text import normalize_sentence  # noqa: PLC0415
    from lab.models.encoder import EncoderClassifier  # noqa: PLC0415
    from lab.runtime.inference.inputs import progress, read_texts, say_blank, write_lines  # noqa: PLC0415
    from lab.runtime.inference.predict import check_settings, checkpoint_for, classify, pick_device  # noqa: PLC0415

    settings = check_settings(cfg, "batch_size")
    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    path, meta = checkpoint_for("lab.classify", str(cfg.ckpt_path))
    texts = [normalize_sentence(t) for t in read_texts(taken("text"), taken("file"))]
    model, tokenizer, meta = load_model(path, device)
    labels = (meta.get("data") or {}).get("labels")
    if not isinstance(model, EncoderClassifier) or model.head_kind != "sequence" or not labels:
        raise LabError(f"{path} is not a sequence classifier checkpoint (with label names) from lab.train")
    todo = [i for i, t in enumerate(texts) if t]
    say_blank(len(texts) - len(todo), len(texts))
    out = [""] * len(texts)
    with progress(len(todo), "classifying") as advance:
        results = classify(model, tokenizer, labels, [texts[i] for i in todo], trained_length(meta),
                           settings["batch_size"], advance)
    for i, (label, p) in zip(todo, results):
        out[i] = f"{label}\t{p:.3f}\t{texts[i]}"
    write_lines(out)


def main() -> None:
    take_text_arguments("text", "file")  # free text and paths verbatim, before Hydra parses the command line
    run()


if __name__ == "__main__":
    exit_with_help("classify")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
