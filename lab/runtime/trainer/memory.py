"""CPU memory reuse for tensors over 32 MiB: glibc's malloc hands every freed block that large back to the
operating system (its mmap threshold adapts up to 32 MiB and no further), so such a tensor is a fresh mmap on
every step and page-faults on its first touch. Fine-grained MoE layers make them at ordinary sizes (the
[tokens x top_k, d_model] rows are 37.7 MB at batch 12 x 256, d_model 384, top-8), and an element-wise op on
one then takes ~10x its time (benchmarks/moe.py; docs/moe.md). PyTorch's CPU tuning guide's answer is another
allocator (jemalloc, tcmalloc) loaded by the user; lab keeps glibc and raises its thresholds, which makes it keep
freed blocks for reuse as those allocators and CUDA's caching allocator do: the process holds its peak memory.

Left alone when the user chose: LAB_KEEP_FREED_MEMORY=0, a malloc tunable in the environment, or a preloaded
allocator. Linux with glibc only (elsewhere nothing to do)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
KEEP_UP_TO = 1 << 30  # blocks up to 1 GiB come from the heap (and are reused); larger ones are still mmapped
_done = False


def keep_freed_memory() -> str | None:
    """Raise glibc's mmap and trim thresholds to 1 GiB, once per process. Returns the one line to print when it
    changed something, None when it did not (not glibc, already done, or the user's choice)."""
    global _done
    if _done or os.environ.get("LAB_KEEP_FREED_MEMORY", "1") == "0" or platform.system() != "Linux":
        return None
    if platform.libc_ver()[0] != "glibc" or user_chose_allocator(os.environ):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not (libc.mallopt(M_MMAP_THRESHOLD, KEEP_UP_TO) and libc.mallopt(M_TRIM_THRESHOLD, KEEP_UP_TO)):
        return None  # glibc refused the value: nothing changed
    _done = True
    return ("cpu memory: freed blocks up to 1 GiB are kept for reuse (glibc mmap/trim thresholds), so large "
            "tensors do not page-fault on every step; LAB_KEEP_FREED_MEMORY=0 leaves glibc's defaults")


THRESHOLD_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def user_chose_allocator(env: dict[str, str]) -> bool:
    """A preloaded allocator (jemalloc, tcmalloc, mimalloc) or glibc threshold settings of the user's own."""
    if any(env.get(name) for name in THRESHOLD_SETTINGS):
        return True
    if any(f"glibc.malloc.{t}" in env.get("GLIBC_TUNABLES", "") for t in ("mmap_threshold", "trim_threshold")):
        return True
    return any(lib in env.get("LD_PRELOAD", "") for lib in ("jemalloc", "tcmalloc", "mimalloc"))
