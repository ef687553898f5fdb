"""Building OpenCL C programs and launching their kernels.

Kernels are hand-written OpenCL C in ``kernels/*.cl``. A source is specialised with
preprocessor defines (element types, the expression an element-wise kernel applies, tile
sizes) and compiled once per (source, defines) per device context; every node that needs
the same program shares it. A compiler error becomes a tw error carrying the compiler's
log and the node it was built for.
"""

from __future__ import annotations

import re
import threading
import warnings
from pathlib import Path

import numpy as np

from tensorweave.framework import errors

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

# NumPy dtype -> OpenCL C type (also the dtypes an OPENCL device holds). bool is one byte
# holding 0 or 1, as in NumPy. uint16 is the bfloat16 form of compressed transfers
# (kernels/compression.py).
CTYPES = {
    np.dtype(np.float32): "float", np.dtype(np.float64): "double",
    np.dtype(np.int32): "int", np.dtype(np.int64): "long",
    np.dtype(np.int16): "short", np.dtype(np.int8): "char",
    np.dtype(np.uint8): "uchar", np.dtype(np.bool_): "uchar",
    np.dtype(np.uint16): "ushort",
}

_sources: dict[str, str] = {}

LOCAL_SIZE = 64  # work-group size of every 1-D launch (see Launcher.run)


def ctype(dtype) -> str:
    dt = np.dtype(dtype)
    try:
        return CTYPES[dt]
    except KeyError:
        raise errors.UnimplementedError(f"the OpenCL device has no kernels for dtype {dt.name}") from None


def source(name: str) -> str:
    """The text of ``kernels/<name>`` (read once)."""
    text = _sources.get(name)
    if text is None:
        text = _sources[name] = (KERNEL_DIR / name).read_text()
    return text


def _define_lines(defines: dict) -> str:
    # As #define lines rather than -D options: expressions contain spaces, which some
    # platforms' option parsers split on.
    return "".join(f"#define {k}\n" if v is None or v is True else f"#define {k} {v}\n"
                   for k, v in sorted(defines.items()))


def build(runtime, name: str, defines: dict | None = None, *, what: str = "", text: str | None = None):
    """The program ``name`` (a file in kernels/, or ``text`` when given) built with
    ``defines`` for ``runtime``'s context, from the cache when built before.

    ``what`` names the node the program is for, for the error message. A program that
    uses ``double`` gets the fp64 pragma; on a device without fp64 that is an
    UnimplementedError rather than a compiler error.
    """
    defines = dict(defines or {})
    body = text if text is not None else source(name)
    key = (name, body, tuple(sorted((k, str(v)) for k, v in defines.items())))
    prg = runtime.programs.get(key)
    if prg is not None:
        return prg
    uses_double = any(v == "double" for v in defines.values())
    if uses_double and not runtime.has_fp64:
        raise errors.UnimplementedError(
            f"{what + ': ' if what else ''}{runtime.name} does not support double precision (cl_khr_fp64)")
    import pyopencl as cl

    prelude = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if uses_double else ""
    prelude += _define_lines(defines) + "#line 1\n"  # compiler messages keep the file's line numbers
    shown = ", ".join(f"{k}={v}" if v is not None else k for k, v in sorted(defines.items())) or "no defines"
    with runtime.lock:
        prg = runtime.programs.get(key)
        if prg is not None:
            return prg
        try:
            with warnings.catch_warnings():
                # A successful build's log (notes, warnings) is not the user's concern.
                warnings.simplefilter("ignore", cl.CompilerWarning)
                prg = cl.Program(runtime.context, prelude + body).build(options=["-w"])
        except cl.Error as e:
            log = _build_log(e, name)
            raise errors.InternalError(
                f"{what + ': ' if what else ''}building OpenCL program {name} with "
                f"{shown} for {runtime.name} failed; compiler log:\n{log}") from None
        runtime.programs[key] = prg
    return prg


def _build_log(e, name: str) -> str:
    """The compiler's log from a failed build (pyopencl puts it in the message), with the
    temporary file the platform compiled named after the source it came from."""
    text = str(e).strip() or repr(e)
    return re.sub(r"\S*tempfile_\w+\.cl", name, text)


class Launcher:
    """One kernel of a built program, ready to enqueue on the device's queue.

    Each node gets its own ``cl.Kernel`` (kernel arguments are per kernel object), and a
    lock: the same node may run in two threads when two Session.run calls share a plan.
    ``scalars`` gives the NumPy dtype of each argument that is a scalar (None for buffers).
    """

    __slots__ = ("kernel", "queue", "lock", "name", "_enqueue", "local")

    def __init__(self, runtime, program, kernel_name: str, scalars: list):
        import pyopencl as cl

        self.kernel = cl.Kernel(program, kernel_name)
        self.kernel.set_scalar_arg_dtypes(scalars)
        self.queue = runtime.queue
        self.lock = threading.Lock()
        self.name = kernel_name
        self._enqueue = cl.enqueue_nd_range_kernel
        self.local = min(LOCAL_SIZE, runtime.max_work_group_size)

    def __call__(self, global_size, local_size, *args):
        with self.lock:
            self.kernel.set_args(*args)
            self._enqueue(self.queue, self.kernel, global_size, local_size)

    def run(self, n: int, *args):
        """A 1-D launch over ``n`` work items (the kernel ignores ids >= n). The local size
        is fixed, so the global size is rounded up to a multiple of it: PoCL compiles a
        kernel once per local size, and would compile again for each new ``n`` if it
        chose the local size itself."""
        ls = self.local
        with self.lock:
            self.kernel.set_args(*args)
            self._enqueue(self.queue, self.kernel, ((n + ls - 1) // ls * ls,), (ls,))


def launcher(runtime, name: str, kernel: str, scalars: list, defines: dict | None = None, what: str = ""):
    """Build (or reuse) program ``name`` with ``defines`` and return a Launcher for ``kernel``."""
    return Launcher(runtime, build(runtime, name, defines, what=what), kernel, scalars)
