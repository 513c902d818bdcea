"""Memory of the parallel-text path on a generated file of N pairs (a user's own pairs at scale).

    OMP_NUM_THREADS=1 python benchmarks/parallel_memory.py --pairs 1000000 --dir /tmp/pairs1m

Phase `prepare` (cold cache: read, split, tokenizer, ids written chunk by chunk) and phase `train` (a fresh
process on the warm cache: setup, then 200 training batches), each in its own process; prints each phase's
peak RSS (ru_maxrss), its RSS at the end, and the sizes of the token-id memmaps and the text on disk.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

WORDS = ["haus", "baum", "katze", "hund", "wasser", "feuer", "stadt", "land", "fluss", "berg", "weg", "zeit", "tag", "nacht", "licht", "straße", "schule", "arbeit", "freund", "familie", "kind", "buch", "tisch", "fenster", "tür", "garten", "himmel", "meer", "sonne", "mond", "stern", "wind", "regen"]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def phase(name: str, path: Path, cache: Path) -> None:
    from lab.data.parallel import ParallelTextDataModule

    t0 = time.perf_counter()
    dm = ParallelTextDataModule(str(path), cache_dir=str(cache), vocab_size=8000, batch_size=64)
    if name == "prepare":
        dm.prepare_data()
    else:
        dm.setup("fit")
        for i, _ in enumerate(dm.train_dataloader()):
            if i == 200:
                break
    out = {"phase": name, "seconds": round(time.perf_counter() - t0, 1), "rss_end_mb": round(rss_mb(), 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if name == "train":
        train = dm.datasets["train"]
        out |= {"train_pairs": len(train), "ids_mb": round((train.source.nbytes + train.target.nbytes) / 2**20, 1),
                "offsets_mb": round((train.source_offsets.nbytes + train.target_offsets.nbytes) / 2**20, 1),
                "train_text_on_disk_mb": round(train.texts_path.stat().st_size / 2**20, 1)}
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=1_000_000)
    p.add_argument("--dir", type=Path, default=Path("/tmp/pairs1m"))
    p.add_argument("--phase", choices=["prepare", "train"])
    args = p.parse_args()
    path, cache = args.dir / "pairs.tsv", args.dir / "cache"
    if args.phase:
        return phase(args.phase, path, cache)
    args.dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        rng = random.Random(0)
        with open(path, "w", encoding="utf-8") as f:
            for i in range(args.pairs):
                words = rng.choices(WORDS, k=rng.randint(3, 14))
                f.write(f"{' '.join(words)} {i}.\tthe {' '.join(w[::-1] for w in words)} {i}.\n")
    print(f"{path}: {args.pairs:,} pairs, {path.stat().st_size / 2**20:.0f} MiB", flush=True)
    for name in ("prepare", "train"):
        subprocess.run([sys.executable, __file__, "--phase", name, "--dir", str(args.dir)], check=True)


if __name__ == "__main__":
    main()
