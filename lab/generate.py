"""Sample text from a trained language model: python -m lab.generate ckpt_path=... prompt="ROMEO." """
from __future__ import annotations

import time

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli import user_errors_exit
from lab.runtime.help import exit_with_help


@hydra.main(config_path="../conf", config_name="generate", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    import torch  # noqa: PLC0415

    from lab.models.decoding import generate  # noqa: PLC0415
    from lab.runtime.checkpoints import load_model  # noqa: PLC0415
    from lab.runtime.inference import pick_device  # noqa: PLC0415

    device = pick_device(cfg.device)
    model, tokenizer, _meta = load_model(cfg.ckpt_path, device)
    if not hasattr(model, "new_caches") or not hasattr(model, "lm_head") or hasattr(model, "encode"):
        raise LabError(f"{cfg.ckpt_path} is not a language model checkpoint; lab.generate samples from GPT runs (translators: lab.translate)")
    prompt_ids = tokenizer.encode(str(cfg.prompt))
    if not prompt_ids:
        raise LabError("prompt encodes to no tokens; give a non-empty prompt")
    generator = torch.Generator(device=device).manual_seed(int(cfg.seed))
    ids = torch.tensor([prompt_ids] * int(cfg.num_samples), device=device)
    t0 = time.perf_counter()
    out = generate(model, ids, int(cfg.max_new_tokens), float(cfg.temperature), cfg.top_k, cfg.top_p,
                   use_cache=bool(cfg.use_cache), generator=generator)
    elapsed = time.perf_counter() - t0
    for i, row in enumerate(out.tolist()):
        if cfg.num_samples > 1:
            print(f"--- sample {i + 1} ---")
        print(tokenizer.decode(row))
    new = (out.shape[1] - ids.shape[1]) * out.shape[0]
    print(f"--- {new} tokens in {elapsed:.2f}s ({new / elapsed:.0f} tokens/s, kv cache {'on' if cfg.use_cache else 'off'})")


if __name__ == "__main__":
    exit_with_help("generate")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
