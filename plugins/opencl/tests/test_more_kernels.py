"""Slicing, gathers, scans, shape helpers, convolution and pooling, InTopK, CheckNumerics
against the CPU kernels and NumPy."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op

RNG = np.random.default_rng(6)


def test_strided_slices(ocl):
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    got, want = ocl.both(lambda x: [x[1:3, ::-2, 4], x[..., 1:5:3], x[:, tw.newaxis, -1], x[::-1, 2:, :1]],
                         {"x": x})
    for g, w, ref in zip(got, want, [x[1:3, ::-2, 4], x[..., 1:5:3], x[:, None, -1], x[::-1, 2:, :1]]):
        ocl.assert_same(g, w)
        ocl.assert_same(g, ref)


def test_strided_slice_gradient(ocl):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    got, want = ocl.both(lambda x: tw.gradients(tw.reduce_sum(x[1:4:2, ::-1] * 3.0), [x])[0], {"x": x})
    ocl.assert_same(got, want)
    expected = np.zeros_like(x)
    expected[1:4:2, :] = 3.0
    ocl.assert_same(got, expected)


def test_split_unpack(ocl):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    got = ocl.on_opencl(lambda x: [*tw.split(x, 3, axis=1), *tw.split(x, [1, -1, 2], axis=0), *tw.unstack(x, axis=1)],
                        {"x": x})
    want = [*np.split(x, 3, axis=1), *np.split(x, [1, 2], axis=0), *[x[:, i] for i in range(6)]]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        ocl.assert_same(g, w)


@pytest.mark.parametrize("axis", [0, 1])
def test_gather(ocl, axis):
    params = RNG.standard_normal((5, 4)).astype(np.float32)
    idx = np.array([[3, 0], [2, 2]], np.int32)
    got, want = ocl.both(lambda p, i: tw.gather(p, i, axis=axis) if axis else tw.gather(p, i), {"p": params, "i": idx})
    ocl.assert_same(got, want)
    ocl.assert_same(got, np.take(params, idx, axis=axis))
    # an index out of range reads zeros (the CPU kernel raises)
    bad = ocl.on_opencl(lambda p, i: tw.gather(p, i), {"p": params, "i": np.array([1, 9], np.int32)})
    ocl.assert_same(bad, np.stack([params[1], np.zeros(4, np.float32)]))


def test_gather_gradient_is_a_segment_sum(ocl):
    params = RNG.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([1, 4, 1, 0], np.int32)
    got, want = ocl.both(lambda p, i: tw.gradients(tw.reduce_sum(tw.gather(p, i) ** 2), [p])[0],
                         {"p": params, "i": idx})
    g, w = (np.asarray(v.values if hasattr(v, "values") else v) for v in (got, want))
    ocl.assert_same(g, w)
    data = RNG.standard_normal((5, 2)).astype(np.float32)
    ids = np.array([2, 0, 2, -1, 1], np.int32)
    got, want = ocl.both(lambda d, i: tw.unsorted_segment_sum(d, i, 4), {"d": data, "i": ids})
    ocl.assert_same(got, want)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_cumprod(ocl, exclusive, reverse):
    x = RNG.uniform(0.5, 1.5, (3, 5)).astype(np.float32)
    got, want = ocl.both(lambda x: [tw.cumsum(x, 1, exclusive=exclusive, reverse=reverse),
                                    tw.cumprod(x, 0, exclusive=exclusive, reverse=reverse)], {"x": x})
    for g, w in zip(got, want):
        ocl.assert_same(g, w, rtol=1e-6)


def test_shape_helpers(ocl):
    got, want = ocl.both(
        lambda a, b: [tw.range(2, 11, 3), tw.range(0.5, 2.0, 0.25), tw.invert_permutation([2, 0, 1]),
                      *apply_op("BroadcastGradientArgs", [tw.shape(a), tw.shape(b)]),
                      apply_op("ReducedShape", [tw.shape(a), tw.constant([1])]), *tw.setdiff1d([1, 2, 3, 4], [2, 4])],
        {"a": np.zeros((3, 1, 4), np.float32), "b": np.zeros((5, 1), np.float32)})
    for g, w in zip(got, want):
        ocl.assert_same(g, w)


def test_dynamic_shape_gradients_stay_on_the_device(ocl):
    # unknown shapes: the gradient of a broadcasting Add needs BroadcastGradientArgs at run time
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        a = tw.placeholder(tw.float32, None)
        b = tw.placeholder(tw.float32, None)
        ga, gb = tw.gradients(tw.reduce_sum((a + b) * a), [a, b])
    with tw.Session(graph=g) as sess:
        md = tw.RunMetadata()
        av, bv = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
        out = sess.run([ga, gb], {a: av, b: bv}, run_metadata=md)
    assert all("OPENCL" in d for d in md.placement.values())
    assert any("BroadcastGradientArgs" in n for n in md.placement)
    np.testing.assert_allclose(out[0], 2 * av + bv)
    np.testing.assert_allclose(out[1], av.sum(0))


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("padding,strides", [("SAME", 1), ("VALID", 2), ("SAME", 2)])
def test_conv2d_and_gradients(ocl, fmt, padding, strides):
    x = RNG.standard_normal((2, 7, 6, 3)).astype(np.float32)
    if fmt == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    f = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    st = [1, strides, strides, 1] if fmt == "NHWC" else [1, 1, strides, strides]

    def build(x, f):
        y = tw.nn.conv2d(x, f, st, padding, data_format=fmt)
        return [y, *tw.gradients(tw.reduce_sum(y * y), [x, f])]

    got, want = ocl.both(build, {"x": x, "f": f})
    for g, w in zip(got, want):
        ocl.assert_same(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("pool", ["max_pool", "avg_pool"])
def test_pooling_and_gradients(ocl, fmt, pool):
    x = RNG.standard_normal((2, 5, 7, 3)).astype(np.float32)
    x[0, 0, 0, 0] = x[0, 0, 1, 0]  # a tie: the first maximum takes the gradient
    if fmt == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    k = [1, 2, 3, 1] if fmt == "NHWC" else [1, 1, 2, 3]
    s = [1, 2, 2, 1] if fmt == "NHWC" else [1, 1, 2, 2]

    def build(x):
        y = getattr(tw.nn, pool)(x, k, s, "SAME", data_format=fmt)
        return [y, tw.gradients(tw.reduce_sum(y * y), [x])[0]]

    got, want = ocl.both(build, {"x": x})
    for g, w in zip(got, want):
        ocl.assert_same(g, w, rtol=1e-5, atol=1e-6)


def test_in_top_k_and_check_numerics(ocl):
    pred = RNG.standard_normal((6, 5)).astype(np.float32)
    pred[2, 1] = np.nan
    targets = np.array([0, 4, 1, 3, 7, 2], np.int32)
    got, want = ocl.both(lambda p, t: tw.nn.in_top_k(p, t, 2), {"p": pred, "t": targets})
    ocl.assert_same(got, want)
    ok = ocl.on_opencl(lambda x: tw.check_numerics(x, "fine"), {"x": np.ones(3, np.float32)})
    ocl.assert_same(ok, np.ones(3, np.float32))
    with pytest.raises(tw.errors.InvalidArgumentError, match="bad values : Tensor had NaN values"):
        ocl.on_opencl(lambda x: tw.check_numerics(tw.log(x), "bad values"), {"x": -np.ones(3, np.float32)})
