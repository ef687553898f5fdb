"""Row updates in place on the GPU: ``GPU_ROWS``, this device's ``RowWriter`` for the core's
copy-on-write of variables (``tensorweave/kernels/state.py``), the variable Scatter ops
(ScatterUpdate/Add/Sub/Mul/Div/Min/Max, ScatterNdUpdate/Add) registered on it, and the
uploads of the host-side index tables of every kernel that applies row updates grouped by
row (the sparse optimizer updates in ``training.py``, DynamicStitch, SparseToDense and the
SparseSegment gradients in ``indexing.py``).

The indices of these ops are host memory: the core checks them (range, shapes) before
anything is written, so a bad index is the same InvalidArgumentError as on the CPU and the
variable is unchanged. The host then sorts them into groups, one per distinct row, with its
positions in their original order (the core's ``tensorweave.kernels.indexing.group_rows``);
the kernel (``indexing.cu``'s ``scatter_rows``) runs one thread per element of a distinct
row, which applies that row's updates in order. So repeated
indices all apply, in order, deterministically (ScatterUpdate: the last one wins, as NumPy's
assignment on the CPU; integer ScatterDiv divides by each in turn, which truncates as the
CPU's division by their product), and no two threads write one element: no atomics.

The copy-on-write test of a GPU tensor: its buffer is its own when no other handle shares
it (a Reshape or Identity of it, another session's view) and it is not host-backed (whose
host copy would go stale). Kernels are queued on the device's one stream, so an in-place
write runs after every kernel queued before it that read the old rows.
"""

from __future__ import annotations

import sys

import numpy as np

from tensorweave.kernels import indexing, state
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import launch
from tensorweave_cuda.kernels.util import register as reg_kernel
from tensorweave_cuda.tensor import GPUTensor


def upload(dev, a) -> GPUTensor | None:
    """An int64 host array on the device (None stays None: a null pointer)."""
    return None if a is None else dev.to_device(np.ascontiguousarray(a, dtype=np.int64))


def ptr(t) -> int:
    return 0 if t is None else t.ptr


class _Slot:
    __slots__ = ("buffer",)


def _calibrate() -> int:
    # What sys.getrefcount reports for an object held by exactly one slot (as a GPUTensor
    # holds its buffer), measured: it differs between Python versions.
    probe = _Slot()
    probe.buffer = object()
    return sys.getrefcount(probe.buffer)


_ALONE = _calibrate()


class GPURows(state.RowWriter):
    def owns(self, t) -> bool:
        if not isinstance(t, GPUTensor) or t.host_value is not None:
            return False
        # The buffer slot itself (the ``buffer`` property would upload a host value).
        if t._buffer is None:
            return t.size == 0
        return sys.getrefcount(t._buffer) <= _ALONE

    def copy(self, t):
        dev = t.device
        out = dev.empty(t.shape, t.dtype)
        if t.size:
            dev.driver.dtod(out.ptr, t.ptr, t.nbytes)
        return out

    def scatter(self, kind, target, indices, updates):
        self._rows(kind, target, np.asarray(indices, dtype=np.int64).reshape(-1), updates, 1)

    def scatter_nd(self, kind, target, indices, updates):
        idx = np.asarray(indices, dtype=np.int64)
        # The first K coordinates as one row number of the target viewed as [prod(shape[:K]), rest].
        self._rows(kind, target, indexing.flat_index(idx, target.shape), updates, idx.shape[-1])

    def _rows(self, kind, target, flat, updates, k):
        lead = 1
        for d in target.shape[:k]:
            lead *= d
        inner = target.size // lead if lead else 0
        if not flat.size or not inner:
            return
        dev = target.device
        rows, starts, order = indexing.group_rows(flat)
        r, s, o = upload(dev, rows), upload(dev, starts), upload(dev, order)
        n = rows.size * inner
        ref = catalog.indexing_kernel("scatter_rows", catalog.dtype(target.dtype))
        launch(dev, ref, n, target.ptr, r.ptr, ptr(s), ptr(o), updates.ptr, n, inner, int(updates.ndim == 0),
               catalog.SCATTER_KINDS[kind])


GPU_ROWS = GPURows()

# op -> the dtypes it has a kernel for here (update: every dtype; arithmetic: numbers)
_SCATTER = {
    "ScatterUpdate": catalog.ALL, "ScatterAdd": catalog.NUMERIC, "ScatterSub": catalog.NUMERIC,
    "ScatterMul": catalog.NUMERIC, "ScatterDiv": catalog.NUMERIC, "ScatterMin": catalog.NUMERIC,
    "ScatterMax": catalog.NUMERIC, "ScatterNdUpdate": catalog.ALL, "ScatterNdAdd": catalog.NUMERIC,
}


def register(reg, device_type):
    # Ahead of the core's registration of these ops for this device type (register_all makes
    # it after the families; it goes through the host): priority 1 where its dtype list
    # differs, override where it is the same key. The core's serves what is left out here.
    for op, dtypes in _SCATTER.items():
        reg_kernel(reg, op, device_type, state.scatter_factory(op, GPU_ROWS), dtypes,
                   constraints={"Tindices": list(catalog.INDEX_DTYPES)}, host_memory=("indices",), priority=1,
                   override=True)
