"""Entry point of the CPU plugin: implements the tensorweave hooks."""

from __future__ import annotations

from tensorweave.plugins import hookimpl
from tensorweave_cpu import device, fusion, heap, kernels, onednn, pool


@hookimpl
def tensorweave_device_factories():
    return [device.CPUDeviceFactory()]


@hookimpl
def tensorweave_register_kernels(registry):
    kernels.register_all(registry)


@hookimpl
def tensorweave_register_allocators(registry):
    registry.register("CPU", "default", device.CPUAllocator.for_device)
    registry.register("CPU", "pool", pool.PoolAllocator.for_device)


@hookimpl
def tensorweave_register_fusers(registry):
    # Element-wise fusion needs numba (the `fusion` extra); without it the CPU fuses nothing.
    if fusion.numba_available():
        registry.register("CPU", fusion.CPUFuser())


@hookimpl
def tensorweave_doctor():
    import importlib.metadata as md

    lines = [("CPU heap", heap.tune())]
    if fusion.numba_available():
        lines.append(("CPU fusion", f"element-wise fusion compiles with numba {md.version('numba')}"))
    else:
        lines += [("CPU fusion", "off: numba is not installed"),
                  ("hint", "element-wise fusion on the CPU needs numba: `pip install tensorweave-cpu[fusion]`")]
    if onednn.enabled():
        lines.append(("CPU convolutions", f"oneDNN {onednn.version()} (float32 Conv2D and its gradients)"))
    elif onednn.available():
        lines.append(("CPU convolutions", "im2col + BLAS: oneDNN is installed but TENSORWEAVE_ONEDNN=0"))
    else:
        lines += [("CPU convolutions", "im2col + BLAS: oneDNN is not installed"),
                  ("hint", "faster float32 convolutions: `pip install tensorweave-cpu[onednn]` (x86-64 Linux)")]
    return lines
