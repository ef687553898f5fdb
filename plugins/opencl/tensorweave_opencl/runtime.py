"""One ``Runtime`` per physical OpenCL device, shared by every Session of the process: the
context, one in-order command queue, what the device can do, and the compiled programs.

Sessions create their own ``Device`` objects (and allocators), but building a context and
compiling kernels is slow (PoCL compiles each kernel the first time it runs), so those live
here, once per process. Buffers of one context are valid in every Session, which is what
lets variables in named containers move between Sessions.
"""

from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_found: list | None = None
_runtimes: dict = {}


def enumerate_devices() -> list:
    """Every (platform, device) pair of every OpenCL platform, in a stable order (cached)."""
    global _found
    if _found is None:
        with _lock:
            if _found is None:
                import pyopencl as cl

                found = []
                try:
                    platforms = cl.get_platforms()
                except cl.Error:  # the ICD loader found no platform at all
                    platforms = []
                for p in platforms:
                    try:
                        devs = p.get_devices()
                    except cl.Error:
                        continue
                    found.extend((p, d) for d in devs)
                _found = found
    return _found


def runtime(index: int) -> Runtime:
    """The shared runtime of physical device ``index`` (see ``enumerate_devices``)."""
    rt = _runtimes.get(index)
    if rt is None:
        with _lock:
            rt = _runtimes.get(index)
            if rt is None:
                platform, device = enumerate_devices()[index]
                rt = _runtimes[index] = Runtime(index, platform, device)
    return rt


class Runtime:
    """Context, queue, capabilities and program cache of one physical OpenCL device."""

    def __init__(self, index: int, platform, device):
        import pyopencl as cl

        self.index = index
        self.platform = platform
        self.cl_device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)
        self.name = device.name.strip()
        self.platform_name = platform.name.strip()
        self.global_mem_size = int(device.global_mem_size)
        self.max_alloc_size = int(device.max_mem_alloc_size)
        self.max_work_group_size = int(device.max_work_group_size)
        self.local_mem_size = int(device.local_mem_size)
        # CPU devices (PoCL) want different kernels than GPUs (see kernels/matmul.cl).
        self.is_cpu = bool(device.type & cl.device_type.CPU)
        self.has_fp64 = bool(device.double_fp_config) or "cl_khr_fp64" in device.extensions
        self.programs: dict = {}        # (source text, defines) -> cl.Program
        self.constants: dict = {}       # small immutable int32 tables (broadcast/stride plans)
        self.lock = threading.Lock()

    def describe(self) -> str:
        mib = self.global_mem_size // (1 << 20)
        return f"{self.name} ({self.platform_name}), {mib} MiB{', fp64' if self.has_fp64 else ''}"

    def int_table(self, values) -> object:
        """A read-only device buffer holding ``values`` as int32, cached by value: the shape
        and stride tables kernels index with are few and reused every step."""
        key = tuple(values)
        buf = self.constants.get(key)
        if buf is None:
            import pyopencl as cl

            arr = np.asarray(key if key else (0,), dtype=np.int32)
            buf = cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=arr)
            if len(self.constants) > 4096:  # shapes that keep changing: do not grow forever
                self.constants.clear()
            self.constants[key] = buf
        return buf
