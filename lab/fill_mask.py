"""Top-k predictions for each [MASK] of a text: python -m lab.fill_mask ckpt_path=<mlm run dir or .ckpt>
text="a [MASK] film" (or file=lines.txt, or lines on stdin). One output line per input line: per [MASK], left to
right, a column `token probability token probability ...`, then the text as the model read it, tab-separated;
a blank input line gives a blank output line."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit
from lab.runtime.cli.help import exit_with_help
from lab.runtime.inference.inputs import take_text_arguments, taken


@hydra.main(config_path="../conf", config_name="fill_mask", version_base="1.3")
@user_errors_exit
def run(cfg: DictConfig) -> None:
    from lab.checkpoints.reading import load_model, trained_length  # noqa: PLC0415
    from lab.data.sources.text import normalize_sentence  # noqa: PLC0415
    from lab.runtime.inference.inputs import progress, read_texts, say_blank, warn, write_lines  # noqa: PLC0415
    from lab.runtime.inference.predict import MASK, checkpoint_for, fill_mask, pick_device  # noqa: PLC0415

    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    path, meta = checkpoint_for("lab.fill_mask", str(cfg.ckpt_path))
    vocab = int(meta["vocab"]["vocab_size"])
    top_k = cfg.top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab:
        raise LabError(f"top_k={top_k} is out of range: top_k must be an integer from 1 to the vocabulary size {vocab}")
    texts = [normalize_sentence(t) for t in read_texts(taken("text"), taken("file"))]
    if len(texts) == 1 and MASK not in texts[0]:
        raise LabError(f"the text has no {MASK}: {texts[0]!r}; write {MASK} where a word should be predicted")
    model, tokenizer, meta = load_model(path, device)
    length = trained_length(meta)
    out, no_mask, windowed = [""] * len(texts), 0, []
    todo = [i for i, t in enumerate(texts) if t]
    say_blank(len(texts) - len(todo), len(texts))
    with progress(len(todo), "filling masks") as advance:
        for i in todo:
            predictions, n_tokens = fill_mask(model, tokenizer, texts[i], top_k, length)
            no_mask += not predictions
            if n_tokens > length:
                windowed.append(n_tokens)
            out[i] = "\t".join([*(" ".join(f"{tok} {p:.3g}" for tok, p in preds) for preds in predictions), texts[i]])
            advance(1)
    if no_mask:
        warn(f"{no_mask} of {len(todo)} texts have no {MASK}: their output lines hold only the text")
    if windowed:
        warn(f"{len(windowed)} of {len(todo)} texts are longer than the {length} tokens ([CLS] and [SEP] included) "
             f"the model was trained on (up to {max(windowed)}): each {MASK} was predicted from a {length}-token "
             "window around it")
    write_lines(out)


def main() -> None:
    take_text_arguments("text", "file")  # free text and paths verbatim, before Hydra parses the command line
    run()


if __name__ == "__main__":
    exit_with_help("fill_mask")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
