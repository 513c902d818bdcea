"""Training-step speed of an experiment's model in a plain PyTorch loop (no Lightning): the reference that
lab.train's logged perf/tokens_per_s and perf/mfu are compared with, and where the step's time goes.

    python benchmarks/train_step.py +experiment=gpt2_small_fast_gpu [overrides] [--variants base,loss_compiled,adamw]
        [--steps 30] [--profile]

The model, the optimizer (with lab's parameter groups: lab.tasks.base.Task.configure_optimizers) and the
schedule are the experiment's own; batches are random ids of the experiment's batch x max_seq_len; CPU memory is
kept for reuse as lab.train keeps it (lab.runtime.trainer.memory). On a GPU the
step runs under bf16 autocast (trainer=gpu's bf16-mixed). A step = forward, cross-entropy (+ MoE routing losses), backward, gradient
clipping at 1.0 (trainer.gradient_clip_val), optimizer and schedule step. Variants, each timed in turn:
  base            what lab.train does: with compile=true the model and the loss compiled as one function
                  (lab.tasks.language_model.LanguageModelTask.compile_for_training), else eager
  loss_compiled   the model and the loss (logits upcast, cross-entropy) compiled as one function
  model_compiled  the model compiled, the loss outside it
  adamw           as model_compiled, with AdamW (fused on a GPU) on every parameter instead of the experiment's
                  optimizer
MFU = tokens/s x lab.runtime.callbacks.throughput.flops_per_token / the device's dense bf16 peak. --profile
prints the top kernels of three steps of the last variant (torch.profiler).
"""
from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def build(cfg, variant: str, device: torch.device):
    from hydra.utils import instantiate

    from lab.models import build_model

    torch.manual_seed(0)
    model = build_model(cfg.model, {"vocab_size": cfg.data.vocab_size}).to(device)
    task = instantiate(cfg.task, model=model)
    if variant == "adamw":
        task.optimizer_factory = lambda groups: torch.optim.AdamW(groups, lr=1e-3, fused=device.type == "cuda")
    configured = task.configure_optimizers()
    optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
    scheduler = configured["lr_scheduler"]["scheduler"] if isinstance(configured, dict) else None

    def loss_fn(x, y):  # as lab.tasks.language_model.LanguageModelTask: cross-entropy + MoE routing losses
        logits, aux = model(x, return_aux=True)
        return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()) + aux.loss()

    if variant == "loss_compiled" or (variant == "base" and cfg.get("compile")):
        loss_fn = torch.compile(loss_fn)
    elif variant in ("model_compiled", "adamw"):
        model.compile()
    return model, optimizer, scheduler, loss_fn


def run(cfg, variant: str, device: torch.device, steps: int, profile: bool) -> float:
    from lab.nn.params import count_parameters
    from lab.runtime.callbacks.throughput import flops_per_token, peak_flops

    model, optimizer, scheduler, loss_fn = build(cfg, variant, device)
    B, T = cfg.data.batch_size, cfg.model.max_seq_len
    ids = torch.randint(0, cfg.data.vocab_size, (B, T + 1), device=device)
    autocast = torch.autocast("cuda", torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        with autocast:
            loss = loss_fn(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(3):  # compilation and the allocator's warm-up
        step()
    sync()
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    rate = steps * B * T / (time.perf_counter() - t0)
    peak = peak_flops(device)
    mfu = f"{rate * flops_per_token(model.cfg, count_parameters(model), T) / peak:.1%}" if peak else "-"
    print(f"{variant:<14} {rate:>12,.0f} tokens/s  MFU {mfu:>6}  (3 warm-up steps {warm:.1f}s)", flush=True)
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            for _ in range(3):
                step()
            sync()
        key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60), flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +experiment=gpt2_small_fast_gpu")
    parser.add_argument("--variants", default="base,model_compiled,adamw")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    cfg = compose(args.overrides)
    from lab.runtime.trainer.memory import keep_freed_memory

    # as lab.train does: without it every step's large tensors page-fault anew, and the more of them a model
    # makes (the fast preset's), the slower it looks against what lab.train runs
    print(keep_freed_memory() or "cpu memory: glibc defaults (not glibc, or the user's allocator settings)", flush=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}; "
          f"{' '.join(args.overrides)}; batch {cfg.data.batch_size} x {cfg.model.max_seq_len}", flush=True)
    variants = args.variants.split(",")
    for i, variant in enumerate(variants):
        run(cfg, variant, device, args.steps, args.profile and i == len(variants) - 1)


if __name__ == "__main__":
    main()
