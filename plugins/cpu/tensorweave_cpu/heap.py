"""How the C heap under NumPy keeps freed memory for the next step (glibc's malloc only).

A step's large arrays (a convolution's 13 MB activations, a language model's 45 MB logits)
are freed when the step is done with them and asked for again by the next step. By default
glibc serves requests above its mmap threshold (128 KiB, rising adaptively to 32 MiB) with
fresh pages from ``mmap`` and unmaps them on ``free``, and gives the free top of its heaps
back to the kernel beyond its trim threshold: every step then page-faults its large arrays
in again, each fault zeroing a page in the kernel. Measured on this project's 2-core machines:
2,200 faults and 15 ms of system time in a 100 ms convnet step, 5,000 faults and about 120 ms
of system time in a 330 ms LSTM language-model step.

So when the CPU plugin makes its devices (a session starts) it raises, once per process, the
mmap threshold to 64 MiB and the trim threshold to 1 GiB (``mallopt``): freed arrays up to 64
MiB stay in the heap and are handed out again with their pages already mapped (the convnet
step: no faults left, 0.5 ms of system time, 100 -> 67 ms median), and the process gives back
free heap top beyond 1 GiB. The cost is memory: a process keeps what its steps' peak needed,
as TensorFlow's own allocator does. ``TENSORWEAVE_HEAP_TUNING=0`` leaves glibc's defaults
(read when the first session starts); ``tensorweave doctor`` says which is in effect.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 1 << 30

_lock = threading.Lock()
_state: dict = {}  # "result": what tune() did, once


def _off() -> bool:
    return os.environ.get("TENSORWEAVE_HEAP_TUNING", "").strip().lower() in ("0", "false", "off", "no")


def tune() -> str:
    """Raise glibc's thresholds (once per process) unless switched off; what was done, in
    words (``tensorweave doctor`` prints it)."""
    if "result" in _state:
        return _state["result"]
    with _lock:
        if "result" not in _state:
            _state["result"] = _tune()
    return _state["result"]


def _tune() -> str:
    if _off():
        return "glibc's defaults (TENSORWEAVE_HEAP_TUNING=0)"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "the C library's defaults (not glibc: nothing to tune)"
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "glibc's defaults (mallopt not found)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "glibc's defaults (mallopt refused the thresholds)"
    return (f"freed arrays up to {MMAP_THRESHOLD >> 20} MiB are kept for reuse (glibc mmap threshold "
            f"{MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 30} GiB; "
            "TENSORWEAVE_HEAP_TUNING=0 turns this off)")
