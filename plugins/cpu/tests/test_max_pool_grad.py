"""MaxPoolGrad's compiled loop (kernels/nn.py, with numba) and its NumPy path give TF's
gradient: each output's gradient to the first maximum of its window (row-major, padding
never chosen), for VALID and SAME padding, overlapping windows, ties, NCHW and a batch large
enough to be split over the cores. MaxPool's own compiled loop and NumPy path: each window's
maximum, NaN and infinities included. The loops written out for 2 x 2 windows at strides 2
give the general loops' bits."""

from __future__ import annotations

import itertools
import os
import re

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu.kernels import nn


def _reference(x, k, s, padding, g):
    """dx by definition, one window at a time (NHWC)."""
    n, h, w, c = x.shape
    if padding == "VALID":
        oh, ow, pt, pl = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    else:
        oh, ow = -(-h // s), -(-w // s)
        pt = max(0, (oh - 1) * s + k - h) // 2
        pl = max(0, (ow - 1) * s + k - w) // 2
    dx = np.zeros_like(x)
    for b, oy, ox, ch in itertools.product(range(n), range(oh), range(ow), range(c)):
        cells = [(r, q) for r in range(oy * s - pt, oy * s - pt + k) for q in range(ox * s - pl, ox * s - pl + k)
                 if 0 <= r < h and 0 <= q < w]
        best = max(x[b, r, q, ch] for r, q in cells)
        r, q = next((r, q) for r, q in cells if x[b, r, q, ch] == best)
        dx[b, r, q, ch] += g[b, oy, ox, ch]
    return dx


def _grad(x, k, s, padding, g, data_format="NHWC"):
    graph = tw.Graph()
    with graph.as_default():
        xt = tw.constant(x if data_format == "NHWC" else x.transpose(0, 3, 1, 2))
        ksize, strides = ([1, k, k, 1], [1, s, s, 1]) if data_format == "NHWC" else ([1, 1, k, k], [1, 1, s, s])
        y = tw.nn.max_pool(xt, ksize, strides, padding, data_format=data_format)
        gt = tw.constant(g if data_format == "NHWC" else g.transpose(0, 3, 1, 2))
        (dx,) = tw.gradients(y, [xt], grad_ys=[gt])
        with tw.Session(graph=graph) as sess:
            out = sess.run(dx)
    return out if data_format == "NHWC" else out.transpose(0, 2, 3, 1)


# (2, 2) and (3, 3) windows tile the image: the compiled path writes each element once
# (_max_pool_grad_tiles), zero in the rows and columns no window covers (VALID, 7 x 6, k 3).
@pytest.mark.parametrize("k,s,padding", [(2, 2, "VALID"), (2, 2, "SAME"), (3, 2, "SAME"), (3, 1, "VALID"),
                                         (3, 2, "VALID"), (3, 3, "VALID"), (3, 3, "SAME")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_the_definition(path, k, s, padding, dtype):
    rng = np.random.default_rng(k * 10 + s)
    # Few distinct values: ties inside windows, so "the first maximum" is what is tested.
    x = rng.integers(0, 4, (2, 7, 6, 3)).astype(dtype)
    oh = (7 - k) // s + 1 if padding == "VALID" else -(-7 // s)
    ow = (6 - k) // s + 1 if padding == "VALID" else -(-6 // s)
    g = rng.standard_normal((2, oh, ow, 3)).astype(dtype)
    # (overlapping windows add into one input in another order on the NumPy path: to rounding)
    np.testing.assert_allclose(_grad(x, k, s, padding, g), _reference(x, k, s, padding, g),
                               rtol=1e-6 if dtype == np.float32 else 1e-14, atol=0)


def test_nchw_and_a_batch_split_over_the_cores(path, monkeypatch):
    calls = []
    loop = nn._max_pool_grad_2x2_loop  # 2 x 2 windows, strides 2, inside the image
    monkeypatch.setattr(nn, "_max_pool_grad_2x2_loop", lambda *a: calls.append(a[-2:]) or loop(*a))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((176, 28, 28, 8)).astype(np.float32)  # >= 1M elements: split by images
    g = rng.standard_normal((176, 14, 14, 8)).astype(np.float32)
    nhwc = _grad(x, 2, 2, "SAME", g)
    assert nhwc.shape == x.shape and np.count_nonzero(nhwc) == g.size  # distinct values: one winner each
    np.testing.assert_array_equal(nhwc[:2], _reference(x[:2], 2, 2, "SAME", g[:2]))
    np.testing.assert_array_equal(_grad(x[:4], 2, 2, "SAME", g[:4], "NCHW"), nhwc[:4])
    if path == "numpy":
        assert not calls
        return
    # the compiled loop ran: the big batch in one block of images per core, then the small whole
    parts = min(os.cpu_count() or 1, 176)
    blocks = sorted(calls[:parts])
    assert [b[0] for b in blocks] == [0] + [b[1] for b in blocks[:-1]] and blocks[-1][1] == 176
    assert set(calls) == set(blocks) | {(0, 4)}  # (constant folding may run a kernel twice)


def test_nan_windows_pass_no_gradient(path):
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    x[0, 0, 0, 0] = np.nan
    g = np.ones((1, 2, 2, 1), np.float32)
    dx = _grad(x, 2, 2, "VALID", g)
    assert dx[0, :2, :2, 0].sum() == 0  # the max is NaN, equal to nothing
    assert dx[0, 3, 3, 0] == 1 and dx.sum() == 3


def test_an_infinite_gradient_reaches_only_the_maximum(path):
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    g = np.array([np.inf, -np.inf, 1, 2], np.float32).reshape(1, 2, 2, 1)
    dx = _grad(x, 2, 2, "VALID", g)
    want = np.zeros_like(x)
    want[0, 1, 1, 0], want[0, 1, 3, 0], want[0, 3, 1, 0], want[0, 3, 3, 0] = np.inf, -np.inf, 1, 2
    np.testing.assert_array_equal(dx, want)  # no NaN from inf * 0 elsewhere


@pytest.mark.parametrize("k,s,padding", [(2, 2, "SAME"), (3, 2, "SAME"), (3, 1, "VALID"), (2, 2, "VALID"), (3, 3, "SAME")])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_max_pool_forward_gives_each_windows_maximum(path, k, s, padding, data_format, dtype):
    """MaxPool's compiled loop and its NumPy path: each window's maximum (padding never
    chosen), NaN wherever a window holds one, infinities kept."""
    rng = np.random.default_rng(k * 10 + s)
    x = rng.normal(size=(3, 7, 8, 5)).astype(dtype)
    x[0, 0, 0, 0], x[1, 3, 4, 2], x[2, 6, 7, 4] = np.nan, -np.inf, np.inf
    graph = tw.Graph()
    with graph.as_default():
        xt = tw.constant(x if data_format == "NHWC" else x.transpose(0, 3, 1, 2))
        y = tw.nn.max_pool(xt, [1, k, k, 1] if data_format == "NHWC" else [1, 1, k, k],
                           [1, s, s, 1] if data_format == "NHWC" else [1, 1, s, s], padding, data_format=data_format)
        with tw.Session(graph=graph) as sess:
            got = sess.run(y)
    if data_format == "NCHW":
        got = got.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    if padding == "VALID":
        oh, ow, pt, pl = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    else:
        oh, ow = -(-h // s), -(-w // s)
        pt, pl = max(0, (oh - 1) * s + k - h) // 2, max(0, (ow - 1) * s + k - w) // 2
    want = np.empty((n, oh, ow, c), dtype)
    for oy, ox in itertools.product(range(oh), range(ow)):
        win = x[:, max(0, oy * s - pt):oy * s - pt + k, max(0, ox * s - pl):ox * s - pl + k, :]
        want[:, oy, ox, :] = np.max(win, axis=(1, 2))   # np.max: NaN wherever a window has one
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_a_large_max_pool_splits_its_images_over_the_cores(monkeypatch):
    if not nn.jit.enabled():
        pytest.skip("numba is not installed (the fusion extra)")
    from tensorweave_cpu import rowwise

    splits = []
    real = rowwise.split_rows
    monkeypatch.setattr(rowwise, "split_rows", lambda fn, n: splits.append(n) or real(fn, n))
    x = np.random.default_rng(0).normal(size=(64, 28, 28, 32)).astype(np.float32)
    graph = tw.Graph()
    with graph.as_default():
        xp = tw.placeholder(tw.float32, [None, 28, 28, 32])   # (a constant would be folded at plan time)
        y = tw.nn.max_pool(xp, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        with tw.Session(graph=graph) as sess:
            got = sess.run(y, {xp: x})
    assert splits == [64]
    np.testing.assert_array_equal(got, x.reshape(64, 14, 2, 14, 2, 32).max(axis=(2, 4)))


@pytest.mark.parametrize("k,s,padding", [(2, 2, "SAME"), (3, 3, "VALID"), (3, 2, "SAME")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_gradient_through_the_relu_is_relugrad_of_maxpoolgrad(path, k, s, padding, dtype, monkeypatch):
    """_MaxPoolGradReluGrad (passes/pool_grad_fusion.py): the compiled tiled loop masks as it
    writes; other windows and the NumPy path mask after; the values are ReluGrad's of
    MaxPoolGrad's, bit for bit (an infinite gradient where the ReLU's output is 0 gives NaN)."""
    from tensorweave.framework.graph import apply_op

    calls = []
    loop = nn._max_pool_grad_tiles_loop
    monkeypatch.setattr(nn, "_max_pool_grad_tiles_loop", lambda *a: calls.append(a[-3]) or loop(*a))
    rng = np.random.default_rng(k + s)
    x = np.maximum(rng.integers(-2, 4, (2, 7, 6, 3)), 0).astype(dtype)  # a ReLU's output: zeros, ties
    oh = (7 - k) // s + 1 if padding == "VALID" else -(-7 // s)
    ow = (6 - k) // s + 1 if padding == "VALID" else -(-6 // s)
    g = rng.standard_normal((2, oh, ow, 3)).astype(dtype)
    g[0, 0, 0, :] = [np.inf, -np.inf, np.nan]
    attrs = {"ksize": [1, k, k, 1], "strides": [1, s, s, 1], "padding": padding}
    graph = tw.Graph()
    with graph.as_default():
        xt = tw.placeholder(dtype, x.shape)  # fed: nothing folded at plan time
        y = tw.nn.max_pool(xt, attrs["ksize"], attrs["strides"], padding)
        fused = apply_op("_MaxPoolGradReluGrad", [xt, y, tw.constant(g)], attrs)
        apart = apply_op("ReluGrad", [apply_op("MaxPoolGrad", [xt, y, tw.constant(g)], attrs), xt])
        off = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
        with tw.Session(graph=graph, config=off) as sess:
            got = sess.run(fused, {xt: x})
            assert calls == ([True] if path == "compiled" and k == s else [])
            want = sess.run(apart, {xt: x})
    assert np.isnan(got).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("h,w,padding,inside", [(8, 6, "SAME", True), (7, 5, "VALID", True), (7, 6, "SAME", False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_2x2_loops_give_the_general_loops_bits(h, w, padding, inside, dtype):
    """``_max_pool_2x2_images`` and ``_max_pool_grad_2x2_images`` (with and without the ReLU
    mask; then ``_zero_uncovered``) against ``_max_pool_images`` and ``_max_pool_grad_tiles``:
    ties, NaN, infinities and signed zeros in the windows, infinite and NaN gradients, and the
    row and column VALID leaves uncovered on odd sizes; a window reaching into SAME's padding
    is not theirs."""
    if not nn.jit.enabled():
        pytest.skip("numba is not installed (the fusion extra)")
    rng = np.random.default_rng(h * w)
    x = rng.integers(-2, 3, (3, h, w, 11)).astype(dtype)  # ties, zeros
    x[0, 0, 0, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    x[0, 0, 1, :5] = [1.0, np.inf, -np.inf, 0.0, -0.0]
    x[1, 1, 1, :3] = np.nan
    geometry = nn.conv_output_size
    oh, pt, _ = geometry(h, 2, 2, 1, padding)
    ow, pl, _ = geometry(w, 2, 2, 1, padding)
    assert nn._inside_2x2(2, 2, 2, 2, (pt, 0, pl, 0), h, w, oh, ow) == inside
    if not inside:
        return
    y_general, y = np.empty((3, oh, ow, 11), dtype), np.empty((3, oh, ow, 11), dtype)
    nn._max_pool_loop(x, y_general, 2, 2, 2, 2, 0, 0, 0, 3)
    nn._max_pool_2x2_loop(x, y, nn._NO_ARG, False, False, 0, 3)
    assert y.tobytes() == y_general.tobytes()
    g = rng.standard_normal(y.shape).astype(dtype)
    g[0, 0, 0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    for relu in (False, True):
        want, got = np.full(x.shape, 7, dtype), np.full(x.shape, 7, dtype)  # (every element is written)
        nn._max_pool_grad_tiles_loop(x, y, g, want, 2, 2, 0, 0, relu, 0, 3)
        nn._max_pool_grad_2x2_loop(x, y, g, got, relu, 0, 3)
        nn._zero_uncovered(got, oh, ow)  # (the kernel's own step after the loop)
        assert got.tobytes() == want.tobytes()


def test_the_usual_2x2_pool_and_its_gradient_take_the_2x2_loops(monkeypatch):
    if not nn.jit.enabled():
        pytest.skip("numba is not installed (the fusion extra)")
    calls = []
    for name in ("_max_pool_2x2_loop", "_max_pool_grad_2x2_loop", "_max_pool_loop", "_max_pool_grad_tiles_loop"):
        real = getattr(nn, name)
        monkeypatch.setattr(nn, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    x = np.random.default_rng(1).standard_normal((4, 28, 28, 8)).astype(np.float32)
    g = np.ones((4, 14, 14, 8), np.float32)
    np.testing.assert_array_equal(_grad(x, 2, 2, "SAME", g), _reference(x, 2, 2, "SAME", g))
    assert set(calls) == {"_max_pool_2x2_loop", "_max_pool_grad_2x2_loop"}  # (folding may run one twice)
    calls.clear()
    _grad(x[:, :27, :27], 2, 2, "SAME", np.ones((4, 14, 14, 8), np.float32))  # the last window in padding
    assert set(calls) == {"_max_pool_loop", "_max_pool_grad_tiles_loop"}


@pytest.mark.parametrize("k,padding,h,w", [(2, "VALID", 7, 9), (2, "SAME", 8, 6), (2, "SAME", 7, 5), (3, "SAME", 7, 8),
                                           (3, "VALID", 7, 6)])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_argmax_pool_and_gradient_match_maxpool_and_its_gradients(path, k, padding, h, w, data_format, dtype,
                                                                     monkeypatch):
    """_MaxPoolArgmax gives MaxPool's output and each window's first maximum (its offset in
    the window, 255 for a NaN window); _MaxPoolGradArgmax gives MaxPoolGrad's values, and
    with ``relu`` _MaxPoolGradReluGrad's: ties, NaN, infinite gradients, zero masks, the rows
    and columns VALID leaves uncovered, windows reaching into SAME's padding; the 2 x 2 loops
    where the windows are inside the image."""
    from tensorweave.framework.graph import apply_op

    calls = []
    for name in ("_max_pool_2x2_loop", "_max_pool_grad_argmax_2x2_loop"):
        real = getattr(nn, name)
        monkeypatch.setattr(nn, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    rng = np.random.default_rng(k * 100 + h * 10 + w)
    x = np.maximum(rng.integers(-2, 4, (2, h, w, 3)), -1).astype(dtype)  # ties, zeros, negatives
    x[0, 0, 0, 0] = x[0, 0, 1, 0] = x[0, 1, 0, 0] = x[0, 1, 1, 0] = np.nan  # a window of NaN
    x[1, 0, 0, 1] = np.inf
    to = (lambda a: a) if data_format == "NHWC" else (lambda a: a.transpose(0, 3, 1, 2).copy())
    back = (lambda a: a) if data_format == "NHWC" else (lambda a: a.transpose(0, 2, 3, 1))
    window = [1, k, k, 1] if data_format == "NHWC" else [1, 1, k, k]
    attrs = {"ksize": window, "strides": window, "padding": padding, "data_format": data_format}
    graph = tw.Graph()
    with graph.as_default():
        xt = tw.placeholder(dtype, to(x).shape)  # fed: nothing folded at plan time
        y, arg = apply_op("_MaxPoolArgmax", [xt], attrs)
        y_ref = apply_op("MaxPool", [xt], attrs)
        g = rng.standard_normal(back(np.empty(y.shape.as_list())).shape).astype(dtype)
        g[0, 0, 1, :] = [np.inf, -np.inf, np.nan]
        gt = tw.constant(to(g))
        grads = [apply_op("_MaxPoolGradArgmax", [y, arg, gt], {**attrs, "input_size": [h, w], "relu": relu})
                 for relu in (False, True)]
        refs = [apply_op("MaxPoolGrad", [xt, y_ref, gt], attrs), apply_op("_MaxPoolGradReluGrad", [xt, y_ref, gt], attrs)]
        with tw.Session(graph=graph, config=tw.ConfigProto(graph_options=tw.GraphOptions(
                enable_elementwise_fusion=False))) as sess:
            yv, argv, yr, *dxs = sess.run([y, arg, y_ref, *grads, *refs], {xt: to(x)})
    assert yv.tobytes() == yr.tobytes() and argv.dtype == np.uint8
    yv, argv = back(yv), back(argv)
    pt = max(0, (yv.shape[1] - 1) * k + k - h) // 2 if padding == "SAME" else 0
    pl = max(0, (yv.shape[2] - 1) * k + k - w) // 2 if padding == "SAME" else 0
    for b, oy, ox, ch in itertools.product(*(range(d) for d in yv.shape)):
        cells = [(i, j) for i in range(k) for j in range(k)
                 if 0 <= oy * k - pt + i < h and 0 <= ox * k - pl + j < w]
        first = [i * k + j for i, j in cells if x[b, oy * k - pt + i, ox * k - pl + j, ch] == yv[b, oy, ox, ch]]
        assert argv[b, oy, ox, ch] == (first[0] if first else 255)
    assert argv[0, 0, 0, 0] == 255
    for got, want in zip(dxs[:2], dxs[2:]):
        np.testing.assert_array_equal(got, want)  # (NaN where the other gives NaN; -0.0 == 0.0)
    assert np.isnan(dxs[1]).any()
    inside = k == 2 and padding == "VALID" or (k == 2 and h % 2 == 0 and w % 2 == 0)
    assert set(calls) == ({"_max_pool_2x2_loop", "_max_pool_grad_argmax_2x2_loop"}
                          if path == "compiled" and inside else set())


@pytest.mark.parametrize("k,padding,h,w", [(2, "VALID", 7, 9), (2, "SAME", 8, 6), (2, "SAME", 7, 5), (3, "SAME", 7, 8)])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_argmax_pool_with_relu_pools_what_relu_gives(path, k, padding, h, w, data_format, dtype, monkeypatch):
    """_MaxPoolArgmax with ``relu`` gives, bit for bit, what it gives of Relu's output (and
    MaxPool of it): negatives and -0.0 become +0.0, NaN stays NaN, the argmax is among the
    rectified values (a window of non-positive values: its first position); the 2 x 2 loop
    rectifies as it reads, other windows pool a rectified copy."""
    from tensorweave.framework.graph import apply_op

    calls = []
    real = nn._max_pool_2x2_loop
    monkeypatch.setattr(nn, "_max_pool_2x2_loop", lambda *a: calls.append(a[4]) or real(*a))
    rng = np.random.default_rng(k * 100 + h * 10 + w)
    x = rng.integers(-3, 3, (2, h, w, 3)).astype(dtype)
    x[x == -3] = -0.0
    x[0, 0, 0, 0] = np.nan
    x[1, 0, :2, 1] = -1.0  # a window of negatives
    if data_format == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    window = [1, k, k, 1] if data_format == "NHWC" else [1, 1, k, k]
    attrs = {"ksize": window, "strides": window, "padding": padding, "data_format": data_format}
    graph = tw.Graph()
    with graph.as_default():
        xt = tw.placeholder(dtype, x.shape)
        got = apply_op("_MaxPoolArgmax", [xt], {**attrs, "relu": True})
        want = apply_op("_MaxPoolArgmax", [tw.nn.relu(xt)], attrs)
        pooled = apply_op("MaxPool", [tw.nn.relu(xt)], attrs)
        with tw.Session(graph=graph, config=tw.ConfigProto(graph_options=tw.GraphOptions(
                enable_elementwise_fusion=False))) as sess:
            (y, arg), (y_want, arg_want), y_pool = sess.run([got, want, pooled], {xt: x})
    assert y.tobytes() == y_want.tobytes() == y_pool.tobytes()
    assert arg.tobytes() == arg_want.tobytes()
    assert np.isnan(y).any() and (y >= 0).sum() == y.size - np.isnan(y).sum() and not np.signbit(y).any()
    inside = k == 2 and (padding == "VALID" or (h % 2 == 0 and w % 2 == 0))
    assert (True in calls) == (path == "compiled" and inside)


def test_the_argmax_gradient_checks_its_inputs():
    from tensorweave.framework.graph import apply_op

    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID", "input_size": [4, 4]}
    graph = tw.Graph()
    with graph.as_default():
        y = tw.placeholder(tw.float32, [None, None, None, 2])
        arg = tw.placeholder(tw.uint8, [None, None, None, 2])
        dx = apply_op("_MaxPoolGradArgmax", [y, arg, y], attrs)
        with tw.Session(graph=graph) as sess:
            with pytest.raises(tw.errors.InvalidArgumentError, match=r"pooling a 4x4 input"):
                sess.run(dx, {y: np.ones((1, 3, 3, 2), np.float32), arg: np.zeros((1, 3, 3, 2), np.uint8)})
            ok = sess.run(dx, {y: np.ones((1, 2, 2, 2), np.float32), arg: np.full((1, 2, 2, 2), 3, np.uint8)})
    assert ok.sum() == 8 and ok[0, 1, 1].tolist() == [1, 1] and ok[0, 3, 3].tolist() == [1, 1]


@pytest.mark.parametrize("k,h,bad,where", [(2, 4, 4, [0, 1, 0, 1]), (2, 4, 254, [0, 1, 0, 1]),
                                           (3, 5, 9, [0, 1, 0, 1]), (3, 5, 5, [0, 1, 1, 1])])
def test_an_argmax_outside_its_window_fails_the_step_and_writes_nothing_outside(path, k, h, bad, where):
    """An argmax is data from a graph: a value that is not a position of its window (or one
    that points outside the input: the last column's windows of a 5-wide SAME 3x3 pool reach
    into padding at offset 5, row 1 column 2) fails the step naming it, on both paths and both
    loops, and the session goes on."""
    from tensorweave.framework.graph import apply_op

    oh = -(-h // k)
    attrs = {"ksize": [1, k, k, 1], "strides": [1, k, k, 1], "padding": "SAME", "input_size": [h, h]}
    graph = tw.Graph()
    with graph.as_default():
        y = tw.placeholder(tw.float32, [None, oh, oh, 2])
        arg = tw.placeholder(tw.uint8, [None, oh, oh, 2])
        dx = apply_op("_MaxPoolGradArgmax", [y, arg, y], attrs)
        good = np.zeros((1, oh, oh, 2), np.uint8)
        yv = np.ones((1, oh, oh, 2), np.float32)
        with tw.Session(graph=graph) as sess:
            a = good.copy()
            a[tuple(where)] = bad
            with pytest.raises(tw.errors.InvalidArgumentError, match=re.escape(f"argmax {bad} at {where} (NHWC) is neither 255")):
                sess.run(dx, {y: yv, arg: a})
            out = sess.run(dx, {y: yv, arg: good})  # position 0 of every window: its top left corner
    assert out.sum() == yv.size and out[0, ::k, ::k].all()
