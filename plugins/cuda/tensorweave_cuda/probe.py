"""What this machine offers the CUDA plugin, found cheaply (no PyCUDA import, no context).

The probe runs whenever a process loads its plugins. It dlopens the driver library and asks
its version (``cuDriverGetVersion`` needs no ``cuInit``); only when the driver is there does
it call ``cuInit`` and count the devices. It looks for pycuda without importing it, for
``nvcc`` on PATH (PyCUDA's ``SourceModule`` compiles the kernels with it at run time) and for
the cuBLAS library file. It does not use ``ctypes.util.find_library``, which spawns
``ldconfig`` on Linux.

``CudaProbe.reason`` is None when the plugin can run, else the one thing that stops it, in
words a user can act on (the plugin's status line and the GPU tests' skip reason).
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import shutil
import sys


def driver_names() -> list[str]:
    if sys.platform == "win32":
        return ["nvcuda.dll"]
    if sys.platform == "darwin":
        return ["libcuda.dylib"]
    return ["libcuda.so.1", "libcuda.so"]


@dataclasses.dataclass
class CudaProbe:
    driver_library: str | None = None    # the driver library that loaded, or None
    driver_version: str | None = None    # e.g. "12.4", from cuDriverGetVersion
    driver_error: str | None = None      # why no driver library loaded
    pycuda: bool = False
    device_count: int | None = None      # from cuDeviceGetCount (None: not asked)
    device_names: tuple = ()
    init_error: str | None = None        # cuInit / cuDeviceGetCount failure
    nvcc: str | None = None              # nvcc on PATH
    cublas: str | None = None            # the cuBLAS library file found

    @property
    def driver(self) -> bool:
        return self.driver_library is not None

    @property
    def reason(self) -> str | None:
        """Why the plugin cannot run here (None: it can)."""
        if not self.driver:
            name = driver_names()[0]
            err = self.driver_error or ""
            detail = "" if (not err or "cannot open shared object file" in err) else f" ({err})"
            return f"no CUDA driver: {name} not found{detail}"
        if self.init_error:
            return f"CUDA driver {self.driver_library} found but {self.init_error}"
        if self.device_count == 0:
            return "no CUDA device: the driver reports 0 devices"
        if not self.pycuda:
            return ("pycuda is not installed (pip install 'tensorweave-cuda[gpu]' on a machine with the "
                    "CUDA toolkit)")
        if not self.nvcc:
            return "nvcc not found on PATH (PyCUDA's SourceModule compiles the kernels with it at run time)"
        return None


def _error_name(lib, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except (AttributeError, OSError):
        pass
    return f"CUDA error {code}"


def probe() -> CudaProbe:
    p = CudaProbe(pycuda=importlib.util.find_spec("pycuda") is not None, nvcc=shutil.which("nvcc"))
    handle = None
    for name in driver_names():
        try:
            handle = ctypes.CDLL(name)
        except OSError as e:
            p.driver_error = p.driver_error or str(e)
            continue
        p.driver_library, p.driver_error = name, None
        break
    if handle is None:
        return p
    try:
        v = ctypes.c_int(0)
        if handle.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
            p.driver_version = f"{v.value // 1000}.{v.value % 1000 // 10}"
        rc = handle.cuInit(0)
        if rc != 0:
            p.init_error = f"cuInit failed: {_error_name(handle, rc)}"
            return p
        n = ctypes.c_int(0)
        rc = handle.cuDeviceGetCount(ctypes.byref(n))
        if rc != 0:
            p.init_error = f"cuDeviceGetCount failed: {_error_name(handle, rc)}"
            return p
        p.device_count = n.value
        names = []
        for i in range(n.value):
            dev, buf = ctypes.c_int(0), ctypes.create_string_buffer(256)
            if handle.cuDeviceGet(ctypes.byref(dev), i) == 0 and handle.cuDeviceGetName(buf, 256, dev) == 0:
                names.append(buf.value.decode(errors="replace"))
            else:
                names.append("?")
        p.device_names = tuple(names)
    except (AttributeError, OSError) as e:
        p.init_error = f"the driver library misbehaved: {e}"
        return p
    from tensorweave_cuda.blas import find_cublas

    p.cublas = find_cublas()
    return p


def status(p: CudaProbe) -> str:
    """The plugin's one-line status (``tensorweave plugins``)."""
    pyc = f"pycuda {'installed' if p.pycuda else 'not installed'}"
    if p.reason is not None:
        drv = ""
        if p.driver:
            drv = f"; driver {p.driver_library}" + (f" (API {p.driver_version})" if p.driver_version else "")
        return f"registers nothing: {p.reason}{drv}; {pyc}"
    devs = ", ".join(f"GPU:{i} {n}" for i, n in enumerate(p.device_names)) or f"{p.device_count} device(s)"
    blas = f"cuBLAS {p.cublas}" if p.cublas else "cuBLAS not found, MatMul stays on the CPU (pip install nvidia-cublas-cu12)"
    api = f" (API {p.driver_version})" if p.driver_version else ""
    return f"{devs}; CUDA driver {p.driver_library}{api}; {pyc}; nvcc {p.nvcc}; {blas}"
