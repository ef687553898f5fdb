"""What every kernel module shares: dtype sets for registration, building a node's
launchers, reading host-memory inputs, and the shape arithmetic of broadcasting and strided
copies (done on the host, cached per shape, handed to kernels as small int tables)."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave_opencl import program
from tensorweave_opencl.buffer import CLTensor

OPENCL = "OPENCL"
FLOAT = ["float32", "float64"]
INT = ["int32", "int64", "uint8"]
NUMERIC = FLOAT + INT
ALL = NUMERIC + ["bool"]
INDEX = ["int32", "int64"]

# Kernel argument dtypes for Launcher(scalars=...): None is a buffer.
BUF = None
I32 = np.int32

_E = errors.InvalidArgumentError


def what(ctx) -> str:
    return f"{ctx.op_type} node '{ctx.node_name}' on {ctx.device.name}"


def launcher(ctx, name: str, kernel: str, scalars: list, defines: dict | None = None):
    """A Launcher for ``kernel`` of kernels/``name`` built with ``defines`` for ctx's device."""
    return program.launcher(ctx.device.runtime, name, kernel, scalars, defines, what=what(ctx))


def host(value) -> np.ndarray:
    """A host-memory input as an ndarray (the executor hands these over on the host; a
    device tensor here would mean a missing host_memory declaration)."""
    if isinstance(value, CLTensor):
        raise errors.InternalError("a host-memory input arrived in device memory")
    return np.asarray(value)


def int_list(ctx, value, what_: str) -> list[int]:
    arr = host(value)
    if arr.ndim != 1:
        raise ctx.error(_E, f"{what_} must be a vector, got shape {arr.shape}")
    return [int(v) for v in arr.tolist()]


def num_elements(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape) -> list[int]:
    out = [0] * len(shape)
    s = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = s
        s *= shape[i]
    return out


def broadcast_shape(ctx, sa: tuple, sb: tuple) -> tuple:
    n = max(len(sa), len(sb))
    a = (1,) * (n - len(sa)) + tuple(sa)
    b = (1,) * (n - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ctx.error(_E, f"incompatible shapes for broadcasting: {tuple(sa)} and {tuple(sb)}")
    return tuple(out)


def broadcast_strides(shape: tuple, out_shape: tuple) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out_shape`` (0 where broadcast)."""
    lead = len(out_shape) - len(shape)
    full = (1,) * lead + tuple(shape)
    st = contiguous_strides(full)
    return [0 if full[i] == 1 and out_shape[i] != 1 else st[i] for i in range(len(out_shape))]


def collapse(dims, *strides_list):
    """Drop size-1 dimensions and merge neighbours that every operand walks contiguously:
    the same element order with fewer index computations per element."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    dims = [dims[i] for i in keep]
    strides_list = [[s[i] for i in keep] for s in strides_list]
    if not dims:
        return [], [[] for _ in strides_list]
    out_d = [dims[0]]
    out_s = [[s[0]] for s in strides_list]
    for i in range(1, len(dims)):
        if all(os_[-1] == s[i] * dims[i] for os_, s in zip(out_s, strides_list)):
            out_d[-1] *= dims[i]
            for os_, s in zip(out_s, strides_list):
                os_[-1] = s[i]
        else:
            out_d.append(dims[i])
            for os_, s in zip(out_s, strides_list):
                os_.append(s[i])
    return out_d, out_s


class StridedCopy:
    """out[o_off + sum(i_d * os_d)] = x[x_off + sum(i_d * xs_d)] over ``dims``: the one
    kernel behind BroadcastTo, Tile, Transpose, Slice and ConcatV2 (kernels/array.cl)."""

    def __init__(self, ctx, dtype):
        self.device = ctx.device
        self.launch = launcher(ctx, "array.cl", "strided_copy", [BUF, BUF, I32, BUF],
                               {"T": program.ctype(dtype)})

    def __call__(self, out: CLTensor, x: CLTensor, dims, x_strides, out_strides, x_off=0, out_off=0):
        dims, (xs, os_) = collapse(list(dims), list(x_strides), list(out_strides))
        n = num_elements(dims)
        if n == 0:
            return
        meta = self.device.runtime.int_table([len(dims), *dims, *xs, *os_, x_off, out_off])
        self.launch.run(n, out.buf, x.buf, n, meta)
