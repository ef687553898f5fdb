"""Math ops against NumPy: values, inferred static shapes, output dtypes and errors.

Each check builds a small graph, runs it on the CPU device and compares with a NumPy
reference computed in float64/complex128 (floats) or in the input dtype (integers, whose
wrap-around arithmetic is exact and order independent).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op

FLOATS = ["float16", "float32", "float64"]
SIGNED_INTS = ["int8", "int16", "int32", "int64"]
UNSIGNED_INTS = ["uint8", "uint16", "uint32", "uint64"]
INTS = SIGNED_INTS + UNSIGNED_INTS
COMPLEX = ["complex64", "complex128"]
REAL = FLOATS + INTS
NUM = REAL + COMPLEX
FLOAT_CPLX = FLOATS + COMPLEX
SIGNED = FLOATS + SIGNED_INTS + COMPLEX
SIGNED_REAL = FLOATS + SIGNED_INTS
MATMUL_T = FLOATS + ["int32", "int64"] + COMPLEX
LINALG_T = FLOATS + COMPLEX


# ---------------------------------------------------------------------------------------
# helpers
def sample(dtype, shape, kind="any", seed=0):
    """Random test values of ``dtype`` in a range where the op under test is well defined.

    kind: any, pos (> 0), nonzero, unit (|x| < 1), exp (small exponents: 0..3 for ints).
    """
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo, hi = {"any": (-5 if dt.kind == "i" else 0, 10 if dt.kind == "u" else 6),
                  "pos": (1, 6), "nonzero": (1, 6), "unit": (0, 1), "exp": (0, 4)}[kind]
        v = rng.integers(lo, hi, size=shape)
        if kind == "nonzero" and dt.kind == "i":
            v = v * rng.choice([-1, 1], size=shape)
        return v.astype(dt)

    def real():
        if kind == "any":
            return rng.uniform(-3, 3, shape)
        if kind == "pos":
            return rng.uniform(0.5, 3, shape)
        if kind == "nonzero":
            return rng.uniform(0.5, 3, shape) * rng.choice([-1, 1], size=shape)
        if kind == "unit":
            return rng.uniform(-0.9, 0.9, shape)
        return rng.uniform(-2, 2, shape)  # exp

    if dt.kind == "c":
        if kind == "unit":
            return (real() * 0.5 + 0.5j * real()).astype(dt)
        return (real() + 1j * real()).astype(dt)
    return real().astype(dt)


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        return s.run(fetches, feed_dict)


def tol(dtype):
    dt = np.dtype(dtype)
    if dt in (np.float16,):
        return dict(rtol=1e-2, atol=1e-2)
    if dt in (np.float32, np.complex64):
        return dict(rtol=2e-5, atol=1e-5)
    return dict(rtol=1e-10, atol=1e-12)


def upcast(x):
    """The float64/complex128 version of a float array (ints and bools stay as they are)."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x


def check(t, value, expected, out_dtype=None, **tolerance):
    """``value`` (what ``t`` evaluated to) matches ``expected``, ``t``'s static shape matches
    the runtime shape and ``t``'s dtype is ``out_dtype`` (the runtime dtype too)."""
    value = np.asarray(value)
    if out_dtype is not None:
        assert t.dtype is tw.as_dtype(out_dtype), (t.dtype, out_dtype)
    assert value.dtype == t.dtype.np_dtype, f"runtime dtype {value.dtype} != declared {t.dtype.name}"
    assert t.shape.is_compatible_with(value.shape), f"static shape {t.shape} vs runtime {value.shape}"
    expected = np.asarray(expected)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    if value.dtype.kind in "fc":
        np.testing.assert_allclose(value, expected.astype(value.dtype) if expected.dtype.kind in "fc" else expected,
                                   equal_nan=True, **(tolerance or tol(value.dtype)))
    else:
        np.testing.assert_array_equal(value, expected.astype(value.dtype))


def raises(match=None, cls=errors.InvalidArgumentError):
    return pytest.raises(cls, match=match)


# ---------------------------------------------------------------------------------------
# element-wise binary ops
def _trunc_div(x, y):
    if x.dtype.kind in "iu":
        return np.trunc(x.astype(np.float64) / y.astype(np.float64)).astype(x.dtype)
    return x / y


def _floor_div(x, y):
    if x.dtype.kind in "iu":
        return np.floor_divide(x, y)
    return np.floor(x / y)


def _sq_diff(x, y):
    d = x - y
    return d * np.conj(d) if d.dtype.kind == "c" else d * d


# op -> (wrapper, reference, kind of x, kind of y, allowed dtypes)
BINARY = {
    "Add": (tw.add, np.add, "any", "any", NUM),
    "Sub": (tw.subtract, np.subtract, "any", "any", NUM),
    "Mul": (tw.multiply, np.multiply, "any", "any", NUM),
    "Div": (tw.div, _trunc_div, "any", "nonzero", NUM),
    "RealDiv": (tw.realdiv, _trunc_div, "any", "nonzero", NUM),
    "FloorDiv": (tw.floordiv, _floor_div, "any", "nonzero", REAL),
    "FloorMod": (tw.floormod, np.mod, "any", "nonzero", REAL),
    "Pow": (tw.pow, np.power, "pos", "exp", NUM),
    "Maximum": (tw.maximum, np.maximum, "any", "any", REAL),
    "Minimum": (tw.minimum, np.minimum, "any", "any", REAL),
    "SquaredDifference": (tw.squared_difference, _sq_diff, "any", "any", NUM),
}


@pytest.mark.parametrize("dtype", NUM)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary(op, dtype):
    fn, ref, kx, ky, allowed = BINARY[op]
    x, y = sample(dtype, (2, 3), kx, seed=1), sample(dtype, (2, 3), ky, seed=2)
    if dtype not in allowed:
        with raises(f"{op} node .*dtype {dtype} is not allowed"):
            fn(tw.constant(x), tw.constant(y))
        return
    t = fn(tw.constant(x), tw.constant(y))
    assert t.op.type == op
    assert t.shape == tw.TensorShape([2, 3])
    ints = np.dtype(dtype).kind in "iu"
    with np.errstate(over="ignore"):
        expected = ref(x, y) if ints else ref(upcast(x), upcast(y))
    check(t, run(t), expected, dtype, **({} if op != "Pow" or dtype != "complex64" else dict(rtol=1e-4, atol=1e-4)))


@pytest.mark.parametrize("sx,sy,out", [
    ((2, 3), (3,), (2, 3)),
    ((2, 1), (1, 3), (2, 3)),
    ((), (2, 3), (2, 3)),
    ((4, 1, 3), (2, 1), (4, 2, 3)),
    ((0, 3), (1, 3), (0, 3)),
    ((1,), (), (1,)),
])
@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Maximum", "SquaredDifference", "FloorMod", "Pow"])
def test_binary_broadcasting(op, sx, sy, out):
    fn, ref, kx, ky, _ = BINARY[op]
    x, y = sample("float32", sx, kx, seed=3), sample("float32", sy, ky, seed=4)
    t = fn(x if not sx else tw.constant(x), tw.constant(y))
    assert t.shape == tw.TensorShape(out)
    check(t, run(t), ref(upcast(x), upcast(y)), "float32")


@pytest.mark.parametrize("op", ["Greater", "Equal", "LogicalAnd"])
def test_broadcasting_comparisons_and_logic(op):
    fn = {"Greater": tw.greater, "Equal": tw.equal, "LogicalAnd": tw.logical_and}[op]
    ref = {"Greater": np.greater, "Equal": np.equal, "LogicalAnd": np.logical_and}[op]
    dt = "bool" if op == "LogicalAnd" else "int32"
    x, y = sample(dt, (4, 1, 3), seed=5), sample(dt, (2, 1), seed=6)
    t = fn(tw.constant(x), tw.constant(y))
    assert t.shape == tw.TensorShape([4, 2, 3])
    check(t, run(t), ref(x, y), "bool")


def test_broadcasting_with_unknown_dims():
    a = tw.placeholder(tw.float32, [None, 3])
    b = tw.placeholder(tw.float32, [2, None, 1])
    t = a + b
    assert t.shape.as_list() == [2, None, 3]
    x, y = sample("float32", (5, 3)), sample("float32", (2, 5, 1))
    check(t, run(t, {a: x, b: y}), x + y, "float32")
    u = tw.placeholder(tw.float32) * a  # unknown rank: unknown result shape
    assert u.shape.ndims is None
    check(u, run(u, {u.op.inputs[0]: np.float32(2), a: x}), 2 * x, "float32")


@pytest.mark.parametrize("sx,sy", [((2, 3), (4,)), ((2, 3), (3, 2)), ((5, 1, 3), (2, 2, 3)), ((0,), (2,))])
def test_incompatible_broadcast_fails_at_construction(sx, sy):
    x, y = tw.constant(np.zeros(sx, np.float32)), tw.constant(np.zeros(sy, np.float32))
    n_ops = len(tw.get_default_graph().get_operations())
    with raises(r"Add node 'Add'.*cannot be broadcast"):
        tw.add(x, y)
    with raises(r"Greater node 'Greater'.*cannot be broadcast"):
        tw.greater(x, y)
    assert len(tw.get_default_graph().get_operations()) == n_ops  # nothing half-built is left


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "div", "maximum", "greater", "equal", "matmul",
                                "floordiv", "pow", "truediv", "squared_difference"])
def test_dtype_mismatch_names_the_op(op):
    x = tw.constant(np.ones((2, 2), np.int32))
    y = tw.constant(np.ones((2, 2), np.float32))
    with raises(r"node '.*'.*dtype float32.*int32|node '.*'.*dtype int32.*float32"):
        getattr(tw, op)(x, y)


def test_python_scalars_take_the_tensors_dtype():
    t = tw.constant(np.array([1.0, 2.0], np.float64))
    for r, e in [(t + 1, [2, 3]), (1 + t, [2, 3]), (2 / t, [2, 1]), (t / 2, [0.5, 1]), (2 - t, [1, 0]),
                 (t * 2, [2, 4]), (2 ** t, [2, 4]), (t // 2, [0, 1]), (t % 2, [1, 0]), (-t, [-1, -2]),
                 (tw.maximum(1.5, t), [1.5, 2])]:
        check(r, run(r), e, "float64")
    i = tw.constant([3, -7])
    check(i / 2, run(i / 2), [1.5, -3.5], "float64")  # Python-3 division of int32 is float64
    check(i // 2, run(i // 2), [1, -4], "int32")
    check(tw.div(i, 2), run(tw.div(i, 2)), [1, -3], "int32")  # Div truncates toward zero
    check(i % 2, run(i % 2), [1, 1], "int32")
    small = tw.constant(np.array([3], np.int16))
    check(small / 2, run(small / 2), [1.5], "float32")


def test_integer_division_truncates_toward_zero_at_the_extremes():
    x = np.array([-128, -128, 127, -7, 7, -1, 0], np.int8)
    y = np.array([2, 3, -2, 2, -2, 3, -5], np.int8)
    t = tw.div(tw.constant(x), tw.constant(y))
    check(t, run(t), [-64, -42, -63, -3, -3, 0, 0], "int8")


@pytest.mark.parametrize("op", ["div", "floordiv", "floormod", "realdiv"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
def test_integer_division_by_zero_fails_at_run_time(op, dtype):
    t = getattr(tw, op)(tw.constant(np.array([4, 5], dtype)), tw.constant(np.array([2, 0], dtype)), name="q")
    with raises(r"node 'q'.*division by zero"):
        run(t)


def test_float_division_by_zero_is_inf_not_an_error():
    t = tw.constant([1.0, -1.0, 0.0]) / tw.constant([0.0, 0.0, 0.0])
    v = run(t)
    assert v[0] == np.inf and v[1] == -np.inf and np.isnan(v[2])


def test_integer_negative_power_fails_at_run_time():
    t = tw.pow(tw.constant([2, 3]), tw.constant([1, -1]), name="p")
    with raises(r"node 'p'.*negative integer powers"):
        run(t)


def test_string_add_concatenates():
    t = tw.add(tw.constant([b"ab", b"c"]), tw.constant([b"x", b"yz"]))
    assert t.dtype is tw.string and t.shape == tw.TensorShape([2])
    assert list(run(t)) == [b"abx", b"cyz"]


def test_squared_difference_of_complex_is_conj_product():
    x, y = np.array([1 + 2j, 3j], np.complex64), np.array([0j, 1 + 1j], np.complex64)
    t = tw.squared_difference(tw.constant(x), tw.constant(y))
    check(t, run(t), [5 + 0j, 5 + 0j], "complex64")


# ---------------------------------------------------------------------------------------
# element-wise unary ops
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# op -> (wrapper, reference, kind, allowed dtypes)
UNARY = {
    "Neg": (tw.negative, np.negative, "any", SIGNED),
    "Abs": (tw.abs, np.abs, "any", SIGNED_REAL),
    "Exp": (tw.exp, np.exp, "any", FLOAT_CPLX),
    "Log": (tw.log, np.log, "pos", FLOAT_CPLX),
    "Sqrt": (tw.sqrt, np.sqrt, "pos", FLOAT_CPLX),
    "Rsqrt": (tw.rsqrt, lambda x: 1 / np.sqrt(x), "pos", FLOAT_CPLX),
    "Square": (tw.square, np.square, "any", NUM),
    "Sign": (tw.sign, np.sign, "any", SIGNED),
    "Reciprocal": (tw.reciprocal, lambda x: 1 / x, "nonzero", FLOAT_CPLX),
    "Floor": (tw.floor, np.floor, "any", FLOATS),
    "Ceil": (tw.ceil, np.ceil, "any", FLOATS),
    "Round": (tw.round, np.rint, "any", FLOATS),
    "Sin": (tw.sin, np.sin, "any", FLOAT_CPLX),
    "Cos": (tw.cos, np.cos, "any", FLOAT_CPLX),
    "Tanh": (tw.tanh, np.tanh, "any", FLOAT_CPLX),
    "Sigmoid": (tw.sigmoid, _sigmoid, "any", FLOAT_CPLX),
    "Log1p": (tw.log1p, np.log1p, "unit", FLOAT_CPLX),
    "Expm1": (tw.expm1, np.expm1, "any", FLOAT_CPLX),
}


@pytest.mark.parametrize("dtype", NUM)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype):
    fn, ref, kind, allowed = UNARY[op]
    x = sample(dtype, (3, 4), kind, seed=7)
    if op == "Abs" and dtype in COMPLEX:  # |z| is real: tw.abs makes a ComplexAbs node, as TF
        t = fn(tw.constant(x))
        assert t.op.type == "ComplexAbs"
        check(t, run(t), np.abs(upcast(x)), {"complex64": "float32", "complex128": "float64"}[dtype])
        return
    if dtype not in allowed:
        with raises(f"{op} node .*dtype {dtype} is not allowed"):
            fn(tw.constant(x))
        return
    t = fn(tw.constant(x))
    assert t.op.type == op and t.shape == tw.TensorShape([3, 4])
    ints = np.dtype(dtype).kind in "iu"
    check(t, run(t), ref(x) if ints else ref(upcast(x)), dtype)


def test_unary_on_scalar_and_empty():
    s = tw.exp(tw.constant(1.0))
    assert s.shape == tw.TensorShape([])
    check(s, run(s), np.e, "float32")
    e = tw.negative(tw.constant(np.zeros((0, 2), np.int64)))
    check(e, run(e), np.zeros((0, 2)), "int64")


@pytest.mark.parametrize("dtype", COMPLEX)
def test_abs_of_complex_is_real(dtype):
    t = tw.abs(tw.constant(np.array([3 + 4j, -1j, 0], dtype)))
    assert t.op.type == "ComplexAbs"
    check(t, run(t), [5, 1, 0], "float32" if dtype == "complex64" else "float64")


def test_round_is_half_to_even():
    t = tw.round(tw.constant([0.5, 1.5, 2.5, -0.5, -1.5, 2.4]))
    check(t, run(t), [0, 2, 2, -0.0, -2, 2], "float32")


def test_conj():
    x = np.array([1 + 2j, -3j], np.complex128)
    t = tw.conj(tw.constant(x))
    check(t, run(t), np.conj(x), "complex128")
    r = tw.constant([1.0])
    assert tw.conj(r) is r  # real input: unchanged, as tf.conj


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "sin", "tanh", "floor", "round", "reciprocal"])
def test_disallowed_dtype_names_the_op(op):
    with raises(r"node '.*'.*dtype int32 is not allowed"):
        getattr(tw, op)(tw.constant([1, 2]))


def test_operator_overloads():
    a = tw.constant(np.array([[1.0, -2.0], [3.0, 4.0]], np.float32))
    va = run(a)
    pairs = [(-a, -va), (abs(a), np.abs(va)), (a @ a, va @ va), (a ** 2, va ** 2), (a - 1, va - 1)]
    for t, e in pairs:
        check(t, run(t), e, "float32")
    for t, e in [(a < 0, va < 0), (a <= 1, va <= 1), (a > 3, va > 3), (a >= 3, va >= 3)]:
        check(t, run(t), e, "bool")
    b = tw.constant([True, False])
    for t, e in [(b & True, [True, False]), (b | False, [True, False]), (~b, [False, True])]:
        check(t, run(t), e, "bool")


# ---------------------------------------------------------------------------------------
# comparisons and logic
COMPARISONS = {
    "Greater": (tw.greater, np.greater, REAL), "GreaterEqual": (tw.greater_equal, np.greater_equal, REAL),
    "Less": (tw.less, np.less, REAL), "LessEqual": (tw.less_equal, np.less_equal, REAL),
    "Equal": (tw.equal, np.equal, NUM + ["bool"]), "NotEqual": (tw.not_equal, np.not_equal, NUM + ["bool"]),
}


@pytest.mark.parametrize("dtype", NUM + ["bool"])
@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_comparison(op, dtype):
    fn, ref, allowed = COMPARISONS[op]
    x = sample(dtype, (3, 4), seed=8)
    y = x.copy()
    y[::2] = sample(dtype, (3, 4), seed=9)[::2]  # some equal, some not
    if dtype not in allowed:
        with raises(f"{op} node .*dtype {dtype} is not allowed"):
            fn(tw.constant(x), tw.constant(y))
        return
    t = fn(tw.constant(x), tw.constant(y))
    assert t.shape == tw.TensorShape([3, 4])
    check(t, run(t), ref(x, y), "bool")


def test_comparisons_of_strings_and_nan():
    s = tw.equal(tw.constant([b"a", b"b"]), tw.constant([b"a", b"c"]))
    check(s, run(s), [True, False], "bool")
    ns = tw.not_equal(tw.constant([b"a", b"b"]), b"a")
    check(ns, run(ns), [False, True], "bool")
    nan = tw.constant([np.nan, 1.0])
    for t, e in [(tw.equal(nan, nan), [False, True]), (tw.not_equal(nan, nan), [True, False]),
                 (tw.greater(nan, 0.0), [False, True])]:
        check(t, run(t), e, "bool")


def test_logical_ops_truth_tables():
    x = tw.constant([True, True, False, False])
    y = tw.constant([True, False, True, False])
    for t, e in [(tw.logical_and(x, y), [1, 0, 0, 0]), (tw.logical_or(x, y), [1, 1, 1, 0]),
                 (tw.logical_not(x), [0, 0, 1, 1])]:
        check(t, run(t), np.array(e, bool), "bool")


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_logical_ops_need_bool(op):
    with raises(r"node '.*'.*must have dtype bool"):
        getattr(tw, op)(tw.constant([1, 0]), tw.constant([1, 1]))
    with raises(r"node '.*'.*must have dtype bool"):
        tw.logical_not(tw.constant([1.0]))


# ---------------------------------------------------------------------------------------
# Cast
CAST_TYPES = NUM + ["bool"]


@pytest.mark.parametrize("dst", CAST_TYPES)
@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast(src, dst):
    kind = "pos" if np.dtype(dst).kind == "u" else "any"  # negative floats to unsigned are undefined
    x = sample(src, (2, 5), kind, seed=10)
    if np.dtype(src).kind == "f":
        x = (x * 7).astype(src)  # spread values so truncation matters and int8 still holds them
        x[0, :3] = [2.7, -2.7 if kind == "any" else 0.3, 0.0]
    t = tw.cast(tw.constant(x), dst)
    assert t.shape == tw.TensorShape([2, 5])
    if src == dst:
        assert t.op.type == "Const"  # a no-op cast is the tensor itself
    if dst == "bool":
        expected = x != 0
    elif np.dtype(src).kind == "c" and np.dtype(dst).kind != "c":
        expected = np.trunc(x.real) if np.dtype(dst).kind in "iu" else x.real
    elif np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
        expected = np.trunc(x)
    else:
        expected = x
    with np.errstate(invalid="ignore"):
        check(t, run(t), np.asarray(expected).astype(dst), dst)


def test_cast_float_to_int_truncates_toward_zero():
    t = tw.cast(tw.constant([-2.7, -1.5, -0.5, 0.5, 1.5, 2.7, 3.0]), tw.int32)
    check(t, run(t), [-2, -1, 0, 0, 1, 2, 3], "int32")
    for fn, dt in [(tw.to_int32, "int32"), (tw.to_int64, "int64")]:
        u = fn(tw.constant([-1.9, 1.9]))
        check(u, run(u), [-1, 1], dt)
    f = tw.to_float(tw.constant([1, 2]))
    check(f, run(f), [1.0, 2.0], "float32")


def test_cast_keeps_unknown_dims():
    p = tw.placeholder(tw.float64, [None, 2])
    t = tw.cast(p, tw.int16)
    assert t.shape.as_list() == [None, 2]
    check(t, run(t, {p: np.array([[1.5, -1.5]])}), [[1, -1]], "int16")


# ---------------------------------------------------------------------------------------
# AddN
@pytest.mark.parametrize("dtype", NUM)
def test_add_n(dtype):
    xs = [sample(dtype, (2, 3), seed=s) for s in range(3)]
    t = tw.add_n([tw.constant(x) for x in xs])
    assert t.op.type == "AddN" and t.shape == tw.TensorShape([2, 3])
    with np.errstate(over="ignore"):
        expected = xs[0] + xs[1] + xs[2] if np.dtype(dtype).kind in "iu" else sum(upcast(x) for x in xs)
    check(t, run(t), expected, dtype)


def test_add_n_merges_shapes_and_leaves_inputs_alone():
    a, b, c = tw.placeholder(tw.float32, [None, 3]), tw.placeholder(tw.float32, [2, None]), tw.placeholder(tw.float32)
    t = tw.add_n([a, b, c])
    assert t.shape.as_list() == [2, 3]
    xs = [sample("float32", (2, 3), seed=s) for s in range(3)]
    copies = [x.copy() for x in xs]
    check(t, run(t, dict(zip([a, b, c], xs, strict=True))), sum(upcast(x) for x in xs), "float32")
    for x, c0 in zip(xs, copies, strict=True):
        np.testing.assert_array_equal(x, c0)
    one = tw.constant([1.0])
    assert tw.add_n([one]) is one


def test_add_n_errors():
    with raises("same shape"):
        tw.add_n([tw.constant([1.0, 2.0]), tw.constant([1.0, 2.0, 3.0])])
    with raises(r"AddN node 'AddN_1'.*dtype int32.*float32"):
        tw.add_n([tw.constant([1.0]), tw.constant([1])])
    with raises("at least one"):
        tw.add_n([])
    with raises("not allowed"):
        tw.add_n([tw.constant([True]), tw.constant([False])])


# ---------------------------------------------------------------------------------------
# reductions
def _ref_reduce(op, x, axis, keep):
    ax = tuple(range(x.ndim)) if axis is None else tuple(np.atleast_1d(axis).tolist())
    ax = tuple(sorted({a % x.ndim for a in ax})) if x.ndim else ()
    dt = x.dtype
    if op == "Sum":
        r = np.sum(upcast(x), axis=ax, keepdims=keep, dtype=dt if dt.kind in "iu" else None)
    elif op == "Prod":
        r = np.prod(upcast(x), axis=ax, keepdims=keep, dtype=dt if dt.kind in "iu" else None)
    elif op == "Mean":
        r = np.mean(upcast(x).astype(np.float64 if dt.kind in "iu" else upcast(x).dtype), axis=ax, keepdims=keep)
        if dt.kind in "iu":
            r = np.trunc(r)
    elif op == "Max":
        r = np.max(x, axis=ax, keepdims=keep)
    elif op == "Min":
        r = np.min(x, axis=ax, keepdims=keep)
    elif op == "All":
        r = np.all(x, axis=ax, keepdims=keep)
    else:
        r = np.any(x, axis=ax, keepdims=keep)
    return np.asarray(r)


REDUCE = {"Sum": (tw.reduce_sum, NUM), "Mean": (tw.reduce_mean, NUM), "Prod": (tw.reduce_prod, NUM),
          "Max": (tw.reduce_max, REAL), "Min": (tw.reduce_min, REAL),
          "All": (tw.reduce_all, ["bool"]), "Any": (tw.reduce_any, ["bool"])}
AXES = [None, 0, -1, [0, 2], [], (1,), [2, 0, -1]]


@pytest.mark.parametrize("dtype", NUM + ["bool"])
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_reduction_dtypes(op, dtype):
    fn, allowed = REDUCE[op]
    x = sample(dtype, (2, 3, 4), "unit" if op == "Prod" and dtype in FLOAT_CPLX else "any", seed=11)
    if op == "Prod" and dtype in FLOAT_CPLX:
        x = (x + 1).astype(dtype)  # factors near 1 keep float16 products finite
    if dtype not in allowed:
        with raises(f"{op} node"):
            fn(tw.constant(x), axis=1)
        return
    ts = [fn(tw.constant(x), axis=1), fn(tw.constant(x))]
    for t, v, axis in zip(ts, run(ts), [1, None], strict=True):
        assert t.op.type == op
        with np.errstate(over="ignore"):
            check(t, v, _ref_reduce(op, x, axis, False), dtype)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_reduction_axes(op, axis, keep):
    fn, allowed = REDUCE[op]
    dtype = "bool" if op in ("All", "Any") else "float64"
    x = sample(dtype, (2, 3, 4), seed=12)
    t = fn(tw.constant(x), axis=axis, keep_dims=keep)
    expected = _ref_reduce(op, x, axis, keep)
    assert t.shape.is_fully_defined() and t.shape.as_list() == list(expected.shape)
    check(t, run(t), expected, dtype)


def test_reduction_aliases_and_tensor_axes():
    x = sample("float32", (2, 3, 4), seed=13)
    c = tw.constant(x)
    expected = x.sum(axis=1, keepdims=True)
    for t in [tw.reduce_sum(c, reduction_indices=1, keepdims=True), tw.reduce_sum(c, 1, True),
              tw.reduce_sum(c, axis=tw.constant(1, tw.int64), keepdims=True)]:
        check(t, run(t), expected, "float32")
    assert tw.reduce_sum(c, axis=tw.constant([1], tw.int64)).op.get_attr("Tidx") is tw.int64
    p = tw.placeholder(tw.int32, [None])
    t = tw.reduce_max(c, axis=p)  # axes known only at run time: shape unknown until then
    assert t.shape.ndims is None
    check(t, run(t, {p: [0, 2]}), x.max(axis=(0, 2)), "float32")
    k = tw.reduce_max(c, axis=p, keep_dims=True)
    assert k.shape.as_list() == [None, None, None]
    check(k, run(k, {p: [-1]}), x.max(axis=-1, keepdims=True), "float32")
    with raises("only one of axis and reduction_indices"):
        tw.reduce_sum(c, axis=0, reduction_indices=0)
    with raises("disagree"):
        tw.reduce_sum(c, axis=0, keep_dims=True, keepdims=False)


def test_reduction_with_unknown_dims():
    p = tw.placeholder(tw.float32, [None, 3])
    t = tw.reduce_mean(p, 0)
    assert t.shape.as_list() == [3]
    s = tw.reduce_sum(p)
    assert s.shape == tw.TensorShape([])
    x = sample("float32", (5, 3), seed=14)
    check(t, run(t, {p: x}), x.mean(axis=0), "float32")
    check(s, run(s, {p: x}), x.sum(), "float32", rtol=1e-5, atol=1e-5)


def test_reduction_over_all_axes_of_unknown_rank():
    p = tw.placeholder(tw.float32)
    ones = np.ones((2, 3), np.float32)
    if not _has_ops("Rank", "Range"):  # then axis=None needs a known rank
        with raises("rank"):
            tw.reduce_sum(p)
    else:  # the axes are Range(0, Rank(x), 1), computed in the graph
        t = tw.reduce_sum(p)
        axes = t.op.inputs[1]
        assert axes.op.type == "Range" and axes.op.inputs[1].op.type == "Rank"
        assert t.shape.ndims is None
        if _has_kernels("Rank", "Range"):
            check(t, run(t, {p: ones}), 6.0, "float32")
    t = tw.reduce_sum(p, axis=[0, 1])
    check(t, run(t, {p: ones}), 6.0, "float32")


def _has_ops(*names):
    from tensorweave import plugins
    return all(n in plugins.registry().ops for n in names)


def _has_kernels(*names):
    from tensorweave import plugins
    return all(n in plugins.registry().kernels.ops_for_device("CPU") for n in names)


def test_reduction_of_empty_and_scalar():
    e = tw.constant(np.zeros((0, 3), np.float32))
    ei = tw.constant(np.zeros((0, 3), np.int32))
    cases = [(tw.reduce_sum(e, 0), np.zeros(3), "float32"), (tw.reduce_prod(e, 0), np.ones(3), "float32"),
             (tw.reduce_max(e, 0), np.full(3, -np.inf), "float32"), (tw.reduce_min(e, 0), np.full(3, np.inf), "float32"),
             (tw.reduce_mean(e, 0), np.full(3, np.nan), "float32"), (tw.reduce_mean(ei, 0), np.zeros(3), "int32"),
             (tw.reduce_max(ei, 0), np.full(3, np.iinfo(np.int32).min), "int32"),
             (tw.reduce_all(tw.constant(np.zeros((0,), bool))), True, "bool"),
             (tw.reduce_any(tw.constant(np.zeros((0,), bool))), False, "bool"),
             (tw.reduce_sum(e, 1), np.zeros(0), "float32")]
    for (t, e_, dt), v in zip(cases, run([c[0] for c in cases]), strict=True):
        check(t, v, e_, dt)
    s = tw.constant(3.0)
    for t in [tw.reduce_sum(s), tw.reduce_max(s, keep_dims=True), tw.reduce_mean(s, [])]:
        assert t.shape == tw.TensorShape([])
        check(t, run(t), 3.0, "float32")


def test_integer_mean_truncates_and_does_not_overflow():
    x = np.array([[100, 101], [-3, -4]], np.int8)
    t = tw.reduce_mean(tw.constant(x), 1)
    check(t, run(t), [100, -3], "int8")
    u = tw.reduce_mean(tw.constant(np.array([250, 255], np.uint8)))
    check(u, run(u), 252, "uint8")


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 0.1, np.float16)
    t = tw.reduce_sum(tw.constant(x))
    check(t, run(t), 4096 * np.float64(np.float16(0.1)), "float16", rtol=1e-3, atol=0)


def test_max_min_propagate_nan():
    t = tw.reduce_max(tw.constant([1.0, np.nan, 3.0]))
    assert np.isnan(run(t))


@pytest.mark.parametrize("axis", [3, -4, [0, 3]], ids=str)
def test_reduction_axis_out_of_range(axis):
    c = tw.constant(np.zeros((2, 3, 4), np.float32))
    with raises(r"Sum node 'Sum'.*axis .* is out of range for input of rank 3"):
        tw.reduce_sum(c, axis)
    with raises(r"Max node.*out of range"):
        tw.reduce_max(c, axis, keep_dims=True)


def test_reduction_axis_out_of_range_at_run_time():
    p = tw.placeholder(tw.int32)
    t = tw.reduce_sum(tw.constant(np.zeros((2, 3), np.float32)), p, name="total")
    with raises(r"Sum node 'total'.*axis 2 is out of range for input of rank 2"):
        run(t, {p: 2})
    check(t, run(t, {p: -2}), np.zeros(3), "float32")  # the failure left the plan usable


def test_reduction_bad_axis_values():
    c = tw.constant(np.zeros((2, 3), np.float32))
    with raises("axis must be an int"):
        tw.reduce_sum(c, axis=[[0, 1]])
    with raises("axis must be an int"):
        tw.reduce_sum(c, axis=0.5)
    with raises(r"Sum node.*scalar or a vector"):
        tw.reduce_sum(c, axis=tw.constant([[0]]))
    with raises(r"Sum node.*dtype float32 is not allowed"):
        tw.reduce_sum(c, axis=tw.constant(0.0))
    with raises(r"All node.*must have dtype bool"):
        tw.reduce_all(c)


# ---------------------------------------------------------------------------------------
# ArgMax / ArgMin
@pytest.mark.parametrize("dtype", NUM)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduction_dtypes(op, dtype):
    fn, ref = (tw.argmax, np.argmax) if op == "ArgMax" else (tw.argmin, np.argmin)
    x = sample(dtype, (3, 4, 5), seed=15)
    if dtype not in REAL:
        with raises(f"{op} node .*dtype {dtype} is not allowed"):
            fn(tw.constant(x), 1)
        return
    ts = [fn(tw.constant(x), 1), fn(tw.constant(x), axis=-1, output_type=tw.int32), fn(tw.constant(x))]
    assert [t.shape.as_list() for t in ts] == [[3, 5], [3, 4], [4, 5]]
    for t, v, (ax, dt) in zip(ts, run(ts), [(1, "int64"), (-1, "int32"), (0, "int64")], strict=True):
        assert t.op.type == op
        check(t, v, ref(x, axis=ax), dt)


def test_arg_reduction_details():
    x = np.array([[1, 3, 3], [2, 2, 0]], np.int32)
    c = tw.constant(x)
    t = tw.argmax(c, dimension=1)  # ties: the first index
    check(t, run(t), [1, 0], "int64")
    t = tw.argmin(c, tw.constant(1, tw.int64), output_type=tw.int32)
    assert t.op.get_attr("Tidx") is tw.int64
    check(t, run(t), [0, 2], "int32")
    p = tw.placeholder(tw.float32, [None, 3])
    t = tw.argmax(p, 0)
    assert t.shape.as_list() == [3]
    check(t, run(t, {p: x.astype(np.float32)}), [1, 0, 0], "int64")
    d = tw.placeholder(tw.int32, [])
    t = tw.argmax(c, d, name="am")
    assert t.shape.as_list() == [None]
    check(t, run(t, {d: 1}), [1, 0], "int64")
    with raises(r"ArgMax node 'am'.*dimension 2 is out of range"):
        run(t, {d: 2})


def test_arg_reduction_errors():
    c = tw.constant(np.zeros((2, 3), np.float32))
    with raises(r"ArgMax node.*dimension 2 is out of range"):
        tw.argmax(c, 2)
    with raises(r"ArgMin node.*dimension -3 is out of range"):
        tw.argmin(c, -3)
    with raises(r"ArgMax node.*rank >= 1"):
        tw.argmax(tw.constant(1.0))
    with raises(r"ArgMax node.*empty"):
        tw.argmax(tw.constant(np.zeros((0, 3), np.float32)), 0)
    with raises(r"ArgMax node.*must be a scalar"):
        tw.argmax(c, tw.constant([0]))
    with raises("only one of axis and dimension"):
        tw.argmax(c, axis=0, dimension=0)
    with raises(r"output_type.*not allowed"):
        tw.argmax(c, 0, output_type=tw.int16)


# ---------------------------------------------------------------------------------------
# MatMul / BatchMatMul
def _adj(x):
    return np.conj(np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("dtype", NUM)
def test_matmul_dtypes(dtype):
    a, b = sample(dtype, (3, 4), seed=16), sample(dtype, (4, 2), seed=17)
    if dtype not in MATMUL_T:
        with raises(f"MatMul node .*dtype {dtype} is not allowed"):
            tw.matmul(tw.constant(a), tw.constant(b))
        with raises(f"BatchMatMul node .*dtype {dtype} is not allowed"):
            tw.matmul(tw.constant(a[None]), tw.constant(b[None]))
        return
    t = tw.matmul(tw.constant(a), tw.constant(b))
    bt = tw.matmul(tw.constant(np.stack([a, a])), tw.constant(np.stack([b, 2 * b])))
    assert t.op.type == "MatMul" and bt.op.type == "BatchMatMul"
    assert t.shape.as_list() == [3, 2] and bt.shape.as_list() == [2, 3, 2]
    ints = np.dtype(dtype).kind in "iu"
    e = a @ b if ints else upcast(a) @ upcast(b)
    e2 = np.stack([e, 2 * e])
    tl = dict(rtol=5e-2, atol=5e-2) if dtype == "float16" else tol(dtype)
    v, bv = run([t, bt])
    check(t, v, e, dtype, **tl)
    check(bt, bv, e2, dtype, **tl)


@pytest.mark.parametrize("ta,tb,adj_a,adj_b", [
    (False, False, False, False), (True, False, False, False), (False, True, False, False),
    (True, True, False, False), (False, False, True, False), (False, False, False, True),
    (False, False, True, True), (True, False, False, True)])
@pytest.mark.parametrize("batch", [False, True])
def test_matmul_transpose_and_adjoint(ta, tb, adj_a, adj_b, batch):
    a = sample("complex128", (2, 3, 4), seed=18)
    b = sample("complex128", (2, 4, 5), seed=19)
    if ta:
        a = np.swapaxes(a, -1, -2)
    if adj_a:
        a = _adj(a)
    if tb:
        b = np.swapaxes(b, -1, -2)
    if adj_b:
        b = _adj(b)
    if not batch:
        a, b = a[0], b[0]
    ea = np.swapaxes(a, -1, -2) if ta else _adj(a) if adj_a else a
    eb = np.swapaxes(b, -1, -2) if tb else _adj(b) if adj_b else b
    t = tw.matmul(tw.constant(a), tw.constant(b), transpose_a=ta, transpose_b=tb, adjoint_a=adj_a, adjoint_b=adj_b)
    assert t.shape.as_list() == ([2, 3, 5] if batch else [3, 5])
    check(t, run(t), ea @ eb, "complex128")
    # for a real dtype transpose and adjoint are the same thing
    ra, rb = a.real.astype(np.float32), b.real.astype(np.float32)
    t = tw.matmul(ra, tw.constant(rb), transpose_a=ta, transpose_b=tb, adjoint_a=adj_a, adjoint_b=adj_b)
    check(t, run(t), ea.real @ eb.real, "float32")


@pytest.mark.parametrize("sa,sb,out", [
    ((3, 4), (2, 4, 5), (2, 3, 5)),
    ((2, 3, 4), (4, 5), (2, 3, 5)),
    ((1, 2, 3, 4), (5, 1, 4, 2), (5, 2, 3, 2)),
    ((2, 1, 3, 4), (3, 4, 2), (2, 3, 3, 2)),
    ((0, 3, 4), (4, 2), (0, 3, 2)),
    ((2, 3, 0), (2, 0, 2), (2, 3, 2)),
])
def test_batch_matmul_broadcasting(sa, sb, out):
    a, b = sample("float64", sa, seed=20), sample("float64", sb, seed=21)
    t = tw.matmul(tw.constant(a), tw.constant(b))
    assert t.op.type == "BatchMatMul" and t.shape.as_list() == list(out)
    check(t, run(t), np.matmul(a, b), "float64")


def test_batch_matmul_with_unknown_dims():
    a = tw.placeholder(tw.float32, [None, 3, 4])
    b = tw.placeholder(tw.float32, [4, None])
    t = tw.matmul(a, b)
    assert t.op.type == "BatchMatMul" and t.shape.as_list() == [None, 3, None]
    u = tw.matmul(tw.placeholder(tw.float32), tw.placeholder(tw.float32))  # unknown rank: BatchMatMul, as TF
    assert u.op.type == "BatchMatMul" and u.shape.ndims is None
    x, y = sample("float32", (2, 3, 4), seed=22), sample("float32", (4, 6), seed=23)
    check(t, run(t, {a: x, b: y}), x @ y, "float32")
    with raises(r"BatchMatMul node 'MatMul_1'.*incompatible"):
        run(u, {u.op.inputs[0]: x, u.op.inputs[1]: np.zeros((3, 6), np.float32)})
    with raises(r"BatchMatMul node 'MatMul_1'.*rank >= 2"):
        run(u, {u.op.inputs[0]: x, u.op.inputs[1]: np.zeros(4, np.float32)})


def test_matmul_errors():
    with raises(r"MatMul node 'MatMul'.*inner dimensions 3 != 2"):
        tw.matmul(tw.constant(np.ones((2, 3))), tw.constant(np.ones((2, 3))))
    tw.matmul(tw.constant(np.ones((2, 3))), tw.constant(np.ones((2, 3))), transpose_b=True)
    with raises(r"BatchMatMul node.*incompatible.*inner dimension 3.*has 2"):
        tw.matmul(tw.constant(np.ones((4, 2, 3))), tw.constant(np.ones((4, 2, 3))))
    with raises(r"BatchMatMul node.*batch dimensions.*cannot be broadcast"):
        tw.matmul(tw.constant(np.ones((4, 2, 3))), tw.constant(np.ones((5, 3, 3))))
    with raises(r"BatchMatMul node.*rank >= 2"):
        tw.matmul(tw.constant(np.ones((2, 3, 4))), tw.constant(np.ones(4)))
    with raises(r"BatchMatMul node.*rank >= 2, got shape \(3,\)"):
        tw.matmul(tw.constant(np.ones((2, 3))), tw.placeholder(tw.float64, [3]))
    with raises(r"MatMul node 'raw'.*must have rank 2"):  # the MatMul op itself, not via tw.matmul
        apply_op("MatMul", [tw.constant(np.ones((2, 3))), tw.constant(np.ones(3))], name="raw")
    with raises("only one of transpose_a and adjoint_a"):
        tw.matmul(tw.constant(np.ones((2, 2))), tw.constant(np.ones((2, 2))), transpose_a=True, adjoint_a=True)
    with raises(r"MatMul node 'mm'.*dtype"):
        tw.matmul(tw.constant(np.ones((2, 2), np.float32)), tw.constant(np.ones((2, 2))), name="mm")


# ---------------------------------------------------------------------------------------
# MatrixInverse / MatrixDeterminant
def _well_conditioned(dtype, shape, seed):
    x = upcast(sample(dtype, shape, seed=seed))
    n = shape[-1]
    return (x + 2 * n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", NUM)
def test_matrix_inverse(dtype, adjoint):
    if dtype not in LINALG_T:
        with raises(f"MatrixInverse node .*dtype {dtype} is not allowed"):
            tw.matrix_inverse(tw.constant(np.eye(2, dtype=dtype)))
        return
    x = _well_conditioned(dtype, (2, 3, 3), seed=24)
    t = tw.matrix_inverse(tw.constant(x), adjoint=adjoint)
    assert t.shape.as_list() == [2, 3, 3]
    xx = upcast(x)
    e = np.linalg.inv(_adj(xx) if adjoint else xx)
    check(t, run(t), e, dtype, **(tol(dtype) if dtype != "float32" else dict(rtol=1e-4, atol=1e-5)))


@pytest.mark.parametrize("dtype", NUM)
def test_matrix_determinant(dtype):
    if dtype not in LINALG_T:
        with raises(f"MatrixDeterminant node .*dtype {dtype} is not allowed"):
            tw.matrix_determinant(tw.constant(np.eye(2, dtype=dtype)))
        return
    x = _well_conditioned(dtype, (2, 3, 3), seed=25)
    t = tw.matrix_determinant(tw.constant(x))
    assert t.shape.as_list() == [2]
    check(t, run(t), np.linalg.det(upcast(x)), dtype, **(tol(dtype) if dtype != "float32" else dict(rtol=1e-4)))


def test_linalg_shapes_and_edge_cases():
    p = tw.placeholder(tw.float64, [None, None, 2])
    inv, det = tw.matrix_inverse(p), tw.matrix_determinant(p)
    assert inv.shape.as_list() == [None, 2, 2] and det.shape.as_list() == [None]
    x = _well_conditioned("float64", (4, 2, 2), seed=26)
    vi, vd = run([inv, det], {p: x})
    check(inv, vi, np.linalg.inv(x), "float64")
    check(det, vd, np.linalg.det(x), "float64")
    e = tw.constant(np.zeros((0, 0)))
    check(tw.matrix_determinant(e), run(tw.matrix_determinant(e)), 1.0, "float64")
    check(tw.matrix_inverse(e), run(tw.matrix_inverse(e)), np.zeros((0, 0)), "float64")
    s = tw.constant([[2.0, 1.0], [1.0, 1.0]])
    check(tw.matrix_determinant(s), run(tw.matrix_determinant(s)), 1.0, "float32")


def test_linalg_errors():
    with raises(r"MatrixInverse node 'MatrixInverse'.*square"):
        tw.matrix_inverse(tw.constant(np.ones((2, 3))))
    with raises(r"MatrixDeterminant node.*rank >= 2"):
        tw.matrix_determinant(tw.constant(np.ones(3)))
    with raises(r"MatrixDeterminant node.*square"):
        tw.matrix_determinant(tw.constant(np.ones((4, 3, 2))))
    p = tw.placeholder(tw.float64)
    t = tw.matrix_inverse(p, name="inv_p")
    with raises(r"MatrixInverse node 'inv_p'.*square"):
        run(t, {p: np.ones((2, 3))})


@pytest.mark.parametrize("x", [
    [[1.0, 2.0], [2.0, 4.0]],
    [[0.0, 0.0], [0.0, 0.0]],
    [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]],  # one singular matrix in a batch
], ids=["rank1", "zero", "batch"])
def test_singular_matrix_inverse_fails_at_run_time(x):
    t = tw.matrix_inverse(tw.constant(np.array(x)), name="my_inverse")
    with raises(r"MatrixInverse node 'my_inverse'.*not invertible"):
        run(t)


# ---------------------------------------------------------------------------------------
# API surface
def test_public_wrappers_are_exported():
    from tensorweave.ops import math_ops
    for name in ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_all",
                 "reduce_any", "argmax", "argmin", "matrix_inverse", "matrix_determinant", "add_n", "matmul",
                 "conj", "abs", "cast", "truediv"]:
        assert name in math_ops.__all__
        assert getattr(tw, name) is getattr(math_ops, name)
    assert tw.reduce_sum.__name__ == "reduce_sum"
