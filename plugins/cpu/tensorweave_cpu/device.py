"""The CPU device: tensors are NumPy arrays in host memory.

The allocator accounts for the arrays kernels produce: an array is counted when produced and
released when its last reference goes (``weakref.finalize``), so ``bytes_in_use`` and
``peak_bytes_in_use`` follow real lifetimes. Tiny statically-shaped outputs are not counted
(the executor decides that at plan time), which keeps per-node overhead low.
"""

from __future__ import annotations

import os
import weakref

import numpy as np

from tensorweave.runtime.device import Allocator, Device, DeviceFactory
from tensorweave_cpu import heap


class CPUAllocator(Allocator):
    name = "default"

    def __init__(self, device_name="", memory_limit=None):
        super().__init__(device_name, memory_limit)
        self._live: dict[int, weakref.finalize] = {}

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit)

    def allocate(self, shape, dtype) -> np.ndarray:
        arr = np.empty(shape, dtype=dtype)
        self.track(arr)
        return arr

    def track(self, value) -> None:
        if type(value) is not np.ndarray:
            return
        base = value if value.base is None else value.base
        if not isinstance(base, np.ndarray):
            return
        key = id(base)
        if key in self._live:
            return  # a view or the same array again: already counted
        nbytes = base.nbytes
        self._note_alloc(nbytes)
        self._live[key] = weakref.finalize(base, self._release, key, nbytes)

    def _release(self, key, nbytes):
        self._live.pop(key, None)
        self._note_free(nbytes)


def blas_threads() -> int:
    """Threads the BLAS under NumPy uses for one call: threadpoolctl's answer when it is
    installed, else the thread-count variables OpenBLAS, MKL and OpenMP read, else one per
    core (their default). With the thread policy active (blas.py) the count of large products:
    small ones run on one thread."""
    from tensorweave_cpu import blas

    if blas.max_threads():
        return blas.max_threads()
    try:
        import threadpoolctl  # optional (scikit-learn brings it); the answer is then exact
    except ImportError:
        threadpoolctl = None
    if threadpoolctl is not None:
        try:
            found = [i.get("num_threads", 1) for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
        except Exception:  # noqa: BLE001 - an odd BLAS build: fall back to the variables
            found = []
        if found:
            return max(1, max(found))
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").split(",")[0].strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return os.cpu_count() or 1


class CPUDevice(Device):
    device_type = "CPU"
    host_tensors = True
    # Threads one kernel call may use (the BLAS's pool): the executor runs expensive nodes
    # side by side only when the cores allow each its threads (runtime/executor.py).
    intra_op_threads = 1

    def to_device(self, array):
        return np.asarray(array)

    def to_host(self, value):
        return value

    def copy_from(self, value, src):
        return src.to_host(value)

    def accumulate_product(self, acc, a, b) -> bool:
        from tensorweave_cpu import blas

        return blas.accumulate(acc, a, b)


class CPUDeviceFactory(DeviceFactory):
    device_type = "CPU"

    def count(self) -> int:
        return 1

    def create_devices(self, name_prefix, config=None):
        # One device, or as many as ``ConfigProto(device_count={"CPU": n})`` asks for (as in
        # TF: several CPU devices of one process, e.g. to try multi-device placement).
        counts = getattr(config, "device_count", None) or {}
        n = max(1, int(counts.get("CPU", counts.get("cpu", 1)) or 1))
        heap.tune()  # freed arrays are kept for the next step (heap.py)
        cores = os.cpu_count() or 1
        threads = blas_threads()
        out = []
        for i in range(n):
            name = f"{name_prefix}/device:CPU:{i}"
            dev = CPUDevice(name, None, description=f"NumPy {np.__version__} on {cores} cores")
            dev.allocator = CPUAllocator(name)
            dev.intra_op_threads = threads
            out.append(dev)
        return out

    def describe(self):
        return [f"CPU:0 NumPy {np.__version__}, {os.cpu_count()} cores"]
