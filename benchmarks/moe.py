"""Mixture-of-experts speed, side by side in one process (CPU unless --device says otherwise).

    python benchmarks/moe.py --threads 2 [--reps 3] [--rounds 3] [--steps 20] [--clock wall|cpu] [--compile] [--no-seeds]
        [--skip-layers] [--skip-model] [--glibc-defaults] [--experts-over-threads]
    python benchmarks/moe.py --device cuda [--batch-scale 8] [--compile]      # bf16 autocast, CUDA-synchronised timings, MFU

1. One feed-forward layer, forward + backward at B=12, T=256, D=384 (gelu), for three expert layouts at equal
   active parameters: E=8 top-2 width 768, E=64 top-8 width 192, E=128 top-8 width 96 (fine-grained). Per layout:
   - dense FFN of hidden top_k x width (the same active parameters per token): the 1.00x line
   - lab MoE as configured by default (dispatch=auto: eager on a CPU, the per-expert loop up to 8 experts,
     grouped_mm above), capacity 1.25 and dropless; then dropless with each dispatch forced (grouped_mm, loop)
   - lab MoE, expert choice (capacity 1.0)
   - a floor: the two grouped matmuls and the activation alone on pre-sorted equal groups (no routing, gather,
     biases, gate or combine): what any grouped dispatch costs at least with these kernels
   - the seeds' MixtureOfExperts (/work/shared/seeds, "LLM CodeBase" MoE section): per-expert masked loop,
     with its undefined `self.expert_capacity` fixed to the capacity it computes
   With --compile, also torch.compile (inductor) of the dense FFN and of lab MoE capacity 1.25.
   Targets (issue 14): lab MoE <= 1.10x dense at E=8, <= 1.25x at E=64 and E=128, eager.
2. Whole model: training tokens/s (forward, backward, AdamW step) of conf/experiment/gpt_small_moe vs its
   dense twin in the same (Mixtral) layout, `model.moe=null model.d_ff=1024` (a token's 2 x 512 expert hidden
   units: equal active parameters), vocabulary 4096 as their data gives.

On a GPU (--device cuda) everything runs under bf16 autocast (what trainer=gpu does), timings synchronise the
device, --batch-scale multiplies B and the models' batch size (the CPU shapes are too small to fill a GPU), and the whole-model table adds
MFU: lab.runtime.callbacks.throughput.flops_per_token (6 x active params in matrix products + 12 x layers x d_model x T) x tokens/s / dense bf16 peak.

Each round times every contender once (alternating, so machine load hits all alike); reported: each contender's
best round, and the median over rounds of its time / the dense layer's time in the same round. Times are wall
clock: on a shared machine they are inflated, the ratios less so. The process keeps freed memory for reuse as
lab.train does (lab.runtime.trainer.memory; --glibc-defaults: not).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lab.nn import TransformerConfig
from lab.nn.ffn import make_ffn
from lab.nn.moe import compute_dtype, grouped_linear, make_moe
from lab.nn.params import count_parameters
from lab.runtime.callbacks.throughput import flops_per_token, peak_flops
from lab.runtime.trainer.memory import keep_freed_memory

B, T, D = 12, 256, 384
CPU = torch.device("cpu")
LAYOUTS = [(8, 2, 768), (64, 8, 192), (128, 8, 96)]  # (experts, top_k, expert width)


class SeedMixtureOfExperts(nn.Module):
    """The seeds' MoE, verbatim in its algorithm (masks per expert, per-k loop, random capacity drop); the
    one fix: `self.expert_capacity` was never set, so the locally computed capacity is used."""

    def __init__(self, hidden_dim, num_experts, expert_dim, k=2, capacity_factor=1.0):
        super().__init__()
        self.hidden_dim, self.num_experts, self.expert_dim, self.k = hidden_dim, num_experts, expert_dim, k
        self.router = nn.Linear(hidden_dim, num_experts)
        self.experts = nn.ModuleList([
            nn.Sequential(nn.Linear(hidden_dim, expert_dim), nn.GELU(), nn.Linear(expert_dim, hidden_dim))
            for _ in range(num_experts)
        ])
        self.capacity_factor = capacity_factor

    def forward(self, x):
        batch_size, seq_length, hidden_dim = x.shape
        total_tokens = batch_size * seq_length
        expert_capacity = int(self.capacity_factor * (total_tokens * self.k) / self.num_experts)  # the fix
        x_reshaped = x.reshape(-1, hidden_dim)
        router_probs = F.softmax(self.router(x_reshaped), dim=-1)
        router_probs_topk, router_indices_topk = torch.topk(router_probs, k=self.k, dim=-1)
        router_probs_topk = router_probs_topk / router_probs_topk.sum(dim=-1, keepdim=True)
        expert_outputs = []
        for expert_idx, expert in enumerate(self.experts):
            expert_selector = torch.zeros(total_tokens, self.k, device=x.device)
            for k_idx in range(self.k):
                expert_selector[:, k_idx] = (router_indices_topk[:, k_idx] == expert_idx).float()
            token_is_routed = (expert_selector.sum(dim=-1) > 0).float()
            indices = token_is_routed.nonzero().squeeze(-1)
            if indices.shape[0] > 0:
                if indices.shape[0] > expert_capacity:
                    indices = indices[torch.randperm(indices.shape[0], device=x.device)[:expert_capacity]]
                expanded = torch.zeros(total_tokens, hidden_dim, device=x.device)
                expanded[indices] = expert(x_reshaped[indices])
                weight = (expert_selector * router_probs_topk).sum(dim=-1)
                expert_outputs.append(expanded * weight.unsqueeze(-1))
            else:
                expert_outputs.append(torch.zeros(total_tokens, hidden_dim, device=x.device))
        return sum(expert_outputs).reshape(batch_size, seq_length, hidden_dim)


class GroupedMatmulsAlone(nn.Module):
    """A floor for any grouped dispatch: the experts' two grouped matmuls and their activation (the dense FFN's
    work at equal active parameters) on the layer's B*T*top_k rows, already sorted into equal groups, with no
    routing, gather, biases, gate or combine (the k copies are summed, one read)."""

    def __init__(self, E: int, k: int, H: int, tokens: int):
        super().__init__()
        self.k = k
        self.w_in = nn.Parameter(torch.randn(E, H, D) * 0.02)
        self.w_out = nn.Parameter(torch.randn(E, D, H) * 0.02)
        self.register_buffer("rows", torch.randn(tokens * k, D))
        self.register_buffer("ends", (torch.arange(1, E + 1) * (tokens * k // E)).to(torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = compute_dtype(x)[0]  # under autocast (GPU) the experts' dtype, as lab's Experts casts
        rows = self.rows.to(dtype).detach().requires_grad_()  # a fresh leaf: its gradient computed, never accumulated
        h = F.gelu(grouped_linear(rows, self.w_in.to(dtype), self.ends), approximate="tanh")
        return grouped_linear(h, self.w_out.to(dtype), self.ends).view(self.k, *x.shape).sum(0)


def layer_contenders(E: int, K: int, H: int, compile_: bool, seeds: bool, tokens: int = B * T) -> dict[str, nn.Module]:
    def lab_moe(capacity, **moe):
        cfg = TransformerConfig(d_model=D, n_heads=6, n_layers=1, moe=dict(
            num_experts=E, top_k=K, expert_hidden=H, capacity_factor=capacity, **moe))
        return make_moe(cfg, causal=moe.get("router") != "expert_choice").train()

    layers = {
        f"dense FFN hidden {K * H}": make_ffn("gelu", D, K * H),
        "lab MoE cap 1.25 (auto)": lab_moe(1.25),
        "lab MoE dropless (auto)": lab_moe(None),
        "lab MoE dropless, grouped_mm": lab_moe(None, dispatch="grouped_mm"),
        "lab MoE dropless, per-expert loop": lab_moe(None, dispatch="loop"),
        "lab MoE expert choice cap 1.0": lab_moe(1.0, router="expert_choice"),
        "floor: grouped matmuls alone": GroupedMatmulsAlone(E, K, H, tokens),
    }
    if seeds:
        layers["seeds' MoE loop cap 1.25"] = SeedMixtureOfExperts(D, E, H, K, 1.25)
    if compile_:
        layers["dense FFN, compiled"] = torch.compile(make_ffn("gelu", D, K * H))
        layers["lab MoE cap 1.25, compiled"] = torch.compile(lab_moe(1.25), fullgraph=True)  # grouped_mm
    return layers


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device):
    """bf16 autocast on a GPU (trainer=gpu's precision: bf16-mixed), nothing on the CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


def time_layer(layer: nn.Module, x: torch.Tensor, reps: int, clock=time.perf_counter) -> float:
    """Seconds per forward+backward (mean over reps, after two warm-ups: compile and autotuning happen there)."""
    grad = torch.randn_like(x)
    for i in range(reps + 2):
        if i == 2:
            sync(x.device)
            start = clock()
        x.grad = None
        layer.zero_grad(set_to_none=True)  # as a training step: gradients assigned, not accumulated
        with autocast(x.device):
            y = layer(x)
        y.backward(grad.to(y.dtype))
    sync(x.device)
    return (clock() - start) / reps


def train_step_tokens_per_s(model: nn.Module, vocab: int, batch: int, seq: int, steps: int,
                            clock=time.perf_counter, device=CPU, step=None) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq + 1), device=device)
    step = model if step is None else step
    for i in range(steps + 2):
        if i == 2:
            sync(device)
            start = clock()
        with autocast(device):
            logits = step(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        aux = sum(v for m in model.modules() for v in (getattr(m, "aux_losses", None) or {}).values())
        (loss + aux).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    return steps * batch * seq / (clock() - start)


def experiment_model(name: str, vocab: int, overrides: tuple[str, ...] = ()):
    from hydra import compose, initialize_config_dir

    import lab.runtime.cli.schemas  # noqa: F401 - the structured configs conf/ names
    from lab.models import build_model

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=[f"+experiment={name}", *overrides])
    torch.manual_seed(0)
    return build_model(cfg.model, {"vocab_size": vocab}), cfg.data.batch_size, cfg.model.max_seq_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-layers", action="store_true")
    parser.add_argument("--compile", action="store_true", help="add torch.compile'd dense and MoE layers")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--no-seeds", action="store_true", help="leave out the seeds' (slow) per-expert loop")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (bf16 autocast)")
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc thresholds (lab.train raises them: lab.runtime.trainer.memory)")
    parser.add_argument("--experts-over-threads", action="store_true",
                        help="CPU: the experts' GEMMs side by side on one thread each (benchmarks/moe_cpu_expert_threads.py)")
    parser.add_argument("--batch-scale", type=int, default=1, help="multiply B of the layers and the models' batch (GPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.glibc_defaults:
        print(keep_freed_memory() or "cpu memory: glibc defaults (not glibc, or the user's allocator settings)")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}, bf16 autocast")
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    if args.experts_over_threads:
        from moe_cpu_expert_threads import patch_grouped_mm  # beside this script: an experiment, not lab's code

        patch_grouped_mm()
        print("torch._grouped_mm on CPU replaced by the experts over threads (C++, at::parallel_for)")

    # wall: what a run sees; cpu: this process's CPU seconds, which other jobs on a loaded machine inflate far
    # less (use it with --threads 1: with more threads it also counts the threads' spinning)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for E, K, H in [] if args.skip_layers else LAYOUTS:
        torch.manual_seed(0)
        layers = {name: layer.to(device) for name, layer in layer_contenders(E, K, H, args.compile, not args.no_seeds, B * args.batch_scale * T).items()}
        x = torch.randn(B * args.batch_scale, T, D, device=device, requires_grad=True)
        times = {name: [] for name in layers}
        for _ in range(args.rounds):
            for name, layer in layers.items():
                times[name].append(time_layer(layer, x, args.reps, clock))
        dense = next(iter(layers))
        print(f"\nE={E} top-{K} width {H}: one FFN layer, forward+backward, B={B * args.batch_scale} T={T} D={D} "
              f"({args.rounds} rounds x {args.reps} reps, {args.clock} clock)")
        print(f"{'layer':<40} {'best ms':>8} {'x dense':>8} {'median of rounds':>17}")
        for name, seconds in times.items():
            # median of the per-round ratios: a slow spell of a shared machine hits a round's contenders alike
            ratios = sorted(t / d for t, d in zip(seconds, times[dense]))
            print(f"{name:<40} {min(seconds) * 1e3:>8.1f} {min(seconds) / min(times[dense]):>8.2f} "
                  f"{ratios[len(ratios) // 2]:>17.2f}")

    if args.skip_model:
        return
    vocab = 4096
    models = {}
    dense = "gpt_small_moe, dense twin"
    for name, experiment, overrides in ((dense, "gpt_small_moe", ("model.moe=null", "model.d_ff=1024")),
                                        ("gpt_small_moe", "gpt_small_moe", ())):
        model, batch, seq = experiment_model(experiment, vocab, overrides)
        model = model.to(device)
        batch *= args.batch_scale
        models[name] = (model, model, batch, seq)
        if args.compile:
            models[f"{name}, compiled"] = (model, torch.compile(model, fullgraph=True), batch, seq)
    rates = dict.fromkeys(models, 0.0)
    for _ in range(args.rounds):
        for name, (model, step, batch, seq) in models.items():
            rate = train_step_tokens_per_s(model, vocab, batch, seq, args.steps, clock, device, step)
            rates[name] = max(rates[name], rate)
    peak = peak_flops(device)
    print(f"\nwhole model training step (fwd+bwd+AdamW), vocab {vocab}, batch x{args.batch_scale}, best of {args.rounds} rounds x {args.steps} steps")
    print(f"{'experiment':<26} {'total params':>13} {'active':>11} {'tokens/s':>9} {'time x dense':>12} {'MFU':>6}")
    for name, (model, _, _, seq) in models.items():
        counts = count_parameters(model)
        slower = rates[dense] / rates[name]
        cfg = model.cfg
        mfu = f"{rates[name] * flops_per_token(cfg, counts, seq) / peak:.1%}" if peak else "-"
        print(f"{name:<26} {counts['total']:>13,} {counts['active']:>11,} {rates[name]:>9.0f} {slower:>12.2f} {mfu:>6}")


if __name__ == "__main__":
    main()
