"""lab.runtime.trainer.memory: after keep_freed_memory a large freed tensor is reused instead of page-faulted anew."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from lab.runtime.trainer.memory import user_chose_allocator

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# in a fresh process (the setting is process-wide), set first as lab.train does: the minor page faults of each of 24
# steps that allocate, touch and free a 48 MiB tensor (12,288 pages). glibc takes a few steps (1-9 seen) to settle
SCRIPT = """
import resource, torch
from lab.runtime.trainer.memory import keep_freed_memory
note = keep_freed_memory()
faults = []
for _ in range(24):
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(48 << 20, dtype=torch.uint8)
    t.fill_(1)
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
print(repr(note))
print(*faults)
"""
PAGES = 12_288


def run(env_extra: dict[str, str]) -> tuple[str, list[int]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAB_KEEP_FREED_MEMORY", "LD_PRELOAD", "GLIBC_TUNABLES") and not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env={**env, **env_extra}, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return out[0], [int(n) for n in out[1].split()]


def test_freed_large_tensors_are_reused_instead_of_page_faulted_again():
    note, faults = run({})
    assert sum(faults[-4:]) < PAGES  # steady state: the block is reused, (almost) nothing faults
    assert "LAB_KEEP_FREED_MEMORY=0" in note  # and it says so, with the way out
    note, faults = run({"LAB_KEEP_FREED_MEMORY": "0"})
    assert note == "None"
    assert min(faults[-4:]) > 0.9 * PAGES  # glibc's default: every step a fresh mmap, faulted page by page


def test_the_users_own_malloc_settings_are_left_alone():
    note, faults = run({"MALLOC_MMAP_THRESHOLD_": str(1 << 20)})
    assert note == "None" and min(faults[-4:]) > 0.9 * PAGES


@pytest.mark.parametrize("env,chose", [
    ({}, False),
    ({"MALLOC_ARENA_MAX": "2"}, False),  # not a threshold
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, True),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"}, True),
    ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, False),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, True),
], ids=["nothing", "arena-max", "trim-threshold", "tunable", "other-tunable", "jemalloc"])
def test_what_counts_as_the_users_allocator_choice(env, chose):
    assert user_chose_allocator(env) is chose
