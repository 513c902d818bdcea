"""Time to the baseline's loss: a baseline preset against its speedrun-recipe twin (same data, split, tokenizer,
batch and evaluation), trained back to back, seed by seed. Two pairs (--pair):
  nano  (default): gpt_nano_char (nanoGPT's CPU baseline, char level, 2000 steps) vs gpt_nano_char_fast
  small:           gpt_small (byte-level BPE, 4 x 256, context 128, 1200 steps) vs gpt_small_fast

    python benchmarks/time_to_loss.py [--pair nano|small] [--seeds 1 2 3] [--threads 2] [--eval-every N]
                                      [--fast-args k=v ...] [--baseline-args k=v ...]
                                      [--curves DIR]   # keep every run's curve as DIR/<preset>_seed<s>.jsonl
    python benchmarks/time_to_loss.py --curves DIR --report-only --seeds 1 2 3   # the report from kept curves
    python benchmarks/time_to_loss.py --pair small --only baseline --curves DIR &    # the two sides side by side,
    python benchmarks/time_to_loss.py --pair small --only fast --curves DIR          # one process each, then
                                                                                     # --report-only

Each run is `python -m lab.train +experiment=<preset> seed=<s>` with a TrainClock callback that sums the time
spent in training steps only (data, forward, backward, optimizer; validation and checkpoints excluded, so the
evaluation every --eval-every steps costs neither preset anything) and records, at every validation, the step,
the training seconds so far and val/loss. The target is the baselines' mean final val/loss; for each fast run
the step where its curve first reaches it (linear interpolation between validations) gives the steps, tokens
and training seconds to the target. Prints one row per run, then mean and spread, and the time ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L

ROOT = Path(__file__).resolve().parents[1]
# --pair -> (baseline preset, fast preset, tokens per step of both: batch x context, default --eval-every)
PAIRS = {"nano": ("gpt_nano_char", "gpt_nano_char_fast", 12 * 64, 50),
         "small": ("gpt_small", "gpt_small_fast", 16 * 128, 100)}


class TrainClock(L.Callback):
    """Training-step seconds so far (wall, and this process's CPU seconds: on a shared machine the CPU time
    moves less with the other processes' load) and val/loss at every validation, one JSON line each."""

    def __init__(self, out: str):
        self.out, self.seconds, self.cpu_seconds, self.t0 = Path(out), 0.0, 0.0, (0.0, 0.0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.t0 = (time.perf_counter(), time.process_time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seconds += time.perf_counter() - self.t0[0]
        self.cpu_seconds += time.process_time() - self.t0[1]

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        row = {"step": trainer.global_step, "seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "loss": float(trainer.callback_metrics["val/loss"])}
        with self.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


def train(preset: str, seed: int, eval_every: int, threads: int, extra: list[str]) -> list[dict]:
    """-> [{step, seconds, loss}] at every validation of one run."""
    work = Path(tempfile.mkdtemp(prefix="time-to-loss-"))
    out = work / "clock.jsonl"
    args = [f"+experiment={preset}", f"seed={seed}", f"trainer.val_check_interval={eval_every}",
            "logger.wandb.mode=disabled", "test=false", "callbacks.progress=null", "task.samples=null",
            "callbacks.checkpoint.every_minutes=null", "+callbacks.clock._target_=benchmarks.time_to_loss.TrainClock",
            f"+callbacks.clock.out={out}", *extra]
    env = {**os.environ, "LAB_RUNS_DIR": str(work / "runs"), "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "lab.train", *args], cwd=ROOT, env=env, check=True, capture_output=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def reach(curve: list[dict], target: float) -> dict | None:
    """{step, seconds, cpu_seconds} where the validation curve first reaches `target`, interpolated linearly
    between the validation before and the one at or below it; None if it never does."""
    prev = {"step": 0, "seconds": 0.0, "cpu_seconds": 0.0, "loss": float("inf")}
    for row in curve:
        if row["loss"] <= target:
            w = 1.0 if prev["loss"] == float("inf") else (prev["loss"] - target) / (prev["loss"] - row["loss"])
            return {k: prev[k] + w * (row[k] - prev[k]) for k in ("step", "seconds", "cpu_seconds")}
        prev = row
    return None


def spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    return f"{mean:.4g} (min {min(values):.4g}, max {max(values):.4g})" if len(values) > 1 else f"{mean:.4g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", choices=sorted(PAIRS), default="nano", help="which baseline and fast preset")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=None,
                    help="validation interval of both presets (steps; default: 50 for nano, 100 for small)")
    ap.add_argument("--fast", default=None, help="the preset measured against the baseline (default: the pair's)")
    ap.add_argument("--fast-args", nargs="*", default=[], help="overrides for the fast preset (tuning)")
    ap.add_argument("--curves", type=Path, default=None, help="directory for each run's curve (JSON lines)")
    ap.add_argument("--report-only", action="store_true", help="train nothing: report the curves kept in --curves")
    ap.add_argument("--baseline-args", nargs="*", default=[], help="overrides for the baseline (e.g. a shorter run)")
    ap.add_argument("--only", choices=["baseline", "fast"], default=None,
                    help="train one side of the pair, its curves into --curves (the other side in a second process "
                         "at the same time: on a shared machine the same load hits both); report with --report-only")
    args = ap.parse_args()
    if args.only and (args.curves is None or args.report_only):
        ap.error("--only needs --curves DIR (where --report-only then finds both sides) and no --report-only")
    baseline, default_fast, tokens_per_step, default_eval = PAIRS[args.pair]
    args.fast = args.fast or default_fast
    args.eval_every = args.eval_every or default_eval
    base, fast = {}, {}

    def curve(preset: str, seed: int, extra: list[str]) -> list[dict]:
        kept = args.curves / f"{preset}_seed{seed}.jsonl" if args.curves else None
        if args.report_only:
            return [json.loads(line) for line in kept.read_text().splitlines()]
        rows = train(preset, seed, args.eval_every, args.threads, extra)
        if kept:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return rows

    if args.only:
        preset, extra = (baseline, args.baseline_args) if args.only == "baseline" else (args.fast, args.fast_args)
        for seed in args.seeds:
            end = curve(preset, seed, extra)[-1]
            print(f"{preset} seed {seed}: val/loss {end['loss']:.4f} at step {end['step']}, {end['seconds']:.1f} "
                  f"training wall s, {end['cpu_seconds']:.1f} CPU s", flush=True)
        return
    for seed in args.seeds:  # back to back, seed by seed: slow drifts in the machine's load hit both alike
        base[seed] = curve(baseline, seed, args.baseline_args)
        fast[seed] = curve(args.fast, seed, args.fast_args)
        print(f"seed {seed}: baseline {base[seed][-1]['step']} steps, val/loss {base[seed][-1]['loss']:.4f}, "
              f"{base[seed][-1]['seconds']:.1f} s | {args.fast}: val/loss {fast[seed][-1]['loss']:.4f} at step "
              f"{fast[seed][-1]['step']}, {fast[seed][-1]['seconds']:.1f} s", flush=True)
    target = statistics.mean(c[-1]["loss"] for c in base.values())
    base_end = {seed: c[-1] for seed, c in base.items()}
    steps = base[args.seeds[0]][-1]["step"]
    print(f"\ntarget: the baseline's final val/loss, mean over {len(base)} seeds: {target:.4f} "
          "(seeds: " + ", ".join(f"{e['loss']:.4f}" for e in base_end.values()) + ")")
    print(f"{baseline}: {steps} steps, {steps * tokens_per_step:,} tokens; training wall s "
          f"{spread([e['seconds'] for e in base_end.values()])}; CPU s {spread([e['cpu_seconds'] for e in base_end.values()])}")
    hits = {seed: reach(curve, target) for seed, curve in fast.items()}
    for seed, hit in hits.items():
        end = fast[seed][-1]
        per_step = f"{1000 * end['seconds'] / end['step']:.1f} ms/step wall vs the baseline's " \
                   f"{1000 * base_end[seed]['seconds'] / steps:.1f}"
        print(f"{args.fast} seed {seed}: " + (f"reached {target:.4f} at step {hit['step']:.0f} "
              f"({hit['step'] * tokens_per_step:,.0f} tokens), {hit['seconds']:.1f} training wall s, "
              f"{hit['cpu_seconds']:.1f} CPU s; {per_step}" if hit else
              f"never reached {target:.4f} (final {end['loss']:.4f}); {per_step}"))
    reached = {seed: h for seed, h in hits.items() if h}
    if len(reached) < len(hits):
        print(f"{len(hits) - len(reached)} of {len(hits)} fast runs never reached the target")
    if reached:
        print(f"{args.fast} to the target: steps {spread([h['step'] for h in reached.values()])} "
              f"(x{statistics.mean(h['step'] for h in reached.values()) / steps:.3f} the baseline's)")
        for key, what in (("seconds", "training wall time"), ("cpu_seconds", "training CPU time")):
            ratios = [h[key] / base_end[seed][key] for seed, h in reached.items()]  # seed by seed: same load window
            print(f"{what} ratio {args.fast} / baseline: seed by seed {spread(ratios)}; of the means "
                  f"{statistics.mean(h[key] for h in reached.values()) / statistics.mean(e[key] for e in base_end.values()):.3f}")


if __name__ == "__main__":
    main()
