"""Element-wise math, comparison, logic and cast kernels; reductions (Sum, Mean, Max, ArgMax,
...); matrix products and linear algebra (MatMul, BatchMatMul, MatrixInverse, MatrixDeterminant).

Most element-wise kernels are the NumPy ufunc itself: no wrapper, no per-step overhead.
Results keep the dtype of the inputs (NumPy would otherwise promote e.g. int8 ** int8).
"""

from __future__ import annotations

import operator

import numpy as np

from tensorweave.framework import errors
from tensorweave.ops.fusion_ops import FUSED_MATMUL
from tensorweave_cpu import blas, jit, rowwise

CPU = "CPU"

_UFUNCS = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum, "Minimum": np.minimum,
    "Neg": np.negative, "Abs": np.absolute, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Square": np.square, "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil, "Round": np.rint,
    "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh, "Log1p": np.log1p, "Expm1": np.expm1,
    "Greater": np.greater, "GreaterEqual": np.greater_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Equal": np.equal, "NotEqual": np.not_equal,
    "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or, "LogicalNot": np.logical_not,
}


# A loop's counter arithmetic (``i + 1``, ``i < n``) on scalars: a ufunc call costs 0.6-0.8 us
# there, Python's operator on two NumPy scalars of one type 0.05 us, doing the same C arithmetic
# (integers wrap, floats are IEEE single or double) and giving the same type. Where a node's
# output is statically a scalar of these types, so are both its inputs: each is a NumPy scalar
# (a ufunc's result) or a 0-d array (a constant), whose scalar ``[()]`` is.
_SCALAR_OPERATORS = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "Less": operator.lt, "LessEqual": operator.le, "Greater": operator.gt, "GreaterEqual": operator.ge,
    "Equal": operator.eq, "NotEqual": operator.ne,
}
_SCALAR_TYPES = (np.int32, np.int64, np.float32, np.float64)


def _scalar_fast(op_type, factory):
    """``factory``'s kernel (or the plain ufunc), or for a statically scalar output the
    scalar operator above."""
    ufunc, py_op = _UFUNCS[op_type], _SCALAR_OPERATORS[op_type]

    def scalar_factory(ctx):
        t = ctx.attrs.get("T")
        if ctx.op.outputs[0].shape.ndims != 0 or t is None or t.np_dtype.type not in _SCALAR_TYPES:
            return factory(ctx) if factory is not None else ufunc
        st = t.np_dtype.type

        def scalar_op(x, y):
            if type(x) is not st:
                x = x[()]
            if type(y) is not st:
                y = y[()]
            return py_op(x, y)
        return scalar_op
    return scalar_factory


def _div(ctx):
    if ctx.attrs["T"].is_integer:
        # TF's Div on integers truncates toward zero (C semantics); division by zero is an error.
        # Floor division corrected by one where the quotient is negative and inexact (not
        # |x| // |y|: abs() of the most negative value overflows).
        dt = ctx.output_dtypes[0].np_dtype
        unsigned = ctx.attrs["T"].is_unsigned

        def idiv(x, y):
            if np.any(y == 0):
                raise ctx.error(errors.InvalidArgumentError, "integer division by zero")
            q = np.floor_divide(x, y)
            if not unsigned:
                q = q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0)))
            return np.asarray(q, dtype=dt)
        return idiv
    return np.true_divide


def _floordiv(ctx):
    if ctx.attrs["T"].is_integer:
        def f(x, y):
            if np.any(y == 0):
                raise ctx.error(errors.InvalidArgumentError, "integer division by zero")
            return np.floor_divide(x, y)
        return f
    return lambda x, y: np.floor(np.true_divide(x, y))


def _floormod(ctx):
    if ctx.attrs["T"].is_integer:
        def f(x, y):
            if np.any(y == 0):
                raise ctx.error(errors.InvalidArgumentError, "integer division by zero")
            return np.mod(x, y)
        return f
    return np.mod


def _pow(ctx):
    dt = ctx.attrs["T"].np_dtype
    if ctx.attrs["T"].is_integer:
        def ipow(x, y):
            if np.any(y < 0):
                raise ctx.error(errors.InvalidArgumentError, "integers to negative integer powers are not allowed")
            return np.power(x, y).astype(dt, copy=False)
        return ipow
    return np.power


def _same_dtype(fn):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype
        return lambda *xs: np.asarray(fn(*xs), dtype=dt)
    return factory


def _cast(ctx):
    src, dst = ctx.attrs["SrcT"], ctx.attrs["DstT"]
    if dst.is_string or src.is_string:
        raise ctx.error(errors.UnimplementedError, f"Cast from {src.name} to {dst.name} is not supported")
    np_dst = dst.np_dtype
    if dst.is_bool:
        return lambda x: np.not_equal(x, 0)  # nonzero is True, for complex too (both parts)
    if src.is_complex and not dst.is_complex:
        return lambda x: np.real(x).astype(np_dst)
    if src.is_floating and dst.is_integer:
        return lambda x: np.trunc(x).astype(np_dst)  # round toward zero, as C casts do
    return lambda x: x.astype(np_dst)


def _matmul(ctx):
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    pooled = _pooled_matmul(ctx, ta, tb)
    if pooled is not None:
        return pooled
    if not ta and not tb:
        return blas.matmul
    if ta and tb:
        return lambda a, b: blas.matmul(a.T, b.T)
    if ta:
        return lambda a, b: blas.matmul(a.T, b)
    return lambda a, b: blas.matmul(a, b.T)


def _fused_matmul(ctx):
    """_FusedMatMul (passes/matmul_fusion.py): the product, then its bias added and the
    activation applied in place, with the values MatMul, Add and Relu/Relu6 give."""
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    act = list(ctx.attrs["fused_ops"])[1:]
    relu6 = act == ["Relu6"]
    relu = act == ["Relu"]

    def f(a, b, bias):
        out = blas.matmul(a.T if ta else a, b.T if tb else b)
        if bias.shape != out.shape[1:]:
            raise ctx.error(errors.InvalidArgumentError,
                            f"bias of shape {bias.shape} for a product of shape {out.shape}")
        if not relu6 and out.size < EPILOGUE_MAX and bias.dtype == out.dtype and out.dtype.char in "fd" \
                and out.flags.c_contiguous and jit.enabled():
            _epilogue_loop(out, bias, relu)
            return out
        out += bias
        if relu:
            np.maximum(out, 0, out=out)
        elif relu6:
            np.clip(out, 0, 6, out=out)
        return out
    return f


# A small product's bias and ReLU in one compiled pass over it rather than two NumPy calls
# (the mlp's [64, 128]: about 2 us less); large ones are memory-bound either way.
EPILOGUE_MAX = 1 << 16


def _bias_relu(out, bias, relu):
    # out + bias, then np.maximum(v, 0)'s value: v where v > 0 or NaN, else +0.0 (-0.0 too).
    n, c = out.shape
    for i in range(n):
        for j in range(c):
            v = out[i, j] + bias[j]
            if relu and not (v > 0 or v != v):
                v = 0.0
            out[i, j] = v


_epilogue_loop = jit.Loop(_bias_relu)


def _squared_difference(ctx):
    if ctx.attrs["T"].is_complex:
        def f(x, y):  # TF: conj(x - y) * (x - y), a real value stored as complex
            d = x - y
            return d * np.conj(d)
        return f
    return lambda x, y: np.square(x - y)


def _complex_abs(ctx):
    dt = ctx.output_dtypes[0].np_dtype
    return lambda x: np.asarray(np.absolute(x), dtype=dt)


def _add_n(ctx):
    def add_n(*xs):
        if len(xs) == 1:
            return xs[0]
        out = np.add(xs[0], xs[1])  # a fresh array: accumulating into it leaves the inputs alone
        if type(out) is not np.ndarray:  # 0-d inputs give a NumPy scalar, which `out=` refuses
            out = np.asarray(out)
        for x in xs[2:]:
            np.add(out, x, out=out)
        return out
    return add_n


# ---------------------------------------------------------------------------------------
# outputs from a pooling allocator, large products over the cores
#
# With a pooling allocator (``ConfigProto(allocator={"CPU": "pool"})``) the hot kernels write
# large outputs into buffers the pool hands out (``out=``), which a plan reuses step after
# step instead of page-faulting fresh memory. A binary op whose static output has a million
# elements or more is split by rows over the cores. Everything is decided in the factory:
# with the default allocator, or when the static output is small, the kernel is the plain
# NumPy function, exactly as without pools.
POOLED_MIN_BYTES = 64 * 1024
_POOLED_BINARY = ("Add", "Sub", "Mul", "Maximum", "Minimum")


def _pool_of(ctx):
    alloc = getattr(ctx.device, "allocator", None)
    return alloc if getattr(alloc, "pooling", False) else None


def _static_small(ctx) -> bool:
    """True when the node's output is statically known to be below POOLED_MIN_BYTES."""
    t = ctx.op.outputs[0]
    return t.shape.is_fully_defined() and t.shape.num_elements() * t.dtype.size < POOLED_MIN_BYTES


def _static_elements(ctx) -> int:
    """The node's output element count when statically known (a specialised plan knows the
    shapes fed), else 0."""
    t = ctx.op.outputs[0]
    return t.shape.num_elements() if t.shape.is_fully_defined() else 0


def _split_binary(ufunc, dt, pool):
    """A binary ufunc over a million elements and more, one block of rows per core
    (``rowwise.split_ufunc``): a language model's [1120, 10000] gradient product 13 -> 6.5 ms
    on two cores."""
    return rowwise.split_ufunc(ufunc, dt, pool.allocate if pool is not None else None)


def _pooled_binary(ufunc):
    def factory(ctx):
        pool = _pool_of(ctx)
        if _static_elements(ctx) >= rowwise.PARALLEL_MIN:
            return _split_binary(ufunc, ctx.output_dtypes[0].np_dtype, pool)
        if pool is None or _static_small(ctx):
            return ufunc
        dt = ctx.output_dtypes[0].np_dtype
        itemsize = dt.itemsize
        allocate = pool.allocate
        broadcast = np.broadcast_shapes

        def f(x, y):
            shape = x.shape if x.shape == y.shape else broadcast(x.shape, y.shape)
            n = itemsize
            for d in shape:
                n *= d
            if n < POOLED_MIN_BYTES or x.dtype != dt or y.dtype != dt:
                return ufunc(x, y)
            return ufunc(x, y, out=allocate(shape, dt))
        return f
    return factory


def _pooled_matmul(ctx, ta, tb):
    pool = _pool_of(ctx)
    if pool is None or _static_small(ctx):
        return None
    dt = ctx.output_dtypes[0].np_dtype
    itemsize = dt.itemsize
    allocate = pool.allocate

    def f(a, b):
        if ta:
            a = a.T
        if tb:
            b = b.T
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            return blas.matmul(a, b)  # let NumPy report the mismatch
        shape = (a.shape[0], b.shape[1])
        if shape[0] * shape[1] * itemsize < POOLED_MIN_BYTES:
            return blas.matmul(a, b)
        return blas.matmul(a, b, out=allocate(shape, dt))
    return f


# ---------------------------------------------------------------------------------------
# reductions
def _axes_fn(ctx, what="reduction axis"):
    """axes value, rank -> normalised tuple of axes; raises InvalidArgumentError when out of range.

    Mirrors shape_fns.reduction: a scalar input accepts axis 0 (and reduces nothing).
    """
    cache: dict = {}

    def norm(axes, nd):
        key = (axes.tobytes(), axes.dtype.char, nd) if isinstance(axes, np.ndarray) else (axes, nd)
        hit = cache.get(key)
        if hit is not None:
            return hit
        flat = np.asarray(axes).reshape(-1)
        out = set()
        for a in flat.tolist():
            if not -nd <= a < max(nd, 1):
                raise ctx.error(errors.InvalidArgumentError,
                                f"{what} {a} is out of range for input of rank {nd}")
            if nd:
                out.add(a % nd)
        res = tuple(sorted(out))
        if len(cache) < 64:
            cache[key] = res
        return res
    return norm


def _reduce(ufunc, float16_acc=True, identity_from_dtype=None):
    """Factory for Sum/Prod/Max/Min/All/Any: ``ufunc.reduce`` over the given axes.

    float16 accumulates in float32 (as TF does); integers accumulate in their own type, so
    they wrap on overflow like TF. Max/Min of an empty set give the lowest/highest value of the
    dtype (TF's identity) instead of NumPy's error.
    """
    def factory(ctx):
        keep = ctx.attrs["keep_dims"]
        dt = ctx.output_dtypes[0].np_dtype
        acc = np.float32 if (float16_acc and dt == np.float16) else (None if dt == np.bool_ else dt)
        norm = _axes_fn(ctx)
        leading_sum = ufunc is np.add and dt in (np.float32, np.float64)
        kw = {}
        if identity_from_dtype is not None:
            kw["initial"] = identity_from_dtype(dt)

        def f(x, axes):
            ax = norm(axes, x.ndim)
            if leading_sum and ax and ax[-1] == len(ax) - 1 and x.dtype == dt:
                r = rowwise.sum_leading(x, len(ax))  # a bias gradient: the leading axes (rowwise.py)
                if r is not None:
                    return r.reshape((1,) * len(ax) + r.shape) if keep else r
            r = ufunc.reduce(x, axis=ax, dtype=acc, keepdims=keep, **kw)
            return np.asarray(r, dtype=dt)
        return f
    return factory


def _lowest(dt):
    return -np.inf if np.issubdtype(dt, np.floating) else np.iinfo(dt).min


def _highest(dt):
    return np.inf if np.issubdtype(dt, np.floating) else np.iinfo(dt).max


def _mean(ctx):
    keep = ctx.attrs["keep_dims"]
    T = ctx.attrs["T"]
    dt = T.np_dtype
    norm = _axes_fn(ctx)
    if T.is_integer:
        # TF's integer mean is an integer: the exact sum divided by the count, truncated.
        acc = np.uint64 if T.is_unsigned else np.int64

        def imean(x, axes):
            ax = norm(axes, x.ndim)
            s = np.add.reduce(x, axis=ax, dtype=acc, keepdims=keep)
            n = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
            if n == 0:
                return np.zeros(np.shape(s), dtype=dt)
            q = np.floor_divide(s, n)
            if not T.is_unsigned:
                q = q + ((s < 0) & (np.remainder(s, n) != 0))
            return np.asarray(q, dtype=dt)
        return imean
    acc = np.dtype(np.float32) if dt == np.float16 else dt

    def mean(x, axes):
        ax = norm(axes, x.ndim)
        s = np.add.reduce(x, axis=ax, dtype=acc, keepdims=keep)
        n = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
        if n == 0:  # 0/0: nan, as in TF (np.mean would warn)
            return np.full(np.shape(s), np.nan, dtype=dt)
        return np.asarray(np.true_divide(s, acc.type(n)), dtype=dt)
    return mean


def _arg_reduce(npfn, what):
    def factory(ctx):
        dt = ctx.output_dtypes[0].np_dtype

        def f(x, axis):
            a = int(axis)
            nd = x.ndim
            if not -nd <= a < nd:
                raise ctx.error(errors.InvalidArgumentError,
                                f"dimension {a} is out of range for input of rank {nd}")
            if x.shape[a] == 0:
                raise ctx.error(errors.InvalidArgumentError,
                                f"cannot take the {what} over dimension {a} of shape {x.shape}: it is empty")
            return np.asarray(npfn(x, axis=a), dtype=dt)
        return f
    return factory


# ---------------------------------------------------------------------------------------
# linear algebra
def _adjoint(x):
    x = np.swapaxes(x, -1, -2)
    return np.conj(x) if np.iscomplexobj(x) else x


def _batch_matmul(ctx):
    adj_x, adj_y = ctx.attrs["adj_x"], ctx.attrs["adj_y"]
    dt = ctx.output_dtypes[0].np_dtype

    def bmm(x, y):
        if x.ndim < 2 or y.ndim < 2:
            raise ctx.error(errors.InvalidArgumentError,
                            f"inputs must have rank >= 2, got shapes {x.shape} and {y.shape}")
        a = _adjoint(x) if adj_x else x
        b = _adjoint(y) if adj_y else y
        if a.shape[-1] != b.shape[-2]:
            raise ctx.error(errors.InvalidArgumentError,
                            f"matrix dimensions are incompatible: shapes {x.shape} and {y.shape} "
                            f"(adj_x={adj_x}, adj_y={adj_y})")
        return np.asarray(blas.matmul(a, b), dtype=dt)
    return bmm


def _check_square(ctx, x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.error(errors.InvalidArgumentError,
                        f"input must be a batch of square matrices, got shape {x.shape}")


def _matrix_inverse(ctx):
    adjoint = ctx.attrs["adjoint"]
    dt = ctx.output_dtypes[0].np_dtype
    work = np.float32 if dt == np.float16 else dt  # LAPACK has no half precision

    def inv(x):
        _check_square(ctx, x)
        a = _adjoint(x) if adjoint else x
        try:
            r = np.linalg.inv(a.astype(work, copy=False))
        except np.linalg.LinAlgError:
            raise ctx.error(errors.InvalidArgumentError, "input is not invertible (a matrix is singular)") from None
        if not np.all(np.isfinite(r)) and np.all(np.isfinite(x)):
            raise ctx.error(errors.InvalidArgumentError, "input is not invertible (a matrix is singular)")
        return np.asarray(r, dtype=dt)
    return inv


def _matrix_determinant(ctx):
    dt = ctx.output_dtypes[0].np_dtype
    work = np.float32 if dt == np.float16 else dt

    def det(x):
        _check_square(ctx, x)
        return np.asarray(np.linalg.det(x.astype(work, copy=False)), dtype=dt)
    return det


# ---------------------------------------------------------------------------------------
# scans and segments
def _cumulative(ufunc, identity):
    def factory(ctx):
        exclusive, reverse = ctx.attrs["exclusive"], ctx.attrs["reverse"]
        dt = ctx.output_dtypes[0].np_dtype
        acc = np.float32 if dt == np.float16 else dt

        def f(x, axis):
            if x.ndim == 0:
                raise ctx.error(errors.InvalidArgumentError, "cannot take a cumulative reduction of a scalar")
            a = int(axis)
            if not -x.ndim <= a < x.ndim:
                raise ctx.error(errors.InvalidArgumentError, f"axis {a} is out of range for input of rank {x.ndim}")
            a %= x.ndim
            if reverse:
                x = np.flip(x, a)
            r = ufunc.accumulate(x, axis=a, dtype=acc)
            if exclusive and x.shape[a]:
                head = np.full(x.shape[:a] + (1,) + x.shape[a + 1:], identity, dtype=r.dtype)
                r = np.concatenate([head, r[(slice(None),) * a + (slice(0, -1),)]], axis=a)
            if reverse:
                r = np.flip(r, a)
            return np.asarray(r, dtype=dt)
        return f
    return factory


def register(reg):
    register_gradient_helpers(reg)
    for op, fn in _UFUNCS.items():
        factory = _pooled_binary(fn) if op in _POOLED_BINARY else None
        if op in _SCALAR_OPERATORS:
            reg.register(op, CPU, factory=_scalar_fast(op, factory))
        elif factory is not None:
            reg.register(op, CPU, factory=factory)
        else:
            reg.register(op, CPU, fn)
    reg.register("Add", CPU, _string_concat, constraints={"T": ["string"]}, priority=1)
    reg.register("Div", CPU, factory=_div)
    reg.register("RealDiv", CPU, factory=_div)
    reg.register("FloorDiv", CPU, factory=_floordiv)
    reg.register("FloorMod", CPU, factory=_floormod)
    reg.register("Pow", CPU, factory=_pow)
    reg.register("SquaredDifference", CPU, factory=_squared_difference)
    reg.register("Rsqrt", CPU, factory=_same_dtype(lambda x: 1 / np.sqrt(x)))
    reg.register("Reciprocal", CPU, factory=_same_dtype(np.reciprocal))
    reg.register("Sigmoid", CPU, factory=_same_dtype(lambda x: 0.5 * (np.tanh(0.5 * x) + 1)))
    reg.register("Cast", CPU, factory=_cast)
    reg.register("MatMul", CPU, factory=_matmul)
    reg.register(FUSED_MATMUL, CPU, factory=_fused_matmul)
    reg.register("ComplexAbs", CPU, factory=_complex_abs)
    reg.register("Conj", CPU, np.conjugate)
    reg.register("AddN", CPU, factory=_add_n)
    reg.register("Sum", CPU, factory=_reduce(np.add))
    reg.register("Prod", CPU, factory=_reduce(np.multiply))
    reg.register("Max", CPU, factory=_reduce(np.maximum, identity_from_dtype=_lowest))
    reg.register("Min", CPU, factory=_reduce(np.minimum, identity_from_dtype=_highest))
    reg.register("All", CPU, factory=_reduce(np.logical_and))
    reg.register("Any", CPU, factory=_reduce(np.logical_or))
    reg.register("Mean", CPU, factory=_mean)
    reg.register("ArgMax", CPU, factory=_arg_reduce(np.argmax, "argmax"))
    reg.register("ArgMin", CPU, factory=_arg_reduce(np.argmin, "argmin"))
    reg.register("BatchMatMul", CPU, factory=_batch_matmul)
    reg.register("MatrixInverse", CPU, factory=_matrix_inverse)
    reg.register("MatrixDeterminant", CPU, factory=_matrix_determinant)
    reg.register("Cumsum", CPU, factory=_cumulative(np.add, 0))
    reg.register("Cumprod", CPU, factory=_cumulative(np.multiply, 1))


def _string_concat(x, y):
    return np.frompyfunc(lambda a, b: a + b, 2, 1)(x, y).astype(object)


def _reduced_shape(ctx):
    """The shape of a reduction's input with the reduced axes set to 1 (``keep_dims`` shape)."""
    def reduced_shape(input_shape, axes):
        out = np.array(input_shape, dtype=np.int32).reshape(-1)
        n = out.size
        for a in np.asarray(axes).reshape(-1).tolist():
            if not -n <= a < max(n, 1):
                raise ctx.error(errors.InvalidArgumentError, f"reduction axis {a} is out of range for input of rank {n}")
            if n:
                out[a % n] = 1
        return out
    return reduced_shape


def register_gradient_helpers(reg):
    reg.register("ReducedShape", CPU, factory=_reduced_shape)
