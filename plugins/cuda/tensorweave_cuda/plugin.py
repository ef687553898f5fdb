"""Entry point of the CUDA plugin. A skeleton: it registers nothing and says why.

The status probe runs whenever a process loads its plugins, so it stays cheap: it dlopens
the driver library and asks its version (``cuDriverGetVersion`` needs no ``cuInit`` and
creates no context), and looks for pycuda without importing it. It does not use
``ctypes.util.find_library``, which spawns ``ldconfig`` on Linux.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import sys

from tensorweave.plugins import hookimpl


def _driver_names() -> list[str]:
    if sys.platform == "win32":
        return ["nvcuda.dll"]
    if sys.platform == "darwin":
        return ["libcuda.dylib"]
    return ["libcuda.so.1", "libcuda.so"]


@dataclasses.dataclass
class CudaProbe:
    driver_library: str | None      # the driver library that loaded, or None
    driver_version: str | None      # e.g. "12.4", from cuDriverGetVersion
    driver_error: str | None        # why no driver library loaded
    pycuda: bool

    @property
    def driver(self) -> bool:
        return self.driver_library is not None


def probe() -> CudaProbe:
    lib = version = None
    error = None
    for name in _driver_names():
        try:
            handle = ctypes.CDLL(name)
        except OSError as e:
            error = error or str(e)
            continue
        lib = name
        try:
            v = ctypes.c_int(0)
            if handle.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
                version = f"{v.value // 1000}.{v.value % 1000 // 10}"
        except (AttributeError, OSError):
            pass
        break
    return CudaProbe(lib, version, None if lib else error, importlib.util.find_spec("pycuda") is not None)


def status(p: CudaProbe | None = None) -> str:
    p = p or probe()
    if p.driver:
        drv = f"CUDA driver {p.driver_library} found" + (f" (API {p.driver_version})" if p.driver_version else "")
    else:
        drv = f"no CUDA driver library ({p.driver_error or 'libcuda not found'})"
    return ("skeleton: CUDA kernels and devices not implemented yet, registers nothing "
            f"({drv}; pycuda {'installed' if p.pycuda else 'not installed'})")


@hookimpl
def tensorweave_plugin_status():
    return status()
