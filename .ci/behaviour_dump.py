"""Dump what a refactor must not change: every preset's resolved config and a seeded short run per task.

    python .ci/behaviour_dump.py configs OUT.json       # every conf/experiment preset x (no debug, each debug preset)
    python .ci/behaviour_dump.py runs OUT.json [NAME ...]   # a seeded 20-step run per task (or the named ones of RUNS)
    python .ci/behaviour_dump.py diff BEFORE.json AFTER.json

Run it before a change that should keep behaviour, and after; `diff` lists every key whose value differs.
The runs' logits are summarised (sum, sum of squares, a few entries) at full float precision.
"""
from __future__ import annotations

import csv
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import lab.train  # noqa: F401 - registers what the entry point registers (resolvers, structured configs)
from lab.checkpoints.reading import load_model

ROOT = Path(__file__).resolve().parent.parent
RUNS = {  # one seeded run per task (and the MoE and fast-recipe paths)
    "lm": ["+experiment=gpt_nano_char"],
    "lm_fast": ["+experiment=gpt_nano_char_fast"],
    "lm_moe": ["+experiment=gpt_small_moe", "model.d_model=64", "model.n_layers=2"],
    "classifier": ["+experiment=encoder_classifier"],
    "classifier_moe": ["+experiment=encoder_classifier_moe"],
    "mlm": ["+experiment=encoder_mlm"],
    "translator": ["+experiment=translator_small", "model.d_model=64", "model.n_layers=2"],
    "translator_moe": ["+experiment=translator_small_moe", "model.d_model=64", "model.n_layers=2"],
}


def configs() -> dict:
    presets = sorted(p.stem for p in (ROOT / "conf/experiment").glob("*.yaml"))
    debugs = [None] + sorted(p.stem for p in (ROOT / "conf/debug").glob("*.yaml"))
    out = {}
    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        for preset in presets:
            for debug in debugs:
                overrides = [f"+experiment={preset}"] + ([f"+debug={debug}"] if debug else [])
                cfg = compose("train", overrides=overrides)
                cfg.paths.runs_dir = "RUNS"
                out[" ".join(overrides)] = OmegaConf.to_container(cfg, resolve=False)
    return out


def _logits_summary(ckpt: Path) -> dict:
    model, _, meta = load_model(ckpt)
    torch.manual_seed(0)
    ids = torch.randint(4, min(int(meta["vocab"]["vocab_size"]), 60), (2, 12))
    two_inputs = "tgt" in inspect.signature(model.forward).parameters  # the translator: source and target
    with torch.no_grad():
        out = model(ids, ids) if two_inputs else model(ids)
    out = out.double()
    return {"sum": out.sum().item(), "sumsq": (out * out).sum().item(), "first": out.flatten()[:4].tolist()}


def runs(names: list[str]) -> dict:
    out = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    for name, overrides in RUNS.items():
        if names and name not in names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "lab.train", *overrides, "+debug=default", "seed=7", "test=false",
                   "trainer.max_steps=20", f"hydra.run.dir={tmp}/run"]
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if done.returncode:
                out[name] = {"error": done.stderr[-2000:]}
                continue
            rows = list(csv.DictReader(next(Path(tmp, "run").rglob("metrics.csv")).read_text().splitlines()))
            losses = {f"{r['step']}:{k}": r[k] for r in rows for k in ("train/loss", "val/loss") if r.get(k)}
            out[name] = {"losses": losses, "logits": _logits_summary(Path(tmp, "run/checkpoints/last.ckpt"))}
        print(name, "done", file=sys.stderr)
    return out


def diff(before: dict, after: dict, where: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for k in sorted(set(before) | set(after), key=str)
                for d in diff(before.get(k, "<absent>"), after.get(k, "<absent>"), f"{where}/{k}")]
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "diff":
        lines = diff(*(json.loads(Path(p).read_text()) for p in sys.argv[2:4]))
        print("\n".join(lines) or "no differences")
        sys.exit(1 if lines else 0)
    Path(sys.argv[2]).write_text(json.dumps(configs() if what == "configs" else runs(sys.argv[3:]), indent=1, sort_keys=True))
