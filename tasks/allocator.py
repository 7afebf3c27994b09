"""glibc malloc settings for a process that runs a model on the CPU (`retbench run` sets them) or
scores a large run (`retbench eval`: arrays of the run's length, allocated and freed in turn).

PyTorch's CPU allocator asks malloc for every tensor, and a transformer's larger ones are above
glibc's mmap threshold (at most 32 MB): one MiniLM batch of 64 texts of 256 tokens has 201 MB of
attention scores. Each such tensor is a fresh mmap that the kernel zeroes page by page and takes
back when it is freed: 1.7 million page faults (7 GB of zeroed pages, 4 s of system time) for
1,200 NPL abstracts, and the memory arrives cold. In a thread other than the main one, where
Prefect runs a task, it is worse: a thread's arena grows in heaps of at most 64 MB, so even a
raised threshold cannot keep the tensors there. One arena (the main one, which grows without that
limit), a threshold above the largest tensor and a trim threshold as high keep the freed memory
for the next batch: `benchmarks/bench_allocator.py` measures the difference.

Set before the process starts threads; child processes (the API server, a local Dask cluster's
workers) get the same settings through glibc's environment variables. Anything the user set for
malloc (those variables, or GLIBC_TUNABLES) is left alone; elsewhere than glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_KEEP = 1 << 30  # bytes: above the largest tensor of a batch (attention of 64 x 12 heads x 512 x 512 floats: 805 MB)
SETTINGS = {"MALLOC_ARENA_MAX": 1, "MALLOC_MMAP_THRESHOLD_": _KEEP, "MALLOC_TRIM_THRESHOLD_": _KEEP}


def user_set_malloc() -> bool:
    return any(name in os.environ for name in SETTINGS) or "malloc" in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Apply SETTINGS to this process (mallopt) and its future children (environment); returns
    whether they were applied."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc" or user_set_malloc():
        return False
    libc = ctypes.CDLL("libc.so.6")
    applied = all(libc.mallopt(param, value) == 1 for param, value in
                  ((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, _KEEP), (_M_TRIM_THRESHOLD, _KEEP)))
    if applied:
        os.environ.update({name: str(value) for name, value in SETTINGS.items()})
    return applied
