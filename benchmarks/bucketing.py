"""Training throughput of the encoder classifier with and without length-bucketed batches.

    python benchmarks/bucketing.py [--batches 80] [--rounds 2] [--batch-size 32]

The real MR train split and the encoder_classifier experiment's model and data settings; one training step
= forward, backward, AdamW step. Each round times both modes, alternating, on the same number of batches
drawn by the datamodule's own sampler (plain random batches vs length buckets); the best round of each is
reported as sentences/s, with the share of padding tokens in the batches.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import lab.runtime.cli.schemas  # noqa: F401 - the structured configs conf/ names
from lab.models import build_model

CONF = Path(__file__).resolve().parents[1] / "conf"


def experiment(batch_size: int):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=["+experiment=encoder_classifier", f"data.batch_size={batch_size}"])


def run(cfg, bucketing: bool, n_batches: int) -> tuple[float, float]:
    """-> (sentences/s, padding share) over n_batches training steps after 5 warm-up steps."""
    dm = instantiate(cfg.data, bucketing=bucketing)
    dm.setup("fit")
    torch.manual_seed(0)
    model = build_model(cfg.model, dm.vocab).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    batches = iter(dm.train_dataloader())
    sentences = pad = tokens = 0
    for i in range(5 + n_batches):
        if i == 5:
            start = time.perf_counter()
        ids, labels = next(batches)
        loss = F.cross_entropy(model(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 5:
            sentences += len(labels)
            pad += int((ids == dm.vocab["pad_id"]).sum())
            tokens += ids.numel()
    return sentences / (time.perf_counter() - start), pad / tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=80)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    cfg = experiment(args.batch_size)
    best: dict[bool, tuple[float, float]] = {}
    for _ in range(args.rounds):
        for bucketing in (False, True):
            r = run(cfg, bucketing, args.batches)
            best[bucketing] = max(best.get(bucketing, (0.0, 0.0)), r)
    print(f"encoder_classifier on MR train, batch {args.batch_size}, {args.batches} steps, "
          f"best of {args.rounds} rounds, {torch.get_num_threads()} torch thread(s)")
    print(f"{'batching':<12}{'sentences/s':>14}{'padding':>10}")
    for bucketing in (False, True):
        sps, pad = best[bucketing]
        print(f"{'bucketed' if bucketing else 'random':<12}{sps:>14.1f}{pad:>10.1%}")
    print(f"speed-up: {best[True][0] / best[False][0]:.2f}x")


if __name__ == "__main__":
    main()
