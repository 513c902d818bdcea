"""Generation speed: KV-cached decoding vs recomputing the whole context every step.

    python benchmarks/generation.py [--preset nano|small] [--new 200] [--repeats 5]

Random weights (speed does not depend on them) at the gpt_nano_char / gpt_small shapes, batch 1,
a 4-token prompt, greedy, 2 threads. Prints one table; both modes run side by side in this process.
"""
from __future__ import annotations

import argparse
import time

import torch

from lab.models.decoding import generate
from lab.models.gpt import GPT

PRESETS = {
    "nano": dict(vocab_size=96, d_model=128, n_layers=4, n_heads=4, max_seq_len=64),
    "small": dict(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=128),
}


def tokens_per_s(model, n_new: int, use_cache: bool, repeats: int) -> float:
    prompt = torch.randint(0, model.vocab_size, (1, 4))
    generate(model, prompt, 20, temperature=0, use_cache=use_cache)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        generate(model, prompt, n_new, temperature=0, use_cache=use_cache)
        best = min(best, time.perf_counter() - t0)
    return n_new / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", nargs="+", default=["nano", "small"])
    ap.add_argument("--new", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch 1, {args.new} new tokens, best of {args.repeats}")
    print(f"{'preset':8} {'context':>7} {'cached tok/s':>13} {'recompute tok/s':>16} {'speed-up':>9}")
    for name in args.presets:
        model = GPT(**PRESETS[name]).eval()
        cached = tokens_per_s(model, args.new, True, args.repeats)
        full = tokens_per_s(model, args.new, False, args.repeats)
        print(f"{name:8} {model.max_seq_len:7d} {cached:13.0f} {full:16.0f} {cached / full:8.2f}x")


if __name__ == "__main__":
    main()
