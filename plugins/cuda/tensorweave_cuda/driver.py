"""The thin layer over PyCUDA: one ``Driver`` per physical GPU owns its (primary) context,
one stream, and every PyCUDA call the plugin makes. The rest of the plugin talks only to this
interface, which the CPU emulator (``tensorweave_cuda.testing.emulator``) implements too.

Every call runs with the device's context current (``activate``): the executor calls kernels
from several threads, and a CUDA context is current per thread. Activation is re-entrant
and cheap when the context is already current on this thread.

All work goes to the device's one stream, in the order it is issued. A kernel's inputs were
produced by work issued before it (the executor runs a node after its inputs' producers
returned), so stream order is the dependency order, and a buffer freed to the pool can be
handed to later work on the same stream without waiting.
"""

from __future__ import annotations

import contextlib
import threading

_tls = threading.local()


class OutOfMemory(Exception):  # noqa: N818 - the driver's word for it
    """The device could not allocate: the allocator turns this into ResourceExhaustedError."""


class DriverError(Exception):
    """A CUDA call failed (message from the driver). Kernels' failures that the driver
    reports asynchronously (an illegal address, say) surface as this at the next call that
    waits for the device: ``synchronize``, ``event_sync``, a copy, or the next launch."""


class LaunchError(DriverError):
    """A kernel (or a cuBLAS call) could not be launched. The kernel wrapper in
    ``kernels/util.py`` turns it into an InternalError naming the node."""


# Page-locked host memory: copies from it run as DMA without the driver's own staging, and
# asynchronously. ``host_alloc`` gives a 1-D uint8 NumPy array of ``nbytes`` (the handle).
PINNED_ALIGN = 4096


class PyCudaDriver:
    """One physical device through PyCUDA. Created once per device per process."""

    kind = "cuda"

    def __init__(self, ordinal: int):
        import pycuda.driver as cuda

        cuda.init()
        self.cuda = cuda
        self.ordinal = ordinal
        self._dev = dev = cuda.Device(ordinal)
        self.name = dev.name()
        self.compute_capability = tuple(dev.compute_capability())
        self.total_memory = int(dev.total_memory())
        self.multiprocessors = self._attribute("MULTIPROCESSOR_COUNT")
        self.clock_khz = self._attribute("CLOCK_RATE")  # for the cost model only
        try:
            self.pci_bus_id = dev.pci_bus_id()
        except Exception:  # noqa: BLE001 - informational only
            self.pci_bus_id = "?"
        # The primary context is the one the CUDA runtime (and so cuBLAS) uses.
        if hasattr(dev, "retain_primary_context"):
            self.context = dev.retain_primary_context()
        else:  # PyCUDA before 2021.1
            self.context = dev.make_context()
            cuda.Context.pop()
        with self.activate():
            self.stream = cuda.Stream()
        self._peers: set = set()
        # Counters (plain integers: a benchmark reads them around a step).
        self.launches = 0   # kernels and cuBLAS calls queued
        self.last_node = None  # "<Op> node '<name>'" that last ran a kernel here (kernels/util.py)
        self.copies = {"htod": 0, "dtoh": 0, "dtod": 0, "peer": 0}

    def _attribute(self, name: str) -> int:
        """A device attribute, 0 where this PyCUDA/driver does not know it."""
        try:
            return int(self._dev.get_attribute(getattr(self.cuda.device_attribute, name)))
        except Exception:  # noqa: BLE001 - informational only
            return 0

    # -- context ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def activate(self):
        cur = getattr(_tls, "ctx", None)
        if cur is self.context:
            yield
            return
        self.context.push()
        _tls.ctx = self.context
        try:
            yield
        finally:
            self.cuda.Context.pop()
            _tls.ctx = cur

    # -- memory ----------------------------------------------------------------------------
    def mem_get_info(self) -> tuple[int, int]:
        with self.activate():
            free, total = self.cuda.mem_get_info()
        return int(free), int(total)

    def mem_alloc(self, nbytes: int):
        cuda = self.cuda
        with self.activate():
            try:
                return cuda.mem_alloc(nbytes)
            except cuda.MemoryError as e:
                raise OutOfMemory(f"cuMemAlloc of {nbytes} bytes: {e}") from None
            except cuda.Error as e:
                raise DriverError(f"cuMemAlloc of {nbytes} bytes: {e}") from None

    def mem_free(self, handle) -> None:
        with self.activate():
            try:
                handle.free()
            except self.cuda.Error as e:
                raise DriverError(f"cuMemFree: {e}") from None

    def host_alloc(self, nbytes: int):
        """``nbytes`` of page-locked host memory (portable: any context may copy from it) as a
        1-D uint8 array; OutOfMemory when the driver refuses."""
        cuda = self.cuda
        with self.activate():
            try:  # (shape, dtype, order, mem_flags), as PyCUDA documents it
                return cuda.pagelocked_empty((nbytes,), "uint8", "C", cuda.host_alloc_flags.PORTABLE)
            except cuda.Error as e:
                raise OutOfMemory(f"cuMemHostAlloc of {nbytes} bytes: {e}") from None

    def host_free(self, handle) -> None:
        with self.activate():
            try:
                handle.base.free()
            except self.cuda.Error as e:
                raise DriverError(f"cuMemFreeHost: {e}") from None

    @staticmethod
    def pointer(handle) -> int:
        return int(handle)

    # -- copies (all on the stream) ----------------------------------------------------------
    # From/to page-locked memory these are asynchronous DMA; from/to pageable memory the
    # driver stages them (and the call returns once the host side is done with ``array``).
    def htod(self, ptr: int, array) -> None:
        with self.activate():
            try:
                self.cuda.memcpy_htod_async(ptr, array, self.stream)
            except self.cuda.Error as e:
                raise DriverError(f"copy of {array.nbytes} bytes to the device: {e}") from None
        self.copies["htod"] += 1

    def dtoh(self, array, ptr: int) -> None:
        with self.activate():
            try:
                self.cuda.memcpy_dtoh_async(array, ptr, self.stream)
            except self.cuda.Error as e:
                raise DriverError(f"copy of {array.nbytes} bytes to the host: {e}") from None
        self.copies["dtoh"] += 1

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        with self.activate():
            try:
                self.cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)
            except self.cuda.Error as e:
                raise DriverError(f"device-to-device copy of {nbytes} bytes: {e}") from None
        self.copies["dtod"] += 1

    def can_access_peer(self, other: PyCudaDriver) -> bool:
        if other is self or getattr(other, "kind", None) != self.kind:
            return False
        try:
            return bool(self._dev.can_access_peer(other._dev))
        except Exception:  # noqa: BLE001
            return False

    def peer_copy(self, dst_driver: PyCudaDriver, dst: int, src: int, nbytes: int) -> None:
        """Copy from this device to ``dst_driver`` on this device's stream."""
        with self.activate():
            if dst_driver.ordinal not in self._peers:
                try:
                    self.cuda.Context.enable_peer_access(dst_driver.context)
                except self.cuda.Error:
                    pass  # already enabled, or copies go through the driver's staging
                self._peers.add(dst_driver.ordinal)
            try:
                self.cuda.memcpy_peer_async(dst, src, nbytes, dest_context=dst_driver.context,
                                            src_context=self.context, stream=self.stream)
            except self.cuda.Error as e:
                raise DriverError(f"peer copy of {nbytes} bytes to GPU {dst_driver.ordinal}: {e}") from None
        self.copies["peer"] += 1

    # -- ordering ----------------------------------------------------------------------------
    def record(self):
        """An event marking everything issued to the stream so far."""
        cuda = self.cuda
        with self.activate():
            try:
                ev = cuda.Event(cuda.event_flags.DISABLE_TIMING)
                ev.record(self.stream)
            except cuda.Error as e:
                raise DriverError(f"recording an event: {e}") from None
        return ev

    def wait(self, event) -> None:
        """Later work on this stream waits for ``event`` (possibly another device's)."""
        with self.activate():
            try:
                self.stream.wait_for_event(event)
            except self.cuda.Error as e:
                raise DriverError(f"ordering the stream after an event: {e}") from None

    def event_done(self, event) -> bool:
        try:
            return bool(event.query())
        except self.cuda.Error as e:
            raise DriverError(f"querying an event: {e}") from None

    def event_sync(self, event) -> None:
        try:
            event.synchronize()
        except self.cuda.Error as e:
            raise DriverError(f"waiting for the device: {e}") from None

    def synchronize(self) -> None:
        with self.activate():
            try:
                self.stream.synchronize()
            except self.cuda.Error as e:
                raise DriverError(f"waiting for the device: {e}") from None

    @property
    def stream_handle(self) -> int:
        return int(self.stream.handle)

    # -- code --------------------------------------------------------------------------------
    def compile(self, source: str, options: list[str], signatures: dict | None = None):
        """A module of ``source``; ``signatures`` ({function: launch signature}) names the
        functions of a generated source (fusion.py), which the emulator needs and nvcc does not."""
        from pycuda.compiler import SourceModule

        with self.activate():
            return SourceModule(source, options=list(options), no_extern_c=True)

    def function(self, module, name: str, arg_format: str):
        f = module.get_function(name)
        f.prepare(arg_format)
        return f

    def launch(self, function, grid: tuple, block: tuple, args: tuple) -> None:
        with self.activate():
            try:
                function.prepared_async_call(grid, block, self.stream, *args)
            except self.cuda.Error as e:
                raise LaunchError(f"grid {tuple(grid)}, block {tuple(block)}: {e}") from None
        self.launches += 1

    def open_blas(self):
        from tensorweave_cuda.blas import CuBlas

        return CuBlas(self)

    def describe(self) -> str:
        cc = ".".join(map(str, self.compute_capability))
        return (f"{self.name}, compute capability {cc}, {self.total_memory / 2**30:.1f} GiB, "
                f"{self.multiprocessors} SMs, PCI {self.pci_bus_id}")
