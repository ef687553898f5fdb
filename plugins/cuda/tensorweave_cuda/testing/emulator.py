"""A CPU emulation of the CUDA driver layer, for tests on machines without a GPU.

``EmuDriver`` implements the interface of ``tensorweave_cuda.driver.PyCudaDriver``:
device memory is host memory (NumPy buffers addressed by raw pointers), copies are
``memmove``, every launch runs to completion (so streams and events are trivially ordered),
and modules are the plugin's *real* ``.cu`` sources compiled as C++ with g++ and OpenMP:
``emu.h`` maps ``__global__``/``__shared__``/``__syncthreads`` onto the CPU, and a generated
trampoline per kernel runs its grid block by block, one OpenMP thread per CUDA thread.
Trampolines are generated from the catalog's signatures, and arguments arrive flattened
exactly as PyCUDA would pack them, so the launch contract is exercised too.

``EmuBlas`` runs the column-major GEMM cuBLAS would be asked for (NumPy on the raw buffers),
so the row-major-to-column-major mapping of ``blas.gemm_plan`` is checked end to end.

Page-locked host memory (``host_alloc``) is ordinary, page-aligned host memory here.
``inject_failure`` makes the next launch, cuBLAS call or wait fail as the real driver would
(for the error-path tests), and ``plugin`` registers emulated GPUs as device type ``CUDAEMU``
outside pytest (``benchmarks/gpu.py --device /device:CUDAEMU:0``).

What this cannot show: PyCUDA API use, real GPU memory/timing, warp-level behaviour, races
between blocks (blocks run one at a time), and cuBLAS itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from tensorweave.plugins import hookimpl
from tensorweave_cuda.driver import PINNED_ALIGN, DriverError, LaunchError, OutOfMemory
from tensorweave_cuda.kernels import catalog, source_text

SHIM = Path(__file__).resolve().parent / "emu.h"
# Emulated blocks are OpenMP teams of up to 256 threads on a few cores: waiting threads must
# sleep, not spin (read by libgomp when it loads, i.e. with the first compiled module).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
CXX_ENV = "TENSORWEAVE_CUDA_EMU_CXX"
# One kernel runs at a time in the process, as on a GPU's one stream: a module's blockDim,
# gridDim and __shared__ arrays are statics of its shared library (loaded once per process,
# whichever emulated device asks), so two kernels launched from two executor threads at once
# would share them.
_LAUNCH_LOCK = threading.Lock()
_CTYPES = {"P": ctypes.c_void_p, "q": ctypes.c_longlong, "i": ctypes.c_int, "d": ctypes.c_double,
           "f": ctypes.c_float, "B": ctypes.c_ubyte}
_CDECL = {"P": "void*", "q": "long long", "i": "int", "d": "double", "f": "float", "B": "unsigned char",
          "X": "TwStrided", "Y": "TwBcast"}


class _TwStrided(ctypes.Structure):
    _fields_ = [("v", ctypes.c_longlong * catalog.STRUCT_FIELDS["X"])]


class _TwBcast(ctypes.Structure):
    _fields_ = [("v", ctypes.c_longlong * catalog.STRUCT_FIELDS["Y"])]


_STRUCTS = {"X": _TwStrided, "Y": _TwBcast}


def compiler() -> str | None:
    """The C++ compiler the emulator uses (``$TENSORWEAVE_CUDA_EMU_CXX``, else g++), or None."""
    return os.environ.get(CXX_ENV) or shutil.which("g++")


def unavailable_reason() -> str | None:
    if compiler() is None:
        return "no C++ compiler for the CUDA emulator (g++ not on PATH; set TENSORWEAVE_CUDA_EMU_CXX)"
    return None


def _resolve_sig(ref: catalog.KernelRef) -> str:
    if "v" not in ref.sig:
        return ref.sig
    suffix = dict(ref.defines).get("TW_SUFFIX")
    dt = next(d for d in catalog.DTYPES.values() if d.suffix == suffix)
    return ref.sig.replace("v", dt.code)


def trampolines(refs) -> str:
    """C++ that runs each kernel over a grid: ``emu_<name>(grid_x, block_x, args...)``."""
    out = ["#include <omp.h>"]
    for ref in refs:
        sig = _resolve_sig(ref)
        types = [_CDECL[c] for c in sig]
        params = ", ".join(f"{t} a{i}" for i, t in enumerate(types))
        args = ", ".join(f"a{i}" for i in range(len(types)))
        out.append(f"""
extern "C" int emu_{ref.name}(unsigned gx, unsigned bx{', ' if params else ''}{params}) {{
    typedef void (*fn_t)({', '.join(types)});
    fn_t fn = (fn_t)&{ref.name};
    gridDim.x = gx; gridDim.y = gridDim.z = 1;
    blockDim.x = bx; blockDim.y = blockDim.z = 1;
    omp_set_dynamic(0);
    int bad = 0;
    for (unsigned b = 0; b < gx && !bad; ++b) {{
#pragma omp parallel num_threads(bx)
        {{
            if ((unsigned)omp_get_num_threads() != bx) {{
#pragma omp atomic write
                bad = 1;
            }} else {{
                threadIdx.x = (unsigned)omp_get_thread_num(); threadIdx.y = threadIdx.z = 0;
                blockIdx.x = b; blockIdx.y = blockIdx.z = 0;
                fn({args});
            }}
        }}
    }}
    return bad;
}}""")
    return "\n".join(out) + "\n"


class EmuModule:
    def __init__(self, lib: ctypes.CDLL, refs, path: str):
        self.lib = lib
        self.refs = {r.name: r for r in refs}
        self.path = path


class EmuFunction:
    def __init__(self, module: EmuModule, name: str, fmt: str):
        ref = module.refs.get(name)
        if ref is None:
            raise DriverError(f"named symbol not found: {name}")
        self.name = name
        self.sig = _resolve_sig(ref)
        self.fmt = fmt
        if catalog.expand_sig(self.sig) != fmt:
            raise DriverError(f"{name}: prepared with format {fmt!r}, the kernel takes {catalog.expand_sig(self.sig)!r}")
        fn = getattr(module.lib, f"emu_{name}")
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [_STRUCTS.get(c) or _CTYPES[c] for c in self.sig]
        fn.restype = ctypes.c_int
        self.fn = fn

    def pack(self, args) -> list:
        """Regroup arguments flattened as PyCUDA packs them into the kernel's parameters."""
        out, i = [], 0
        for c in self.sig:
            if c in _STRUCTS:
                k = catalog.STRUCT_FIELDS[c]
                vals = [int(v) for v in args[i:i + k]]
                if len(vals) != k:
                    raise DriverError(f"{self.name}: too few arguments for a struct parameter")
                s = _STRUCTS[c]()
                s.v[:] = vals
                out.append(s)
                i += k
            else:
                out.append(args[i])
                i += 1
        if i != len(args):
            raise DriverError(f"{self.name}: {len(args)} arguments for format {self.fmt!r}")
        return out


class _Event:
    def synchronize(self):
        return self

    def query(self):
        return True


class EmuDriver:
    """An emulated GPU with ``capacity`` bytes of memory (host memory underneath)."""

    kind = "emu"
    node_overhead_seconds = 2e-5

    def __init__(self, ordinal: int = 0, capacity: int = 1 << 30, cache_dir: str | None = None):
        self.ordinal = ordinal
        self.name = f"CUDA emulator {ordinal}"
        self.compute_capability = (8, 0)
        self.total_memory = capacity
        self.multiprocessors = 0   # no cost-model throughput claim: counts as a CPU
        self.clock_khz = 0
        self.pci_bus_id = "emulated"
        self.cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "tensorweave-cuda-emu")
        self.context = object()
        self.stream_handle = 0
        self._live: dict[int, np.ndarray] = {}
        self._used = 0
        self._lock = threading.Lock()
        self.launches = 0
        self.last_node = None
        self.copies = {"htod": 0, "dtoh": 0, "dtod": 0, "peer": 0}
        self.pinned_live: dict[int, np.ndarray] = {}
        self._failures: dict[str, list] = {}   # where -> [message, times left]
        self._async_error: str | None = None   # reported by the next wait, as CUDA does

    @contextlib.contextmanager
    def activate(self):
        yield

    # -- failure injection (tests) ---------------------------------------------------------------
    def inject_failure(self, where: str, message: str = "unspecified launch failure", times: int = 1) -> None:
        """The next ``times`` calls fail with ``message``, as the real driver reports it:
        ``"launch"`` (a kernel launch is refused), ``"gemm"`` (a cuBLAS call returns an error
        status), ``"async"`` (a kernel launches, then the next wait or launch reports its failure,
        like an illegal address), ``"sync"`` (waiting for the stream fails)."""
        if where not in ("launch", "gemm", "async", "sync"):
            raise ValueError(f"unknown failure point {where!r}")
        self._failures[where] = [message, times]

    def _take_failure(self, where: str) -> str | None:
        f = self._failures.get(where)
        if not f:
            return None
        f[1] -= 1
        if f[1] <= 0:
            del self._failures[where]
        return f[0]

    def _raise_pending(self, what: str) -> None:
        msg = self._take_failure("sync")
        if msg is None and self._async_error is not None:
            msg, self._async_error = self._async_error, None
        if msg is not None:
            raise DriverError(f"{what}: {msg}")

    # -- memory --------------------------------------------------------------------------------
    def mem_get_info(self):
        return self.total_memory - self._used, self.total_memory

    def mem_alloc(self, nbytes: int):
        with self._lock:
            if self._used + nbytes > self.total_memory:
                raise OutOfMemory(f"cuMemAlloc failed: out of memory (emulated, {nbytes} bytes asked, "
                                  f"{self.total_memory - self._used} free)")
            buf = np.zeros(nbytes + 256, np.uint8)
            off = (-buf.ctypes.data) % 256  # cuMemAlloc's alignment
            arr = buf[off:off + nbytes]
            self._live[arr.ctypes.data] = arr
            self._used += nbytes
        return arr

    def mem_free(self, handle) -> None:
        with self._lock:
            if self._live.pop(handle.ctypes.data, None) is None:
                raise DriverError("cuMemFree of a pointer that is not allocated (double free?)")
            self._used -= handle.nbytes

    @staticmethod
    def pointer(handle) -> int:
        return handle.ctypes.data

    def host_alloc(self, nbytes: int) -> np.ndarray:
        """"Page-locked" host memory: plain page-aligned host memory in the emulator."""
        buf = np.empty(nbytes + PINNED_ALIGN, np.uint8)
        off = (-buf.ctypes.data) % PINNED_ALIGN
        arr = buf[off:off + nbytes]
        with self._lock:
            self.pinned_live[arr.ctypes.data] = arr
        return arr

    def host_free(self, handle) -> None:
        with self._lock:
            if self.pinned_live.pop(handle.ctypes.data, None) is None:
                raise DriverError("cuMemFreeHost of a pointer that is not allocated (double free?)")

    def _check(self, ptr: int, nbytes: int, what: str):
        # Under the lock: another executor thread may allocate or free while a copy checks.
        with self._lock:
            live = list(self._live.items())
        for base, arr in live:
            if base <= ptr and ptr + nbytes <= base + arr.nbytes:
                return
        raise DriverError(f"{what}: [{ptr:#x}, +{nbytes}) is not inside one device allocation")

    # -- copies --------------------------------------------------------------------------------
    def _count(self, kind: str) -> None:
        with self._lock:  # tests count copies made from several executor threads
            self.copies[kind] += 1

    def htod(self, ptr: int, array) -> None:
        a = np.ascontiguousarray(array)
        self._check(ptr, a.nbytes, "htod")
        ctypes.memmove(ptr, a.ctypes.data, a.nbytes)
        self._count("htod")

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        self._check(ptr, array.nbytes, "dtoh")
        ctypes.memmove(array.ctypes.data, ptr, array.nbytes)
        self._count("dtoh")

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        self._check(dst, nbytes, "dtod")
        self._check(src, nbytes, "dtod")
        ctypes.memmove(dst, src, nbytes)
        self._count("dtod")

    def can_access_peer(self, other) -> bool:
        return isinstance(other, EmuDriver) and other is not self

    def peer_copy(self, dst_driver, dst: int, src: int, nbytes: int) -> None:
        self._check(src, nbytes, "peer copy source")
        dst_driver._check(dst, nbytes, "peer copy destination")
        ctypes.memmove(dst, src, nbytes)
        self._count("peer")

    # -- ordering (everything has already happened) ----------------------------------------------
    def record(self):
        return _Event()

    def wait(self, event) -> None:
        pass

    @staticmethod
    def event_done(event) -> bool:
        return True

    def event_sync(self, event) -> None:
        if self._failures or self._async_error:
            self._raise_pending("waiting for the device")

    def synchronize(self) -> None:
        if self._failures or self._async_error:
            self._raise_pending("waiting for the device")

    # -- code ----------------------------------------------------------------------------------
    def compile(self, source: str, options: list[str], signatures: dict | None = None) -> EmuModule:
        if signatures:  # a generated source (fusion.py): its functions are named, not in the catalog
            refs = [catalog.KernelRef("<generated>", (), name, sig) for name, sig in signatures.items()]
        else:
            refs = _refs_for(source, options)
        defines = [o for o in options if o.startswith("-D")]
        text = source + "\n" + trampolines(refs)
        cxx = compiler()
        if cxx is None:
            raise DriverError(unavailable_reason())
        key = hashlib.sha256((SHIM.read_text() + text + " ".join(defines) + cxx).encode()).hexdigest()[:24]
        os.makedirs(self.cache_dir, exist_ok=True)
        so = os.path.join(self.cache_dir, f"emu-{key}.so")
        if not os.path.exists(so):
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "module.cpp")
                Path(src).write_text(f'#include "{SHIM}"\n' + text)
                tmp_so = os.path.join(tmp, "module.so")
                cmd = [cxx, "-std=c++17", "-O1", "-fopenmp", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                       *defines, "-o", tmp_so, src]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise DriverError(f"emulator compile failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
                shutil.move(tmp_so, so + f".{os.getpid()}")
                os.replace(so + f".{os.getpid()}", so)
        return EmuModule(ctypes.CDLL(so), refs, so)

    def function(self, module: EmuModule, name: str, arg_format: str) -> EmuFunction:
        return EmuFunction(module, name, arg_format)

    def launch(self, function: EmuFunction, grid: tuple, block: tuple, args: tuple) -> None:
        if self._async_error is not None:  # a sticky error: every later call reports it
            raise LaunchError(f"grid {tuple(grid)}, block {tuple(block)}: {self._async_error}")
        if self._failures:
            msg = self._take_failure("launch")
            if msg is not None:
                raise LaunchError(f"grid {tuple(grid)}, block {tuple(block)}: {msg}")
            msg = self._take_failure("async")
            if msg is not None:
                self._async_error = msg
                self.launches += 1
                return
        gx, bx = int(grid[0]), int(block[0])
        if not (0 < gx < 2**31 and 0 < bx <= 1024) or tuple(grid[1:]) not in ((), (1,), (1, 1)) \
                or tuple(block[1:]) not in ((), (1,), (1, 1)):
            raise LaunchError(f"grid {tuple(grid)}, block {tuple(block)}: invalid launch configuration "
                              "(emulated CUDA_ERROR_INVALID_VALUE)")
        with _LAUNCH_LOCK:
            rc = function.fn(gx, bx, *function.pack(args))
        if rc:
            raise LaunchError(f"grid {tuple(grid)}, block {tuple(block)}: the OpenMP runtime did not give "
                              f"{bx} threads per block (emulator)")
        self.launches += 1

    def open_blas(self):
        return EmuBlas(self)

    def describe(self) -> str:
        return f"{self.name} (the plugin's kernels on the CPU via g++/OpenMP, for tests)"


def _refs_for(source: str, options: list[str]):
    """The catalog's functions of the module whose source and defines these are."""
    defines = tuple(sorted(tuple(o[2:].split("=", 1)) for o in options if o.startswith("-D")))
    for (file, mod_defines), refs in catalog.modules().items():
        if mod_defines == defines and source_text(file) == source:
            return refs
    raise DriverError(f"the emulator knows no catalog module with defines {defines}")


class EmuBlas:
    """cuBLAS GEMM semantics (column-major, leading dimensions, transposes) in NumPy."""

    def __init__(self, driver: EmuDriver):
        self.driver = driver
        self.calls = 0

    def _matrix(self, ptr, dtype, rows, cols, ld):
        """The column-major ``rows x cols`` matrix at ``ptr`` with leading dimension ``ld``."""
        if not rows or not cols:
            return np.zeros((rows, cols), dtype)
        itemsize = np.dtype(dtype).itemsize
        nbytes = (ld * (cols - 1) + rows) * itemsize
        self.driver._check(ptr, nbytes, "gemm operand")
        raw = np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype)
        return np.lib.stride_tricks.as_strided(raw, (rows, cols), (itemsize, ld * itemsize))

    def gemm(self, dtype: str, call, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        ptrs = {"a": a_ptr, "b": b_ptr}
        m, n, k = call.m, call.n, call.k
        # op(A) is m x k, op(B) is k x n; A is stored m x k (N) or k x m (T)
        a = self._matrix(ptrs[call.first], dtype, *((m, k) if call.transa == 0 else (k, m)), call.lda)
        b = self._matrix(ptrs[call.second], dtype, *((k, n) if call.transb == 0 else (n, k)), call.ldb)
        if call.lda < (m if call.transa == 0 else k) or call.ldb < (k if call.transb == 0 else n) or call.ldc < m:
            raise DriverError("CUBLAS_STATUS_INVALID_VALUE: a leading dimension is too small")
        opa = a if call.transa == 0 else a.T
        opb = b if call.transb == 0 else b.T
        msg = self.driver._take_failure("gemm") if self.driver._failures else None
        if msg is not None:
            raise LaunchError(f"cublas{'S' if dtype == 'float32' else 'D'}gemm_v2 (m={m}, n={n}, k={k}): {msg}")
        c = self._matrix(c_ptr, dtype, m, n, call.ldc)
        c[...] = opa @ opb
        self.calls += 1
        self.driver.launches += 1


class EmulatorPlugin:
    """A tensorweave plugin of ``count`` emulated GPUs (device type ``device_type``) with the
    CUDA plugin's kernels and allocators; ``capacity`` bytes of memory each."""

    def __init__(self, count: int = 2, capacity: int = 256 << 20, device_type: str = "CUDAEMU"):
        from tensorweave_cuda.device import CUDADeviceFactory

        self.device_type = device_type
        self.factory = CUDADeviceFactory(count, lambda i: EmuDriver(i, capacity=capacity), device_type)

    @hookimpl
    def tensorweave_device_factories(self):
        return [self.factory]

    @hookimpl
    def tensorweave_register_kernels(self, registry):
        from tensorweave_cuda import kernels

        kernels.register_all(registry, self.device_type)

    @hookimpl
    def tensorweave_register_allocators(self, registry):
        from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator

        registry.register(self.device_type, "default", CUDAAllocator.for_device)
        registry.register(self.device_type, "pool", CUDAPoolAllocator.for_device)

    @hookimpl
    def tensorweave_register_fusers(self, registry):
        from tensorweave_cuda.fusion import CUDAFuser

        registry.register(self.device_type, CUDAFuser())


def plugin(count: int = 1, capacity: int = 1 << 30, device_type: str = "CUDAEMU") -> EmulatorPlugin:
    """Register emulated GPUs with tensorweave (outside the tests' fixtures). DriverError when
    the emulator cannot run here (no C++ compiler)."""
    from tensorweave import plugins

    reason = unavailable_reason()
    if reason is not None:
        raise DriverError(reason)
    plug = EmulatorPlugin(count, capacity, device_type)
    plugins.register_plugin(plug, name=f"cuda-emulator-{device_type.lower()}",
                            distribution="tensorweave_cuda.testing.emulator")
    return plug
