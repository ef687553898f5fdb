"""Buffer allocators of an OpenCL device: ``default`` (a fresh ``cl.Buffer`` per tensor) and
``pool`` (the core's size-class cache), selectable with
``tw.ConfigProto(allocator={"OPENCL": "pool"})``.

This module is only the device contract of ``tensorweave/runtime/allocator.py``: creating
a ``cl.Buffer`` (refused sizes over the device's ``max_alloc_size``; a runtime that refuses
is out of memory), dropping one, and blocking copies. Accounting, the memory limit (the
device's global memory unless configured lower), block lifetimes and pooling are the core's.

Buffers released while kernels that read them are still queued are safe to reuse: every
command goes through the device's one in-order queue, so a later kernel writing a reused
buffer runs after the earlier ones.
"""

from __future__ import annotations

from tensorweave.runtime.allocator import BlockAllocator, PoolAllocator
from tensorweave.runtime.allocator import size_class as size_class  # the pool's size classes, re-exported
from tensorweave_opencl.buffer import Block


class CLAllocator(BlockAllocator):
    """A fresh buffer per allocation; the buffer is dropped with its last tensor."""

    name = "default"
    block_type = Block

    def __init__(self, device_name: str, memory_limit: int | None, runtime):
        super().__init__(device_name, memory_limit)
        self.runtime = runtime
        self.max_alloc_size = runtime.max_alloc_size

    @classmethod
    def for_device(cls, device):
        return cls(device.name, device.memory_limit, device.runtime)

    def _alloc(self, nbytes: int):
        import pyopencl as cl

        try:
            # OpenCL has no empty buffers; an empty tensor still gets a (tiny) block.
            return cl.Buffer(self.runtime.context, cl.mem_flags.READ_WRITE, max(nbytes, 8))
        except (cl.MemoryError, cl.RuntimeError) as e:
            raise MemoryError(f"the OpenCL runtime refused: {e}") from None

    def _free(self, raw, nbytes: int) -> None:
        """Dropped, not released explicitly: pyopencl releases it with its last reference,
        and OpenCL keeps it until the queued commands that use it have run."""

    def _copyin(self, raw, src) -> None:
        import pyopencl as cl

        if src.nbytes:
            cl.enqueue_copy(self.runtime.queue, raw, src, is_blocking=True)

    def _copyout(self, dst, raw) -> None:
        import pyopencl as cl

        if dst.nbytes:
            cl.enqueue_copy(self.runtime.queue, dst, raw, is_blocking=True)


class CLPoolAllocator(PoolAllocator, CLAllocator):
    """Released buffers wait in the core's size-class free lists and are handed out again."""
