"""Compiled kernels: a per-device cache of modules (one per ``.cu`` file and defines) and of
prepared functions, and ``launch`` with the grid the caller planned.

A module is compiled the first time one of its functions is asked for, from the source with
``common.cuh`` pasted in (``kernels.source_text``) and the variant's ``-D`` flags; PyCUDA
also keeps compiled cubins in its on-disk cache, keyed by that text, so a later process
does not run nvcc again.
"""

from __future__ import annotations

import threading

from tensorweave_cuda.kernels import catalog, source_text


class CompiledKernel:
    __slots__ = ("ref", "function", "driver", "fmt")

    def __init__(self, ref: catalog.KernelRef, function, driver, fmt: str):
        self.ref = ref
        self.function = function
        self.driver = driver
        self.fmt = fmt

    def __call__(self, grid: tuple, block: tuple, *args) -> None:
        self.driver.launch(self.function, grid, block, args)

    def __repr__(self):
        return f"<CompiledKernel {self.ref.name}({self.fmt})>"


class ProgramCache:
    """Modules and functions of one device, compiled on first use. Thread-safe."""

    def __init__(self, driver):
        self.driver = driver
        self._modules: dict = {}
        self._kernels: dict = {}
        self._lock = threading.Lock()

    def kernel(self, ref: catalog.KernelRef, dt: catalog.DType | None = None) -> CompiledKernel:
        k = self._kernels.get(ref)
        if k is not None:
            return k
        with self._lock:
            k = self._kernels.get(ref)
            if k is None:
                mod = self._modules.get(ref.module_key)
                if mod is None:
                    mod = self._modules[ref.module_key] = self.driver.compile(source_text(ref.file), ref.options())
                fmt = catalog.expand_sig(ref.sig, dt)
                k = self._kernels[ref] = CompiledKernel(ref, self.driver.function(mod, ref.name, fmt), self.driver, fmt)
        return k

    def __len__(self):
        return len(self._kernels)
