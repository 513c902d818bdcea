"""Batched translation speed on CPU: sentences/s of greedy and beam search (beam 1 / 5), KV cache on/off.

    python benchmarks/beam_search.py [--ckpt <translator run>/checkpoints/last.ckpt] [--sentences 200]

With --ckpt: the trained model on the first test sentences of its own data (hypotheses end when the model
says so, as in real use). Without: random weights at translator_small's shape on random 15-token sources;
random weights never emit eos early, so every sentence runs to its maximum length (a worst case).
All rows run side by side in this process; best of --repeats.
"""
from __future__ import annotations

import argparse
import time

import torch

from lab.models.decoding import beam_search, greedy_translate
from lab.models.seq2seq import EncoderDecoder


def sources(args) -> tuple[torch.nn.Module, list[torch.Tensor], str]:
    if args.ckpt:
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        from lab.checkpoints.reading import load_model

        model, _, meta = load_model(args.ckpt)
        dm = instantiate(OmegaConf.create(meta["config"]).data)
        dm.setup("test")
        loader = torch.utils.data.DataLoader(torch.utils.data.Subset(dm.datasets["test"], range(args.sentences)),
                                             batch_size=args.batch_size, collate_fn=dm.collate)
        return model, [b["source"] for b in loader], f"trained model {args.ckpt}, its test sentences"
    torch.manual_seed(0)
    model = EncoderDecoder(4000, 0, 1, 2, d_model=128, n_layers=2, n_heads=4, ffn="swiglu", positions="rotary").eval()
    batches = [torch.randint(3, 4000, (min(args.batch_size, args.sentences - i), 15)) for i in range(0, args.sentences, args.batch_size)]
    return model, batches, "random weights (translator_small shape), random 15-token sources"


def sentences_per_s(fn, batches: list[torch.Tensor], repeats: int) -> float:
    fn(batches[0][:2])  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for src in batches:
            fn(src)
        best = min(best, time.perf_counter() - t0)
    return sum(len(b) for b in batches) / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    model, batches, what = sources(args)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {what}, "
          f"{args.sentences} sentences in batches of {args.batch_size}, best of {args.repeats}")
    rows = [
        ("greedy", "on", lambda s: greedy_translate(model, s)),
        ("beam 1", "on", lambda s: beam_search(model, s, 1)),
        ("beam 5", "on", lambda s: beam_search(model, s, 5)),
        ("beam 5", "off", lambda s: beam_search(model, s, 5, use_cache=False)),
    ]
    print(f"{'decoder':8} {'kv cache':>8} {'sentences/s':>12}")
    for name, cache, fn in rows:
        print(f"{name:8} {cache:>8} {sentences_per_s(fn, batches, args.repeats):12.1f}")


if __name__ == "__main__":
    main()
