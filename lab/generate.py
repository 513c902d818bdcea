"""Sample text from a trained language model.

    python -m lab.generate ckpt_path=<run dir or .ckpt> prompt="ROMEO, where art thou?"   # prompt + sample
    python -m lab.generate ckpt_path=<run> file=prompts.txt      # or prompts on stdin: one JSON line per prompt
    python -m lab.generate ckpt_path=<run> interactive=true      # prompt by prompt, tokens streamed; Ctrl-D ends
"""
from __future__ import annotations

import json
import sys
import time

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli.errors import user_errors_exit
from lab.runtime.cli.help import exit_with_help
from lab.runtime.inference.inputs import take_text_arguments, taken


@hydra.main(config_path="../conf", config_name="generate", version_base="1.3")
@user_errors_exit
def run(cfg: DictConfig) -> None:
    import torch  # noqa: PLC0415

    from lab.checkpoints.reading import load_model, trained_length  # noqa: PLC0415
    from lab.models.decoding import generate  # noqa: PLC0415
    from lab.runtime.inference.inputs import progress, read_texts, say_blank, write_lines  # noqa: PLC0415
    from lab.runtime.inference.predict import (  # noqa: PLC0415
        TokenStream,
        check_settings,
        checkpoint_for,
        encode_prompt,
        pick_device,
    )

    s = check_settings(cfg, "temperature", "top_k", "top_p", "max_new_tokens", "num_samples")
    prompt, file, interactive = taken("prompt"), taken("file"), bool(cfg.interactive)
    if interactive and (prompt is not None or file is not None or s["num_samples"] > 1):
        raise LabError("interactive=true reads prompts from stdin and streams one sample each; drop prompt=, file= "
                       "and num_samples")
    if prompt == "":
        raise LabError('prompt="" is empty; give a prompt, or leave prompt= out to read prompts from stdin')
    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    path, meta = checkpoint_for("lab.generate", str(cfg.ckpt_path))
    model, tokenizer, meta = load_model(path, device)
    window = trained_length(meta)
    generator = torch.Generator(device=device).manual_seed(int(cfg.seed))

    def sample(ids: list[int], n: int, **kw) -> list[list[int]]:  # -> n continuations of the prompt ids
        x = torch.tensor([ids] * n, device=device)
        out = generate(model, x, s["max_new_tokens"], s["temperature"], s["top_k"], s["top_p"],
                       use_cache=bool(cfg.use_cache), generator=generator, window=window, **kw)
        return [row[len(ids) :] for row in out.tolist()]

    if interactive:  # chat-style: a prompt per line, the sample streamed as it is produced, until <|endoftext|>
        eos = meta["vocab"].get("eos_id")
        for line in sys.stdin:
            ids = encode_prompt(tokenizer, line.removesuffix("\n"), window)
            if ids:
                sample(ids, 1, eos_id=eos, on_token=TokenStream(tokenizer, sys.stdout))
            print(flush=True)
        return
    if file is not None or (prompt is None and not sys.stdin.isatty()):
        prompts = read_texts(None, file, text_key="prompt")  # one JSON line per prompt line, in order
        todo = [i for i, p in enumerate(prompts) if p.strip()]
        say_blank(len(prompts) - len(todo), len(prompts))
        completions = [[] for _ in prompts]
        with progress(len(todo), "generating") as advance:
            for i in todo:
                ids = encode_prompt(tokenizer, prompts[i], window)
                completions[i] = [tokenizer.decode(c) for c in sample(ids, s["num_samples"])] if ids else []
                advance(1)
        write_lines([json.dumps({"prompt": p, "completions": c}, ensure_ascii=False) for p, c in zip(prompts, completions)])
        return
    ids = encode_prompt(tokenizer, cfg.prompt if prompt is None else prompt, window)
    if not ids:
        raise LabError("the prompt encodes to no tokens; give a prompt in the model's vocabulary")
    t0 = time.perf_counter()
    rows = sample(ids, s["num_samples"])
    elapsed = time.perf_counter() - t0
    for i, row in enumerate(rows):
        if s["num_samples"] > 1:
            print(f"--- sample {i + 1} ---")
        print(tokenizer.decode(ids + row))
    new = sum(map(len, rows))
    print(f"--- {new} tokens in {elapsed:.2f}s ({new / elapsed:.0f} tokens/s, kv cache {'on' if cfg.use_cache else 'off'})",
          file=sys.stderr)


def main() -> None:
    take_text_arguments("prompt", "file")  # free text and paths verbatim, before Hydra parses the command line
    run()


if __name__ == "__main__":
    exit_with_help("generate")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
