"""Entry point of the OpenCL plugin: implements the tensorweave hooks.

Whether to register anything is decided cheaply, without importing pyopencl or creating a
context (this runs whenever a process loads its plugins): pyopencl must be installed and
the ICD loader must have at least one vendor file. Devices are enumerated, and contexts
built, only when a Session creates its devices. When either piece is missing the plugin
registers nothing and its status line says which and how to fix it.
"""

from __future__ import annotations

import importlib.util
import os

from tensorweave.plugins import hookimpl

ICD_DIR = "/etc/OpenCL/vendors"


def icd_files() -> list[str]:
    """The OpenCL ICD files the ICD loader would read (``OCL_ICD_VENDORS`` overrides the dir)."""
    where = os.environ.get("OCL_ICD_VENDORS") or ICD_DIR
    if os.path.isfile(where):
        return [os.path.basename(where)]
    try:
        return sorted(f for f in os.listdir(where) if f.endswith(".icd"))
    except OSError:
        return []


def missing() -> str | None:
    """Why the plugin cannot work here, or None when it can."""
    if importlib.util.find_spec("pyopencl") is None:
        return "pyopencl is not installed (pip install pyopencl)"
    if not icd_files():
        where = os.environ.get("OCL_ICD_VENDORS") or ICD_DIR
        return (f"no OpenCL ICD in {where}: install an OpenCL driver, e.g. "
                "`apt-get install pocl-opencl-icd` for PoCL on the CPU")
    return None


def status() -> str:
    why = missing()
    if why is not None:
        return f"inactive, registers nothing: {why}"
    return f"OPENCL devices through pyopencl; OpenCL ICDs: {', '.join(icd_files())}"


@hookimpl
def tensorweave_device_factories():
    if missing() is not None:
        return []
    from tensorweave_opencl.device import OpenCLDeviceFactory

    return [OpenCLDeviceFactory()]


@hookimpl
def tensorweave_register_kernels(registry):
    if missing() is not None:
        return
    from tensorweave_opencl import kernels

    kernels.register_all(registry)


@hookimpl
def tensorweave_register_allocators(registry):
    if missing() is not None:
        return
    from tensorweave_opencl.allocator import CLAllocator, CLPoolAllocator

    registry.register("OPENCL", "default", CLAllocator.for_device)
    registry.register("OPENCL", "pool", CLPoolAllocator.for_device)


@hookimpl
def tensorweave_register_fusers(registry):
    if missing() is not None:
        return
    from tensorweave_opencl.fusion import OpenCLFuser

    registry.register("OPENCL", OpenCLFuser())


@hookimpl
def tensorweave_plugin_status():
    return status()


@hookimpl
def tensorweave_doctor():
    where = os.environ.get("OCL_ICD_VENDORS") or ICD_DIR
    icds = icd_files()
    pyopencl = "installed" if importlib.util.find_spec("pyopencl") is not None else "not installed"
    out = [("OpenCL", (f"ICDs in {where}: {', '.join(icds)}" if icds else f"no ICD in {where}") + f"; pyopencl {pyopencl}")]
    if not icds:
        out.append(("hint", "no OpenCL ICD: `apt-get install pocl-opencl-icd` gives a CPU OpenCL platform "
                            "(tensorweave-opencl's tests then run on any machine)."))
    return out
