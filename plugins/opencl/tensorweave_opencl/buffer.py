"""Device memory as the core sees it: ``CLTensor`` (a buffer, a shape, a dtype), opaque to
the core, and ``Block``, one allocation, shared by the tensors that view it.

Tensors are immutable: no kernel writes into a buffer it did not just allocate, so
metadata ops (Reshape, ExpandDims, Squeeze, Identity) return new tensors over the same
block. A block goes back to its allocator when its last tensor goes (the core's ``Block``
lifetime, ``tensorweave/runtime/allocator.py``).
"""

from __future__ import annotations

import numpy as np

from tensorweave.runtime import allocator


class Block(allocator.Block):
    """One device allocation of ``nbytes`` (``buf``, the core's ``raw``, is a ``pyopencl.Buffer``)."""

    __slots__ = ()
    # The same slot under the name kernels use: no property call on the launch path.
    buf = allocator.Block.raw


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

    def reshape(self, shape) -> CLTensor:
        """The same elements with another shape of as many elements (no copy; the caller
        has checked the size: ``runtime.device.DeviceTensor``)."""
        return CLTensor(self.block, tuple(shape), self.dtype)

    def __repr__(self):
        return f"CLTensor(shape={self.shape}, dtype={self.dtype.name})"
