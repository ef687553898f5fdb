"""Once a session has started, the CPU plugin keeps freed arrays in glibc's heap for the next
step (tensorweave_cpu/heap.py): a 40 MB array freed and asked for again comes back with its
pages mapped, no page faults; with TENSORWEAVE_HEAP_TUNING=0 glibc's defaults stay and every
new array faults its pages in again. Each case in a fresh process: the setting is process-wide."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the heap tuning is for glibc's malloc")

_PROGRAM = """
import resource
import numpy as np
import tensorweave as tw
from tensorweave_cpu import heap

tw.Session().close()                  # makes the CPU devices: the heap is tuned then
print(heap.tune())                    # (what the first call did: it runs once)

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

a = np.ones(10_000_000, np.float32)   # 40 MB, then freed
del a
f0 = faults()
for _ in range(5):
    a = np.ones(10_000_000, np.float32)
    del a
print(faults() - f0)
"""


def _run(**env):
    full = {k: v for k, v in os.environ.items() if k != "TENSORWEAVE_HEAP_TUNING"}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _PROGRAM], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    status, faults = out.stdout.strip().splitlines()[-2:]
    return status, int(faults)


def test_freed_arrays_come_back_without_page_faults():
    status, faults = _run()
    assert status.startswith("freed arrays up to 64 MiB are kept for reuse"), status
    assert faults < 20, faults


def test_switched_off_glibc_maps_every_new_array_again():
    status, faults = _run(TENSORWEAVE_HEAP_TUNING="0")
    assert status == "glibc's defaults (TENSORWEAVE_HEAP_TUNING=0)"
    # 5 x 40 MB mapped anew: at least one fault per 2 MiB page even with transparent huge pages
    assert faults >= 5 * 20 // 2, faults
