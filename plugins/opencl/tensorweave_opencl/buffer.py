"""Device memory as the core sees it: ``CLTensor`` (a buffer, a shape, a dtype), opaque to
the core, and ``Block``, one allocation, shared by the tensors that view it.

Tensors are immutable: no kernel writes into a buffer it did not just allocate, so
metadata ops (Reshape, ExpandDims, Squeeze, Identity) return new tensors over the same
block. A block goes back to its allocator when its last tensor goes: ``__del__`` only
queues it (no lock is taken there, so it is safe wherever the collector runs it); the
allocator settles the queue on its next call.
"""

from __future__ import annotations

import numpy as np


class Block:
    """One device allocation of ``nbytes`` (``buf`` is a ``pyopencl.Buffer``)."""

    __slots__ = ("buf", "nbytes", "_returns")

    def __init__(self, buf, nbytes: int, returns):
        self.buf = buf
        self.nbytes = nbytes
        self._returns = returns  # the allocator's queue of released blocks (a deque)

    def __del__(self):
        r = self._returns
        if r is not None:
            r.append((self.buf, self.nbytes))


class CLTensor:
    """A tensor in OpenCL device memory: ``block`` (shared), ``shape`` and NumPy ``dtype``.
    Elements are contiguous, row-major, from the start of the block."""

    __slots__ = ("block", "shape", "dtype")

    def __init__(self, block: Block, shape: tuple, dtype):
        self.block = block
        self.shape = shape
        self.dtype = dtype

    @property
    def buf(self):
        return self.block.buf

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def view(self, shape) -> CLTensor:
        """The same elements with another shape (no copy)."""
        return CLTensor(self.block, tuple(shape), self.dtype)

    def __repr__(self):
        return f"CLTensor(shape={self.shape}, dtype={self.dtype.name})"
