"""Reductions, ArgMax/ArgMin, BiasAddGrad and L2Loss against NumPy and the CPU kernels."""

import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(1)
REDUCE = {"Sum": (tw.reduce_sum, np.sum), "Mean": (tw.reduce_mean, np.mean), "Max": (tw.reduce_max, np.max),
          "Min": (tw.reduce_min, np.min), "Prod": (tw.reduce_prod, np.prod)}


@pytest.mark.parametrize("axes", [None, 0, 1, 2, -1, [0, 2], [1, 2], [0, 1, 2], []])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_over_axes(ocl, name, axes, keep):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    fn, np_fn = REDUCE[name]
    got = ocl.on_opencl(lambda x: fn(x, axis=axes, keepdims=keep), {"x": x})
    want = np_fn(x, axis=tuple(axes) if isinstance(axes, list) else axes, keepdims=keep).astype(np.float32)
    ocl.assert_same(got, want, rtol=2e-6)


@pytest.mark.parametrize("shape,axis", [((3, 1000), 1), ((1000, 3), 0), ((5000,), 0), ((2, 300, 2), 1),
                                        ((4, 1, 3), 1), ((0, 4), 0), ((4, 0), 1)])
def test_large_and_degenerate_shapes(ocl, shape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    got = ocl.on_opencl(lambda x: [tw.reduce_sum(x, axis), tw.reduce_max(x, axis), tw.reduce_mean(x, axis)],
                        {"x": x})
    ocl.assert_same(got[0], x.sum(axis), rtol=1e-5, atol=1e-4)
    ocl.assert_same(got[1], np.max(x, axis, initial=-np.inf))
    n = x.shape[axis]
    mean = x.sum(axis) / n if n else np.full(got[2].shape, np.nan, np.float32)
    ocl.assert_same(got[2], mean.astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_other_dtypes(ocl, dtype):
    x = RNG.integers(-50, 50, (4, 7)).astype(dtype)
    got, want = ocl.both(lambda x: [tw.reduce_sum(x, 1), tw.reduce_mean(x, 0), tw.reduce_max(x), tw.reduce_min(x, 1),
                                    tw.reduce_prod(x, 0)], {"x": x})
    for g, w in zip(got, want):
        ocl.assert_same(g, w)


def test_all_any(ocl):
    x = RNG.random((4, 6)) > 0.3
    got = ocl.on_opencl(lambda x: [tw.reduce_all(x, 1), tw.reduce_any(x, 0), tw.reduce_all(x)], {"x": x})
    ocl.assert_same(got[0], x.all(1))
    ocl.assert_same(got[1], x.any(0))
    ocl.assert_same(got[2], x.all())


def test_nan_and_empty_max(ocl):
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    got = ocl.on_opencl(lambda x: [tw.reduce_max(x, 1), tw.reduce_min(x, 1), tw.argmax(x, 1)], {"x": x})
    ocl.assert_same(got[0], np.max(x, 1))
    ocl.assert_same(got[1], np.min(x, 1))
    ocl.assert_same(got[2], np.argmax(x, 1).astype(np.int64))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_argmax_argmin(ocl, axis, dtype):
    x = RNG.integers(0, 5, (6, 7)).astype(dtype)  # ties: the first index wins
    got = ocl.on_opencl(lambda x: [tw.argmax(x, axis), tw.argmin(x, axis, output_type=tw.int32)], {"x": x})
    ocl.assert_same(got[0], np.argmax(x, axis).astype(np.int64))
    ocl.assert_same(got[1], np.argmin(x, axis).astype(np.int32))


def test_argmax_of_an_empty_axis_is_an_error(ocl):
    with pytest.raises(tw.errors.InvalidArgumentError, match="empty"):
        ocl.on_opencl(lambda x: tw.argmax(x, 1), {"x": np.zeros((2, 0), np.float32)})


def test_bad_axis_is_an_error(ocl):
    with pytest.raises(tw.errors.InvalidArgumentError, match="out of range"):
        g = tw.Graph()
        with g.as_default(), tw.device("/device:OPENCL:0"):
            x = tw.placeholder(tw.float32, None)
            y = tw.reduce_sum(x, 3)
        with tw.Session(graph=g) as s:
            s.run(y, {x: np.zeros((2, 2), np.float32)})


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_bias_add_and_grad(ocl, fmt):
    v = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    c = 3 if fmt == "NCHW" else 5
    b = RNG.standard_normal(c).astype(np.float32)
    got, want = ocl.both(lambda v, b: [tw.nn.bias_add(v, b, data_format=fmt),
                                       tw.gradients(tw.reduce_sum(tw.nn.bias_add(v, b, data_format=fmt) * v), [b])[0]],
                         {"v": v, "b": b})
    ocl.assert_same(got[0], want[0])
    ocl.assert_same(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_l2_loss(ocl):
    t = RNG.standard_normal((30, 20)).astype(np.float32)
    got = ocl.on_opencl(lambda t: tw.nn.l2_loss(t), {"t": t})
    ocl.assert_same(got, np.float32((t.astype(np.float64) ** 2).sum() / 2), rtol=1e-5)
