"""`retbench run`'s malloc settings (tasks/allocator.py): freed large blocks stay for the next
batch instead of costing a fresh, kernel-zeroed mapping each time; a user's own settings win."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from retbench.support.paths import ROOT

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# Ten 200 MB blocks, each written whole and freed, in a worker thread (where Prefect runs a task).
PROBE = """
import ctypes, json, os, resource, sys, threading
from retbench.tasks.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "kept" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
faults = {}
def work():  # as torch's CPU allocator does: malloc, write, free
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(10):
        block = libc.malloc(200_000_000)
        ctypes.memset(block, 1, 200_000_000)
        libc.free(block)
    faults["n"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
thread = threading.Thread(target=work); thread.start(); thread.join()
print(json.dumps({"applied": applied, "faults": faults["n"], "arena": os.environ.get("MALLOC_ARENA_MAX")}))
"""

def probe(side: str, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", PROBE, side], cwd=ROOT, env={**environment, **env},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_freed_blocks_are_reused_instead_of_mapped_again():
    pages = 200_000_000 // 4096  # one block's pages
    default, kept = probe("default"), probe("kept")
    assert kept["applied"] and kept["arena"] == "1"  # children (API server, local Dask workers) get them too
    assert kept["faults"] <= 2 * pages  # the first block's pages, then the same memory again
    # Every block a fresh mapping, each page zeroed on first touch (here 10 x 48,829 faults; fewer,
    # larger pages where transparent huge pages are always on, but still one set per block).
    assert default["faults"] >= 5 * kept["faults"]


def test_the_users_own_malloc_settings_are_left_alone():
    mine = probe("kept", MALLOC_ARENA_MAX="4")
    assert not mine["applied"] and mine["arena"] == "4"
    assert not probe("kept", GLIBC_TUNABLES="glibc.malloc.trim_threshold=1000")["applied"]
