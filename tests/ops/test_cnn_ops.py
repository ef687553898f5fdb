"""LRN, depthwise and separable convolution, conv2d_transpose and image resizing: values
against NumPy references (loops over pixels are fine here), gradients against float64 finite
differences, the layers, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.contrib import layers as contrib_layers
from tensorweave.testing.gradient_checker import check_gradients

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _fresh_graph():
    tw.reset_default_graph()
    yield
    tw.reset_default_graph()


def _run(t, feed=None):
    with tw.Session() as s:
        return s.run(t, feed)


# ---------------------------------------------------------------------------------------
# LRN
def _lrn_ref(x, r, bias, alpha, beta):
    out = np.empty_like(x)
    c = x.shape[-1]
    for d in range(c):
        sq = np.square(x[..., max(d - r, 0):min(d + r + 1, c)]).sum(-1)
        out[..., d] = x[..., d] / (bias + alpha * sq) ** beta
    return out


@pytest.mark.parametrize("args", [(5, 1.0, 1.0, 0.5), (2, 2.0, 0.1, 0.75), (0, 1.0, 0.5, 1.0)])
def test_lrn_values_and_gradient(args):
    x = RNG.standard_normal((2, 3, 3, 7))
    y = tw.nn.local_response_normalization(x, *args)
    np.testing.assert_allclose(_run(y), _lrn_ref(x, *args), rtol=1e-12)
    assert tw.nn.lrn is tw.nn.local_response_normalization
    np.testing.assert_allclose(_run(tw.nn.lrn(x.astype(np.float32), *args)), _lrn_ref(x, *args), rtol=1e-5,
                               atol=1e-6)
    w = RNG.standard_normal(x.shape)
    check_gradients(lambda x: tw.reduce_sum(tw.nn.lrn(x, *args) * w), [x])


# ---------------------------------------------------------------------------------------
# depthwise / separable convolution
def _depthwise_ref(x, f, strides, padding, dilations=(1, 1)):
    n, h, w, c = x.shape
    kh, kw, _, m = f.shape
    (sh, sw), (dh, dw) = strides, dilations
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":
        oh, ow = -(-h // sh), -(-w // sw)
        pt = max((oh - 1) * sh + eh - h, 0) // 2
        pl = max((ow - 1) * sw + ew - w, 0) // 2
    else:
        oh, ow, pt, pl = (h - eh) // sh + 1, (w - ew) // sw + 1, 0, 0
    out = np.zeros((n, oh, ow, c, m))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    y, xx = i * sh + a * dh - pt, j * sw + b * dw - pl
                    if 0 <= y < h and 0 <= xx < w:
                        out[:, i, j] += x[:, y, xx, :, None] * f[a, b]
    return out.reshape(n, oh, ow, c * m)


DW_CASES = [((2, 5, 6, 3), (3, 3, 3, 2), (1, 1), "SAME", (1, 1)),
            ((1, 7, 7, 2), (3, 2, 2, 1), (2, 2), "VALID", (1, 1)),
            ((1, 6, 5, 2), (2, 2, 2, 3), (2, 1), "SAME", (1, 1)),
            ((1, 7, 7, 1), (3, 3, 1, 2), (1, 1), "SAME", (2, 2))]


@pytest.mark.parametrize("xs,fs,strides,padding,dil", DW_CASES)
def test_depthwise_values_and_gradients(xs, fs, strides, padding, dil):
    x, f = RNG.standard_normal(xs), RNG.standard_normal(fs)
    rate = None if dil == (1, 1) else list(dil)
    y = tw.nn.depthwise_conv2d(x, f, [1, *strides, 1], padding, rate=rate)
    want = _depthwise_ref(x, f, strides, padding, dil)
    assert y.shape.as_list() == list(want.shape)
    np.testing.assert_allclose(_run(y), want, rtol=1e-10, atol=1e-12)
    # NCHW through the native op gives the transposed result
    yn = tw.nn.depthwise_conv2d_native(x.transpose(0, 3, 1, 2), f, [1, 1, *strides], padding, data_format="NCHW",
                                       dilations=[1, 1, *dil])
    np.testing.assert_allclose(_run(yn), want.transpose(0, 3, 1, 2), rtol=1e-10, atol=1e-12)
    w = RNG.standard_normal(want.shape)
    check_gradients(lambda x, f: tw.reduce_sum(tw.nn.depthwise_conv2d_native(
        x, f, [1, *strides, 1], padding, dilations=[1, *dil, 1]) * w), [x, f])


def test_depthwise_second_derivative():
    x, f = RNG.standard_normal((1, 4, 4, 2)), RNG.standard_normal((2, 2, 2, 2))

    def fn(x, f):
        y = tw.nn.depthwise_conv2d(x, f, [1, 1, 1, 1], "SAME")
        gx, = tw.gradients(tw.reduce_sum(y * y), [x])
        return tw.reduce_sum(gx * gx)
    check_gradients(fn, [x, f], rtol=1e-5, atol=1e-6)


def test_separable_conv2d_and_layers():
    x = RNG.standard_normal((2, 5, 5, 3))
    dw, pw = RNG.standard_normal((3, 3, 3, 2)), RNG.standard_normal((1, 1, 6, 4))
    y = tw.nn.separable_conv2d(x, dw, pw, [1, 1, 1, 1], "SAME")
    want = _depthwise_ref(x, dw, (1, 1), "SAME") @ pw[0, 0]
    np.testing.assert_allclose(_run(y), want, rtol=1e-10, atol=1e-12)
    check_gradients(lambda x, a, b: tw.reduce_sum(tw.nn.separable_conv2d(x, a, b, [1, 1, 1, 1], "VALID") ** 2),
                    [x[:1], dw, pw], rtol=1e-5, atol=1e-5)
    tw.reset_default_graph()
    xf = x.astype(np.float32)
    out = tw.layers.separable_conv2d(xf, 4, 3, depth_multiplier=2, padding="same")
    names = sorted(v.op.name for v in tw.global_variables())
    assert names == ["separable_conv2d/bias", "separable_conv2d/depthwise_kernel", "separable_conv2d/pointwise_kernel"]
    assert out.shape.as_list() == [2, 5, 5, 4]
    c = contrib_layers.separable_conv2d(xf, 5, [3, 3], depth_multiplier=1, stride=2)
    d = contrib_layers.separable_conv2d(xf, None, 3, depth_multiplier=2, scope="dwonly")
    assert c.shape.as_list() == [2, 3, 3, 5] and d.shape.as_list() == [2, 5, 5, 6]
    assert "SeparableConv2d/pointwise_weights" in [v.op.name for v in tw.global_variables()]
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        assert np.isfinite(s.run([out, c, d])[0]).all()


def test_conv2d_transpose_is_the_adjoint_of_conv2d():
    x = RNG.standard_normal((2, 7, 6, 3))
    f = RNG.standard_normal((3, 3, 3, 4))
    g = RNG.standard_normal((2, 4, 3, 4))
    y = tw.nn.conv2d(x, f, [1, 2, 2, 1], "SAME")
    t = tw.nn.conv2d_transpose(g, f, [2, 7, 6, 3], [1, 2, 2, 1], "SAME")
    y_, t_ = _run([y, t])
    assert t_.shape == x.shape
    np.testing.assert_allclose(np.sum(y_ * g), np.sum(x * t_), rtol=1e-10)
    check_gradients(lambda g, f: tw.reduce_sum(tw.nn.conv2d_transpose(g, f, [2, 7, 6, 3], [1, 2, 2, 1], "SAME")
                                               ** 2), [g, f], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# resizing
def _scale(i, o, ac):
    return np.float32((i - 1) / (o - 1)) if ac and o > 1 else np.float32(i / o)


def _bilinear_ref(x, oh, ow, ac=False, hp=False):
    n, h, w, c = x.shape
    out = np.zeros((n, oh, ow, c))
    sy, sx = _scale(h, oh, ac), _scale(w, ow, ac)
    for i in range(oh):
        fy = (i + 0.5) * sy - 0.5 if hp else i * sy
        y0, y1 = max(int(np.floor(fy)), 0), min(int(np.ceil(fy)), h - 1)
        ly = fy - np.floor(fy)
        for j in range(ow):
            fx = (j + 0.5) * sx - 0.5 if hp else j * sx
            x0, x1 = max(int(np.floor(fx)), 0), min(int(np.ceil(fx)), w - 1)
            lx = fx - np.floor(fx)
            top = x[:, y0, x0] + (x[:, y0, x1] - x[:, y0, x0]) * lx
            bot = x[:, y1, x0] + (x[:, y1, x1] - x[:, y1, x0]) * lx
            out[:, i, j] = top + (bot - top) * ly
    return out


def _nearest_ref(x, oh, ow, ac=False, hp=False):
    n, h, w, c = x.shape
    sy, sx = _scale(h, oh, ac), _scale(w, ow, ac)

    def idx(i, s, size):
        v = (i + 0.5) * s if hp else i * s
        k = int(np.floor(v + 0.5)) if ac else int(np.floor(v))
        return max(min(k, size - 1), 0)
    rows = [idx(i, sy, h) for i in range(oh)]
    cols = [idx(j, sx, w) for j in range(ow)]
    return x[:, rows][:, :, cols]


RESIZE_CASES = [((2, 3, 4, 2), (5, 7), False, False), ((1, 6, 8, 1), (3, 3), False, False),
                ((1, 3, 4, 2), (5, 6), True, False), ((1, 3, 4, 2), (7, 5), False, True),
                ((1, 4, 4, 1), (2, 2), False, True), ((1, 1, 1, 2), (3, 1), True, False)]


@pytest.mark.parametrize("xs,size,ac,hp", RESIZE_CASES)
def test_resize_values_and_gradients(xs, size, ac, hp):
    x = RNG.standard_normal(xs).astype(np.float32)
    yb = tw.image.resize_bilinear(x, size, align_corners=ac, half_pixel_centers=hp)
    yn = tw.image.resize_nearest_neighbor(x, size, align_corners=ac, half_pixel_centers=hp)
    assert yb.dtype == tw.float32 and yb.shape.as_list() == [xs[0], *size, xs[3]]
    b, nn = _run([yb, yn])
    np.testing.assert_allclose(b, _bilinear_ref(x, *size, ac, hp), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(nn, _nearest_ref(x, *size, ac, hp))
    # the gradients are the adjoints: <resize(x), g> == <x, grad(g)>
    g = RNG.standard_normal((xs[0], *size, xs[3])).astype(np.float32)
    xp = tw.placeholder(tw.float32, xs)
    gb, = tw.gradients(tw.image.resize_bilinear(xp, size, align_corners=ac, half_pixel_centers=hp), [xp], [g])
    gn, = tw.gradients(tw.image.resize_nearest_neighbor(xp, size, align_corners=ac, half_pixel_centers=hp), [xp],
                       [g])
    assert gb.op.type == "ResizeBilinearGrad" and gn.op.type == "ResizeNearestNeighborGrad"
    gb_, gn_ = _run([gb, gn], {xp: x})
    np.testing.assert_allclose(np.sum(b * g), np.sum(x * gb_), rtol=1e-4)
    np.testing.assert_allclose(np.sum(nn * g), np.sum(x * gn_), rtol=1e-4)
    check_gradients(lambda x: tw.reduce_sum(tw.image.resize_nearest_neighbor(x, size, align_corners=ac,
                                                                             half_pixel_centers=hp) * g), [x])


def test_resize_bilinear_gradient_finite_differences():
    # ResizeBilinear outputs float32: the float64 check goes through a float32 forward pass
    x = RNG.standard_normal((1, 3, 4, 2))
    g = RNG.standard_normal((1, 5, 6, 2))
    check_gradients(lambda x: tw.reduce_sum(tw.cast(tw.image.resize_bilinear(x, [5, 6]), tw.float64) * g), [x],
                    delta=1e-2, rtol=1e-3, atol=1e-3)


def test_resize_images_and_dtypes():
    img = RNG.integers(0, 255, (4, 5, 3)).astype(np.uint8)
    a = tw.image.resize_images(img, [8, 10])
    b = tw.image.resize_images(img, (8, 10), method=tw.image.ResizeMethod.NEAREST_NEIGHBOR)
    c = tw.image.resize_images(img[None], tw.constant([2, 3]), method=1, align_corners=True)
    same = tw.image.resize_images(img, [4, 5])
    assert a.dtype == tw.float32 and a.shape.as_list() == [8, 10, 3]
    assert b.dtype == tw.uint8 and c.shape.as_list() == [1, 2, 3, 3]
    a_, b_, c_, s_ = _run([a, b, c, same])
    np.testing.assert_allclose(a_, _bilinear_ref(img[None].astype(np.float64), 8, 10)[0], rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(b_, _nearest_ref(img[None], 8, 10)[0])
    np.testing.assert_array_equal(c_, _nearest_ref(img[None], 2, 3, ac=True))
    np.testing.assert_array_equal(s_, img)
    # a size known only at run time
    sp = tw.placeholder(tw.int32, [2])
    d = tw.image.resize_bilinear(img[None].astype(np.float32), sp)
    assert d.shape.as_list() == [1, None, None, 3]
    assert _run(d, {sp: [3, 3]}).shape == (1, 3, 3, 3)


def test_bad_input():
    x = tw.placeholder(tw.float32, [1, 4, 4, 3])
    with pytest.raises(errors.InvalidArgumentError, match=r"LRN.*input must be 4-dimensional"):
        tw.nn.lrn(tw.ones([4, 3]))
    with pytest.raises(errors.InvalidArgumentError, match="depth_radius must be non-negative"):
        tw.nn.lrn(x, depth_radius=-1)
    with pytest.raises(errors.InvalidArgumentError, match=r"DepthwiseConv2dNative.*input depth 3 does not match "
                                                          r"the filter's in_channels 2"):
        tw.nn.depthwise_conv2d(x, tw.ones([3, 3, 2, 1]), [1, 1, 1, 1], "SAME")
    with pytest.raises(errors.InvalidArgumentError, match=r"DepthwiseConv2dNative.*must be 4-dimensional"):
        tw.nn.depthwise_conv2d_native(tw.ones([4, 4, 3]), tw.ones([3, 3, 3, 1]), [1, 1, 1, 1], "SAME")
    with pytest.raises(errors.InvalidArgumentError, match="data_format"):
        tw.nn.depthwise_conv2d_native(x, tw.ones([3, 3, 3, 1]), [1, 1, 1, 1], "SAME", data_format="HWCN")
    with pytest.raises(errors.InvalidArgumentError, match="pointwise_filter has 5 input channels"):
        tw.nn.separable_conv2d(x, tw.ones([3, 3, 3, 2]), tw.ones([1, 1, 5, 4]), [1, 1, 1, 1], "SAME")
    with pytest.raises(errors.InvalidArgumentError, match=r"ResizeBilinear.*images must be 4-dimensional"):
        tw.image.resize_bilinear(tw.ones([4, 4, 3]), [2, 2])
    with pytest.raises(errors.InvalidArgumentError, match="size must be positive"):
        tw.image.resize_nearest_neighbor(x, [0, 2])
    with pytest.raises(errors.InvalidArgumentError, match="cannot both be true"):
        tw.image.resize_bilinear(x, [2, 2], align_corners=True, half_pixel_centers=True)
    with pytest.raises(errors.InvalidArgumentError, match=r"resize_images: images must be 3-D .* or 4-D"):
        tw.image.resize_images(tw.ones([4, 3]), [2, 2])
    with pytest.raises(errors.UnimplementedError, match="BICUBIC"):
        tw.image.resize_images(x, [2, 2], method=tw.image.ResizeMethod.BICUBIC)
    sp = tw.placeholder(tw.int32, [2])
    y = tw.image.resize_bilinear(x, sp)
    with tw.Session() as s, pytest.raises(errors.InvalidArgumentError,
                                          match=r"ResizeBilinear node .*size must be 2 positive ints"):
        s.run(y, {x: np.ones((1, 4, 4, 3), np.float32), sp: [3, -1]})
