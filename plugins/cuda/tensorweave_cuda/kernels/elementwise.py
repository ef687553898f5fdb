"""Element-wise ops: unary, binary with NumPy broadcasting, comparisons, logic, Cast, AddN.

float32/float64/int64/bool run in ``elementwise.cu``/``cast.cu`` kernels. int32 follows
TensorFlow's GPU convention: int32 element-wise ops take and give host memory (they are
shape arithmetic: sizes, axes, counts), so a chain like Shape -> Maximum -> FloorDiv ->
Reshape never copies to the device nor waits for it; their values come back as host-backed
tensors, copied to the device only if a device kernel reads them.
"""

from __future__ import annotations

import numpy as np

from tensorweave_cuda import plan
from tensorweave_cuda.kernels import catalog
from tensorweave_cuda.kernels.util import E, launch
from tensorweave_cuda.kernels.util import register as reg_kernel

DEVICE_NUMERIC = ("float32", "float64", "int64")
HOST_INT = ("int32",)


def _unary(op):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.input_dtypes[0])
        ref = catalog.unary_kernel(op, dt)

        def unary(x):
            y = dev.empty(x.shape, x.dtype)
            n = x.size
            launch(dev, ref, n, x.ptr, y.ptr, n)
            return y
        return unary
    return factory


def _binary(op):
    def factory(ctx):
        dev = ctx.device
        dt = catalog.dtype(ctx.input_dtypes[0])
        out_dt = ctx.output_dtypes[0].np_dtype
        flat = catalog.binary_kernel(op, dt, False)
        bcast = catalog.binary_kernel(op, dt, True)
        plans: dict = {}

        def binary(x, y):
            key = (x.shape, y.shape)
            p = plans.get(key)
            if p is None:
                try:
                    p = plan.plan_binary(*key)
                except plan.BroadcastError as e:
                    raise ctx.error(E, str(e)) from None
                if len(plans) < 64:
                    plans[key] = p
            z = dev.empty(p.out_shape, out_dt)
            if p.flat:
                launch(dev, flat, p.n, x.ptr, y.ptr, z.ptr, p.n)
            else:
                launch(dev, bcast, p.n, x.ptr, y.ptr, z.ptr, p.n, *p.struct)
            return z
        return binary
    return factory


# ---------------------------------------------------------------------------------------
# int32 in host memory (NumPy, with the CPU kernels' semantics)
def _int_div(ctx, truncate):
    def f(x, y):
        if np.any(y == 0):
            raise ctx.error(E, "integer division by zero")
        q = np.floor_divide(x, y)
        if truncate:
            q = q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0)))
        return q
    return f


def _int_mod(ctx):
    def f(x, y):
        if np.any(y == 0):
            raise ctx.error(E, "integer division by zero")
        return np.mod(x, y)
    return f


_HOST_UNARY = {
    "Neg": np.negative, "Abs": np.absolute, "Square": np.square, "Sign": np.sign,
    "Relu": lambda x: np.maximum(x, 0), "Relu6": lambda x: np.clip(x, 0, 6),
}
_HOST_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum, "Minimum": np.minimum,
    "SquaredDifference": lambda x, y: np.square(x - y), "ReluGrad": lambda g, f: g * (f > 0),
    "Relu6Grad": lambda g, f: g * ((f > 0) & (f < 6)),
    "Equal": np.equal, "NotEqual": np.not_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Greater": np.greater, "GreaterEqual": np.greater_equal,
}
_HOST_BINARY_CTX = {"Div": lambda ctx: _int_div(ctx, True), "RealDiv": lambda ctx: _int_div(ctx, True),
                    "FloorDiv": lambda ctx: _int_div(ctx, False), "FloorMod": _int_mod}


def _host(fn_of_ctx):
    def factory(ctx):
        dev = ctx.device
        fn = fn_of_ctx(ctx)
        out_dt = ctx.output_dtypes[0].np_dtype

        def on_host(*xs):
            with np.errstate(all="ignore"):
                try:
                    r = fn(*(np.asarray(x) for x in xs))
                except ValueError as e:
                    raise ctx.error(E, str(e)) from None
            return dev.host_tensor(np.asarray(r, dtype=out_dt))
        return on_host
    return factory


# ---------------------------------------------------------------------------------------
def _cast(ctx):
    dev = ctx.device
    src, dst = catalog.dtype(ctx.attrs["SrcT"]), catalog.dtype(ctx.attrs["DstT"])
    if src.name == dst.name:
        return lambda x: x
    ref = catalog.cast_kernel(src, dst)

    def cast(x):
        h = x.host_value
        if h is not None:  # shape arithmetic: stay on the host
            if dst.kind == "bool":
                return dev.host_tensor(np.not_equal(h, 0))
            if src.kind == "float" and dst.kind == "int":
                with np.errstate(all="ignore"):
                    return dev.host_tensor(np.trunc(h).astype(dst.np))
            return dev.host_tensor(h.astype(dst.np))
        y = dev.empty(x.shape, dst.np)
        launch(dev, ref, x.size, x.ptr, y.ptr, x.size)
        return y
    return cast


def _add_n(ctx):
    dev = ctx.device
    dt = catalog.dtype(ctx.attrs["T"])
    flat = catalog.binary_kernel("Add", dt, False)

    def add_n(*xs):
        if len(xs) == 1:
            return xs[0]
        shape = xs[0].shape
        for x in xs[1:]:
            if x.shape != shape:
                raise ctx.error(E, f"AddN inputs must have one shape, got {[x.shape for x in xs]}")
        out = dev.empty(shape, xs[0].dtype)
        n = out.size
        launch(dev, flat, n, xs[0].ptr, xs[1].ptr, out.ptr, n)
        for x in xs[2:]:  # accumulating into our own fresh buffer: element i reads and writes only i
            launch(dev, flat, n, out.ptr, x.ptr, out.ptr, n)
        return out
    return add_n


def register(reg, device_type):
    for op, (_, allowed) in catalog.UNARY.items():
        dev_types = [t for t in allowed if t != "int32"]
        if op == "LogicalNot":
            reg_kernel(reg, op, device_type, _unary(op))
            continue
        reg_kernel(reg, op, device_type, _unary(op), dev_types)
        if "int32" in allowed and op in _HOST_UNARY:
            reg_kernel(reg, op, device_type, _host(lambda ctx, f=_HOST_UNARY[op]: f), HOST_INT,
                     host_memory=("x", "features"), activate=False)
    for op, (_, allowed) in catalog.BINARY.items():
        if op in ("LogicalAnd", "LogicalOr"):
            reg_kernel(reg, op, device_type, _binary(op))
            continue
        reg_kernel(reg, op, device_type, _binary(op), [t for t in allowed if t != "int32"])
        if "int32" in allowed:
            fn = _HOST_BINARY_CTX[op] if op in _HOST_BINARY_CTX else (lambda ctx, f=_HOST_BINARY[op]: f)
            reg_kernel(reg, op, device_type, _host(fn), HOST_INT,
                     host_memory=("x", "y", "gradients", "features"), activate=False)
    for op in catalog.COMPARE:
        reg_kernel(reg, op, device_type, _binary(op), [t for t in catalog.COMPARE_DTYPES if t != "int32"])
        reg_kernel(reg, op, device_type, _host(lambda ctx, f=_HOST_BINARY[op]: f), HOST_INT,
                 host_memory=("x", "y"), activate=False)
    reg_kernel(reg, "Cast", device_type, _cast, constraints={"SrcT": catalog.ALL, "DstT": catalog.ALL})
    reg_kernel(reg, "AddN", device_type, _add_n, DEVICE_NUMERIC + HOST_INT)

