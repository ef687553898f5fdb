"""Element-wise kernels against the CPU kernels and NumPy: values, dtypes, shapes and
broadcasting."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave_opencl.kernels.elementwise import BINARY, UNARY

RNG = np.random.default_rng(0)
X = np.concatenate([np.linspace(-3, 3, 23), [0.0, -0.0, 0.5, -0.5, 2.5]]).astype(np.float32)
POSITIVE = np.linspace(0.05, 4, 17).astype(np.float32)


def _unary_input(op, dtype):
    if dtype == "bool":
        return np.array([True, False, True])
    base = POSITIVE if op in ("Log", "Sqrt", "Rsqrt", "Reciprocal") else X
    if op == "Log1p":
        base = np.abs(X)
    if np.dtype(dtype).kind in "iu":
        base = np.arange(-7, 8) if dtype != "uint8" else np.arange(0, 15)
    return base.astype(dtype)


UNARY_CASES = [(op, t) for op, (types, _f, _i) in UNARY.items()
               for t in (types if op == "LogicalNot" else [t for t in types if t in ("float32", "float64", "int32")])]
UNARY_CASES.append(("LogicalNot", "bool"))


@pytest.mark.parametrize("op,dtype", sorted(set(UNARY_CASES)))
def test_unary(ocl, op, dtype):
    x = _unary_input(op, dtype)
    got, want = ocl.both(lambda x: apply_op(op, [x]), {"x": x})
    ocl.assert_same(got, want, rtol=3e-6 if dtype == "float32" else None)


def _binary_inputs(op, dtype, sa, sb):
    if dtype == "bool":
        return RNG.random(sa) > 0.5, RNG.random(sb) > 0.5
    kind = np.dtype(dtype).kind
    if kind == "f":
        a = RNG.uniform(-3, 3, sa)
        b = RNG.uniform(-3, 3, sb)
        if op == "Pow":
            a = np.abs(a) + 0.1
        if op in ("Div", "RealDiv", "FloorDiv", "FloorMod"):
            b = np.where(np.abs(b) < 0.2, 0.7, b)
    else:
        lo = 0 if dtype == "uint8" else -9
        a = RNG.integers(lo, 10, sa)
        b = RNG.integers(lo, 10, sb)
        if op == "Pow":
            b = np.abs(b) % 4
        if op in ("Div", "RealDiv", "FloorDiv", "FloorMod"):
            b = np.where(b == 0, 3, b)
    return np.asarray(a).astype(dtype), np.asarray(b).astype(dtype)


BINARY_CASES = [(op, t) for op, entry in BINARY.items()
                for t in ([x for x in entry[0] if x in ("float32", "int32", "bool")]
                          if op not in ("LogicalAnd", "LogicalOr") else ["bool"])]


@pytest.mark.parametrize("op,dtype", BINARY_CASES)
def test_binary_same_shape(ocl, op, dtype):
    a, b = _binary_inputs(op, dtype, (4, 5), (4, 5))
    got, want = ocl.both(lambda a, b: apply_op(op, [a, b]), {"a": a, "b": b})
    ocl.assert_same(got, want, rtol=2e-6)


SHAPES = [((3, 4), ()), ((), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)), ((4,), (2, 3, 4)),
          ((1, 5), (5,)), ((2, 1, 3, 1), (1, 4, 1, 5)), ((0, 3), (3,)), ((70, 64), (64,))]


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "RealDiv", "Maximum", "Less", "SquaredDifference"])
def test_binary_broadcasting(ocl, op, sa, sb):
    a, b = _binary_inputs(op, "float32", sa, sb)
    got, want = ocl.both(lambda a, b: apply_op(op, [a, b]), {"a": a, "b": b})
    ocl.assert_same(got, want)
    np_fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "RealDiv": np.divide, "Maximum": np.maximum,
             "Less": np.less, "SquaredDifference": lambda a, b: (a - b) ** 2}[op]
    ocl.assert_same(got, np_fn(a, b).astype(want.dtype), rtol=2e-6)


def test_float64_and_int64(ocl):
    a = RNG.standard_normal((3, 4))
    b = RNG.standard_normal((4,))
    got = ocl.on_opencl(lambda a, b: [a * b + a, tw.exp(a), tw.reduce_sum(a, 1)], {"a": a, "b": b})
    ocl.assert_same(got[0], a * b + a)
    ocl.assert_same(got[1], np.exp(a))
    ocl.assert_same(got[2], a.sum(1))
    i = np.array([2**40, -5, 7], np.int64)
    got = ocl.on_opencl(lambda i: [i * 3, i // 2, tw.reduce_max(i)], {"i": i})
    ocl.assert_same(got[0], i * 3)
    ocl.assert_same(got[1], i // 2)
    ocl.assert_same(got[2], i.max())


def test_nan_propagation(ocl):
    a = np.array([np.nan, 1.0, -1.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, 2.0, np.nan], np.float32)
    got = ocl.on_opencl(lambda a, b: [tw.maximum(a, b), tw.minimum(a, b), tw.nn.relu(a)], {"a": a, "b": b})
    ocl.assert_same(got[0], np.maximum(a, b))
    ocl.assert_same(got[1], np.minimum(a, b))
    ocl.assert_same(got[2], np.maximum(a, 0))


def test_integer_division_semantics(ocl):
    a = np.array([7, -7, 7, -7, 0, -2147483648], np.int32)
    b = np.array([2, 2, -2, -2, 3, -1], np.int32)
    got = ocl.on_opencl(lambda a, b: [tw.div(a, b), tw.floordiv(a, b), tw.floormod(a, b)], {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], [3, -3, -3, 3, 0, -2147483648])   # truncation (C), as TF's Div
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(got[1], np.floor_divide(wide_a, wide_b).astype(np.int32))
    np.testing.assert_array_equal(got[2], np.mod(wide_a, wide_b).astype(np.int32))
    # a kernel cannot raise: division by zero gives 0 (the CPU raises InvalidArgument)
    zero = ocl.on_opencl(lambda a, b: tw.div(a, b), {"a": np.array([5], np.int32), "b": np.array([0], np.int32)})
    np.testing.assert_array_equal(zero, [0])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "bool"),
                                     ("bool", "float32"), ("int32", "int64"), ("float64", "float32"),
                                     ("float32", "float64"), ("int64", "int32"), ("uint8", "float32"),
                                     ("float32", "uint8"), ("int32", "bool")])
def test_cast(ocl, src, dst):
    x = np.array([-2.7, -1.0, -0.5, 0.0, 0.4, 1.0, 2.5, 100.2])
    if src == "uint8" or dst == "uint8":
        x = np.abs(x)
    x = x.astype(src)
    got, want = ocl.both(lambda x: tw.cast(x, getattr(tw, dst if dst != "bool" else "bool")), {"x": x})
    ocl.assert_same(got, want)


def test_add_n_and_gradients_of_activations(ocl):
    xs = {f"x{i}": RNG.standard_normal((3, 4)).astype(np.float32) for i in range(4)}
    got, want = ocl.both(lambda **k: tw.add_n(list(k.values())), xs)
    ocl.assert_same(got, want)
    g = RNG.standard_normal((5, 6)).astype(np.float32)
    f = RNG.standard_normal((5, 6)).astype(np.float32) * 4
    for op in ("ReluGrad", "Relu6Grad", "EluGrad", "SoftplusGrad"):
        got, want = ocl.both(lambda g, f, op=op: apply_op(op, [g, f]), {"g": g, "f": f})
        ocl.assert_same(got, want, rtol=3e-6)
