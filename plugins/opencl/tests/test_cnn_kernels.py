"""Batch normalization, LRN, depthwise convolution and resizing on the OpenCL device against
the CPU kernels: values and gradients over shapes, layouts, strides, paddings, dilations and
resize modes, and a training step of a small conv net with batch norm with its CNN ops on the
device. (The conformance kit checks every op's table cases too.)"""

import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(5)


def _close(got, want, tol):
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _tol(dtype):
    return 1e-4 if dtype == np.float32 else 1e-10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_and_gradients(ocl, dtype, fmt, training):
    x = (RNG.standard_normal((3, 5, 4, 6)) * 2 + 1).astype(dtype)
    c = 6 if fmt == "NHWC" else 5
    feeds = {"x": x, "scale": RNG.uniform(0.5, 2, c).astype(dtype), "offset": RNG.standard_normal(c).astype(dtype),
             "mean": RNG.standard_normal(c).astype(dtype), "var": RNG.uniform(0.5, 2, c).astype(dtype),
             "w": RNG.standard_normal(x.shape).astype(dtype)}

    def build(x, scale, offset, mean, var, w):
        kw = {} if training else {"mean": mean, "variance": var, "is_training": False}
        y, m, v = tw.nn.fused_batch_norm(x, scale, offset, epsilon=0.01, data_format=fmt, **kw)
        return [y, m, v] + tw.gradients(tw.reduce_sum(y * w), [x, scale, offset])

    got, want = ocl.run_on(ocl.OPENCL0, build, feeds)[0], ocl.run_on(ocl.CPU0, build, feeds)[0]
    _close(got, want, _tol(dtype))


@pytest.mark.parametrize("args", [(5, 1.0, 1.0, 0.5), (2, 2.0, 0.1, 0.75)])
def test_lrn_and_gradient(ocl, args):
    feeds = {"x": RNG.standard_normal((2, 3, 4, 9)).astype(np.float32),
             "w": RNG.standard_normal((2, 3, 4, 9)).astype(np.float32)}

    def build(x, w):
        y = tw.nn.lrn(x, *args)
        return [y] + tw.gradients(tw.reduce_sum(y * w), [x])

    got, placement = ocl.run_on(ocl.OPENCL0, build, feeds)
    want, _ = ocl.run_on(ocl.CPU0, build, feeds)
    assert all("OPENCL" in d for n, d in placement.items() if n.split("/")[-1].startswith("LRN"))
    _close(got, want, 1e-4)


@pytest.mark.parametrize("xs,fs,strides,padding,dil,fmt", [
    ((2, 5, 6, 3), (3, 3, 3, 2), (1, 1), "SAME", (1, 1), "NHWC"),
    ((1, 7, 7, 2), (3, 2, 2, 1), (2, 2), "VALID", (1, 1), "NHWC"),
    ((1, 6, 5, 2), (2, 2, 2, 3), (2, 1), "SAME", (1, 1), "NCHW"),
    ((1, 7, 7, 2), (3, 3, 2, 2), (1, 1), "SAME", (2, 2), "NHWC"),
])
def test_depthwise_and_gradients(ocl, xs, fs, strides, padding, dil, fmt):
    x = RNG.standard_normal(xs).astype(np.float32)
    if fmt == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    feeds = {"x": x, "f": RNG.standard_normal(fs).astype(np.float32)}
    st = [1, *strides, 1] if fmt == "NHWC" else [1, 1, *strides]
    dl = [1, *dil, 1] if fmt == "NHWC" else [1, 1, *dil]

    def build(x, f):
        y = tw.nn.depthwise_conv2d_native(x, f, st, padding, data_format=fmt, dilations=dl)
        return [y] + tw.gradients(tw.reduce_sum(y * y), [x, f])

    got, want = ocl.run_on(ocl.OPENCL0, build, feeds)[0], ocl.run_on(ocl.CPU0, build, feeds)[0]
    _close(got, want, 1e-4)


@pytest.mark.parametrize("xs,size,ac,hp", [((2, 3, 4, 2), (5, 7), False, False), ((1, 6, 8, 3), (3, 3), False, False),
                                           ((1, 3, 4, 2), (5, 6), True, False), ((1, 3, 4, 2), (7, 5), False, True)])
def test_resize_and_gradients(ocl, xs, size, ac, hp):
    feeds = {"x": RNG.standard_normal(xs).astype(np.float32),
             "w": RNG.standard_normal((xs[0], *size, xs[3])).astype(np.float32)}

    def build(x, w):
        b = tw.image.resize_bilinear(x, size, align_corners=ac, half_pixel_centers=hp)
        n = tw.image.resize_nearest_neighbor(x, size, align_corners=ac, half_pixel_centers=hp)
        return [b, n] + tw.gradients(tw.reduce_sum(b * w) + tw.reduce_sum(n * w * w), [x])

    got, placement = ocl.run_on(ocl.OPENCL0, build, feeds)
    want, _ = ocl.run_on(ocl.CPU0, build, feeds)
    resize_nodes = {n: d for n, d in placement.items() if "Resize" in n.split("/")[-1]}
    assert len(resize_nodes) >= 4 and all("OPENCL" in d for d in resize_nodes.values()), resize_nodes
    _close(got, want, 1e-5)


def test_resize_integer_images(ocl):
    img = RNG.integers(0, 255, (2, 4, 5, 3)).astype(np.uint8)
    got = ocl.on_opencl(lambda x: [tw.image.resize_bilinear(x, [7, 3]), tw.image.resize_nearest_neighbor(x, [7, 3])],
                        {"x": img})
    want = ocl.run_on(ocl.CPU0, lambda x: [tw.image.resize_bilinear(x, [7, 3]),
                                           tw.image.resize_nearest_neighbor(x, [7, 3])], {"x": img})[0]
    _close(got, want, 1e-4)


def test_conv_net_with_batch_norm_trains_on_opencl():
    x = RNG.standard_normal((16, 6, 6, 2)).astype(np.float32)
    labels = (x[..., 0].sum((1, 2)) > 0).astype(np.int64)
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        xp, yp = tw.placeholder(tw.float32, x.shape), tw.placeholder(tw.int64, [16])
        w = tw.Variable(RNG.standard_normal((3, 3, 2, 2)).astype(np.float32) * 0.3)
        h = tw.nn.depthwise_conv2d(xp, w, [1, 1, 1, 1], "SAME")
        h = tw.nn.relu(tw.layers.batch_normalization(h, training=True))
        h = tw.image.resize_bilinear(h, [3, 3])
        logits = tw.layers.dense(tw.reshape(h, [16, -1]), 2)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=yp, logits=logits))
        with tw.control_dependencies(tw.get_collection(tw.GraphKeys.UPDATE_OPS)):
            train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tw.global_variables_initializer()
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(init)
        md = tw.RunMetadata()
        first = s.run(loss, {xp: x, yp: labels})
        for _ in range(30):
            s.run(train, {xp: x, yp: labels}, run_metadata=md)
        last = s.run(loss, {xp: x, yp: labels})
    cnn = {n: d for n, d in md.placement.items()
           if any(k in n for k in ("FusedBatchNorm", "Depthwise", "Resize"))}
    assert cnn and all("OPENCL" in d for d in cnn.values()), cnn
    assert last < first
