"""Is the MoE floor on a CPU torch's grouped matmul, or the matmuls? An experiment, not a lab code path.

    python benchmarks/moe_cpu_expert_threads.py [--threads 2] [--rounds 15]

The floor row of benchmarks/moe.py (the experts' two grouped matmuls alone) costs more than the dense layer at
64 experts on 2 threads (docs/moe.md). torch's CPU grouped matmul is a loop of small MKL GEMMs, each split over all threads.
This script times, for the experts' six GEMMs of one training step (both projections: forward, input gradient,
weight gradient) on equal pre-sorted groups, side by side in interleaved rounds:
  - dense: the three GEMMs of each projection of the dense FFN of equal active parameters (the 1.00x line)
  - torch._grouped_mm: what lab runs on a CPU
  - experts over threads: a C++ loop (at::parallel_for over the experts) where each expert's GEMM runs on one
    thread; compiled with torch.utils.cpp_extension.load_inline (needs a C++ compiler with OpenMP and ninja)
lab does not ship the last one (see docs/moe.md, "Tried and not kept").
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

import torch
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// a [R, K] x b [E, K, M] -> [R, M], row groups of a ending at ends;  a [K, R] x b [R, M] -> [E, K, M] (groups along R)
torch::Tensor grouped_mm_over_threads(torch::Tensor a, torch::Tensor b, torch::Tensor ends) {
  auto end = ends.to(torch::kLong).contiguous();
  const int64_t* ep = end.data_ptr<int64_t>();
  const int64_t E = end.size(0);
  const bool rows = b.dim() == 3;
  auto out = rows ? torch::empty({a.size(0), b.size(2)}, a.options()) : torch::empty({E, a.size(0), b.size(1)}, a.options());
  at::parallel_for(0, E, 1, [&](int64_t first, int64_t last) {  // inside the parallel region MKL runs on one thread
    for (int64_t e = first; e < last; ++e) {
      const int64_t lo = e == 0 ? 0 : ep[e - 1], n = ep[e] - lo;
      if (rows) {
        if (n) { auto o = out.narrow(0, lo, n); at::mm_out(o, a.narrow(0, lo, n), b[e]); }
      } else {
        auto o = out[e];
        if (n) at::mm_out(o, a.narrow(1, lo, n), b.narrow(0, lo, n)); else o.zero_();
      }
    }
  });
  return out;
}
"""

LAYOUTS = ((8, 2, 768), (64, 8, 192), (128, 8, 96))  # (experts, top_k, expert width), as benchmarks/moe.py
N, D = 12 * 256, 384


def step(mm, x, w_in, w_out, h, g_h, g_y):
    """The six GEMMs of one step: x [R, D] -> h [R, H] -> y [R, D]; weights in nn.Linear's [E, out, in] layout."""
    return (mm(x, w_in.transpose(1, 2)), mm(g_h, w_in), mm(g_h.t(), x),
            mm(h, w_out.transpose(1, 2)), mm(g_y, w_out), mm(g_y.t(), h))


def dense_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ (b[0] if b.dim() == 3 else b)  # the dense layer's weights as one "expert"


def torch_grouped_mm(a: torch.Tensor, b: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    return torch._grouped_mm(a, b, offs=ends)


def build():
    """The C++ contender, compiled once (torch's extension cache); exits with one line where it cannot be built."""
    try:
        return load_inline("lab_bench_grouped_mm_over_threads", cpp_sources=SOURCE,
                           functions=["grouped_mm_over_threads"], extra_cflags=["-O3", "-fopenmp"],
                           extra_ldflags=["-fopenmp"])
    except (RuntimeError, OSError) as e:
        sys.exit(f"error: could not build the C++ contender ({str(e).splitlines()[0]}); it needs a C++ compiler "
                 "with OpenMP and ninja (pip install ninja)")


def patch_grouped_mm() -> None:
    """Route torch._grouped_mm on CPU float32 (what lab's CPU grouped linear calls) to the experts over threads:
    benchmarks/moe.py --experts-over-threads."""
    ext, grouped_mm = build(), torch._grouped_mm

    def over_threads(a, b, offs=None, **kwargs):
        if a.device.type != "cpu" or a.dtype != torch.float32 or kwargs:
            return grouped_mm(a, b, offs=offs, **kwargs)
        return ext.grouped_mm_over_threads(a.detach(), b.detach(), offs)  # called below autograd (lab's op)

    torch._grouped_mm = over_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ext = build()

    def over_threads(a: torch.Tensor, b: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        return ext.grouped_mm_over_threads(a, b, ends)

    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds; best ms, x dense, median of rounds")
    for experts, top_k, width in LAYOUTS:
        rows, hidden = N * top_k, width
        ends = torch.arange(1, experts + 1, dtype=torch.int32) * (rows // experts)
        moe = (torch.randn(rows, D), torch.randn(experts, hidden, D), torch.randn(experts, D, hidden),
               torch.randn(rows, hidden), torch.randn(rows, hidden), torch.randn(rows, D))
        dense = (torch.randn(N, D), torch.randn(1, hidden * top_k, D), torch.randn(1, D, hidden * top_k),
                 torch.randn(N, hidden * top_k), torch.randn(N, hidden * top_k), torch.randn(N, D))
        contenders = {  # name: (one grouped GEMM, the step's tensors)
            "dense": (dense_mm, dense),
            "torch._grouped_mm": (functools.partial(torch_grouped_mm, ends=ends), moe),
            "experts over threads": (functools.partial(over_threads, ends=ends), moe),
        }
        (mm, _), (reference, _) = contenders["experts over threads"], contenders["torch._grouped_mm"]
        for ours, theirs in zip(step(mm, *moe), step(reference, *moe)):
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-3)  # the same products
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, (mm, tensors) in contenders.items():
                start = time.perf_counter()
                step(mm, *tensors)
                times[name].append(time.perf_counter() - start)
        print(f"\nE={experts} top-{top_k} width {width}: the six GEMMs of one step")
        for name, ts in times.items():
            ratios = [t / d for t, d in zip(ts, times["dense"])]
            print(f"  {name:22s} {min(ts) * 1e3:7.1f} {min(ts) / min(times['dense']):6.2f} "
                  f"{statistics.median(ratios):6.2f}")


if __name__ == "__main__":
    main()
