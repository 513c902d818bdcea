"""Step time and loss of the GPT under each CPU strategy at the same global batch and seed.

    python benchmarks/scale_out.py [--steps 60] [--threads N] [--only "1 process" "ddp_cpu (2 processes)" ...]

Runs `python -m lab.train +experiment=gpt_nano_char` (4 layers x 128, context 64, global batch 12) on a
4-play slice of Shakespeare as: one process; one process with accumulate_grad_batches=2 (same maths as
DDP's 2 x 6 split, different float summation order); trainer=ddp_cpu and trainer=fsdp_cpu (2 processes x 6);
and, as the size of a real mistake, one process at global batch 6. Prints ms per optimizer step (from the
throughput callback: global tokens per step / global tokens per second, median over windows of 10 steps)
and each run's validation loss difference to the single process. --threads sets OMP_NUM_THREADS for every
process (Lightning gives each DDP/FSDP process cores/processes threads; a lone process takes all cores,
which on a loaded machine makes its intra-op threads wait on each other).
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "1 process": [],
    "1 process, accumulate 2": ["trainer.accumulate_grad_batches=2"],
    "ddp_cpu (2 processes)": ["trainer=ddp_cpu"],
    "fsdp_cpu (2 processes)": ["trainer=fsdp_cpu"],
    "1 process, batch 6 (a mistake)": ["data.batch_size=6"],
}


def run(extra: list[str], steps: int, threads: int | None) -> tuple[float, dict[int, float]]:
    runs = Path(tempfile.mkdtemp(prefix="scale-out-"))
    args = ["+experiment=gpt_nano_char", "data.corpus.max_works=4", "data.corpus.val_works=[tempest]",
            "data.eval_batches=4", f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps // 2}",
            "logger.wandb.mode=disabled", "test=false", "callbacks.progress=null", "task.samples.max_new_tokens=1",
            "callbacks.throughput.every_n_batches=10", *extra]
    env = {**os.environ, "LAB_RUNS_DIR": str(runs), **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    subprocess.run([sys.executable, "-m", "lab.train", *args], cwd=ROOT, env=env, check=True, capture_output=True)
    (metrics,) = list(runs.rglob("metrics.csv"))
    rows = list(csv.DictReader(metrics.read_text().splitlines()))
    tps = [float(r["perf/tokens_per_s_global"]) for r in rows if r.get("perf/tokens_per_s_global")]
    batch = 6 if "data.batch_size=6" in extra else 12
    ms_per_step = 1000 * batch * 64 / statistics.median(tps[1:] or tps)  # first window includes warm-up
    val = {int(r["step"]): float(r["val/loss"]) for r in rows if r.get("val/loss")}
    return ms_per_step, val


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", nargs="*", default=None, help="run only these rows (names as printed)")
    args = ap.parse_args()
    names = args.only or list(CONFIGS)
    results = {name: run(CONFIGS[name], args.steps, args.threads) for name in dict.fromkeys(["1 process", *names])}
    base_ms, base_val = results["1 process"]
    last = max(base_val)
    threads = f"OMP_NUM_THREADS={args.threads}" if args.threads else "default threads"
    print(f"\ngpt_nano_char, global batch 12 x 64 tokens, {args.steps} steps, {os.cpu_count()} CPU cores, {threads}")
    print(f"{'run':32} {'ms/step':>8} {'vs 1 proc':>10} " + " ".join(f"{'val@' + str(s):>10}" for s in sorted(base_val))
          + f" {'|dval| @' + str(last):>12} {'rel':>9}")
    for name, (ms, val) in results.items():
        diff = abs(val[last] - base_val[last])
        print(f"{name:32} {ms:8.1f} {100 * (ms / base_ms - 1):+9.0f}% " + " ".join(f"{val[s]:10.5f}" for s in sorted(val))
              + f" {diff:12.2e} {diff / base_val[last]:9.1e}")


if __name__ == "__main__":
    main()
