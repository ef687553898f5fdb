"""The device tensor handle: a buffer on one GPU, a shape and a dtype.

Buffers are never written after the kernel that produced them (updates write new buffers),
so a handle may be shared freely: Reshape/Identity/ExpandDims return a new handle on the
same buffer. A buffer goes back to its allocator when the last handle goes.

Small host values (shapes, axes, scalars: up to ``HOST_BYTES``) become *host-backed*
tensors: the host copy is kept and the device copy is made only when a kernel first needs
the pointer. Shape arithmetic that flows between host-memory inputs (Reshape's shape,
reduction axes) then never touches the device and never waits for it.
"""

from __future__ import annotations

import threading

import numpy as np

from tensorweave.runtime.allocator import Block

HOST_BYTES = 1024


class Buffer(Block):
    """One allocation (the core's ``Block``: returned to its allocator when no handle refers
    to it); ``ptr`` is its device address, ``handle`` the driver's allocation."""

    __slots__ = ("ptr", "__weakref__")
    # The same slot under the driver's name for it.
    handle = Block.raw

    def __init__(self, raw, nbytes: int, size: int, returns, ptr: int):
        super().__init__(raw, nbytes, size, returns)
        self.ptr = ptr


class GPUTensor:
    """A dense row-major tensor on ``device`` (a CUDADevice)."""

    __slots__ = ("device", "shape", "dtype", "_buffer", "_host", "_lock", "__weakref__")

    def __init__(self, device, shape, dtype, buffer: Buffer | None = None, host: np.ndarray | None = None):
        self.device = device
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._buffer = buffer
        self._host = host
        self._lock = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def buffer(self) -> Buffer | None:
        """The device buffer, uploading a host-backed value on first use (None if empty)."""
        b = self._buffer
        if b is None and self._host is not None and self.size:
            lock = self._lock
            if lock is None:
                lock = self._lock = threading.Lock()
            with lock:
                b = self._buffer
                if b is None:
                    b = self._buffer = self.device.upload(self._host)
        return b

    @property
    def ptr(self) -> int:
        b = self.buffer
        return b.ptr if b is not None else 0

    @property
    def host_value(self) -> np.ndarray | None:
        """The host copy of a host-backed tensor (do not modify), else None."""
        return self._host

    def reshape(self, shape) -> GPUTensor:
        """The same elements with another shape of as many elements (shares the buffer; the
        caller has checked the size: ``runtime.device.DeviceTensor``)."""
        return GPUTensor(self.device, shape, self.dtype, self._buffer,
                         None if self._host is None else self._host.reshape(shape))

    def __repr__(self):
        where = "host-backed " if self._buffer is None and self._host is not None else ""
        return f"<GPUTensor {where}{self.dtype.name}{list(self.shape)} on {self.device.name}>"
