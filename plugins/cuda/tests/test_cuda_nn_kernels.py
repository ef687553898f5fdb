"""The convolution, pooling, random and BroadcastGradientArgs kernels on the CUDA device:
values and gradients against the CPU kernels (several shapes, strides, paddings, dilations
and both data formats), MaxPoolGrad's tie rule, batch chunking of the im2col workspace, the
random streams (Philox known answers, distributions on 1e6 samples, per-run advance, seeds
across sessions), and one training step of the digits CNN with every node on the device.

Each test runs on the ``gpu`` backends of conftest.py: a real GPU when present (else
skipped with the probe's reason) and the CPU emulator of the driver layer.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.framework.graph import apply_op

RNG = np.random.default_rng(1234)
CPU = "/device:CPU:0"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _f(*shape, dtype=np.float32, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


def _run(device, build, feeds, soft=True, shapes=None):
    """Build ``build(**placeholders)`` under ``device`` and run it once: (values, placement)."""
    g = tw.Graph()
    with g.as_default():
        phs = {k: tw.placeholder(tw.as_dtype(np.asarray(v).dtype), (shapes or {}).get(k, np.shape(v)), name=k)
               for k, v in feeds.items()}
        with tw.device(device):
            outs = build(**phs)
        single = not isinstance(outs, list | tuple)
        outs = [outs] if single else list(outs)
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=soft)) as s:
        md = tw.RunMetadata()
        vals = s.run(outs, {phs[k]: v for k, v in feeds.items()}, run_metadata=md)
    return vals, md.placement


def compare(gpu, build, rtol=1e-5, atol=1e-5, shapes=None, on_gpu=(), **feeds):
    """Run on the GPU and on the CPU; outputs agree; the ops named in ``on_gpu`` ran on the GPU."""
    got, where = _run(gpu.device(), build, feeds, shapes=shapes)
    want, _ = _run(CPU, build, feeds, shapes=shapes)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
    for op in on_gpu:
        placed = [str(d) for n, d in where.items() if n.split("/")[-1].startswith(op)]
        assert placed and all(f"device:{gpu.device_type}:0" in d for d in placed), (op, placed)
    return got


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------
# convolution
# (input NHWC, filter HWIO, strides (h, w), padding, dilations (h, w))
CONV_CASES = [
    ((2, 7, 6, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1)),
    ((2, 7, 6, 3), (3, 3, 3, 4), (2, 1), "SAME", (1, 1)),
    ((1, 9, 8, 2), (3, 2, 2, 5), (2, 3), "VALID", (1, 1)),
    ((3, 5, 5, 4), (1, 1, 4, 6), (1, 1), "SAME", (1, 1)),      # 1x1: the input is its own im2col
    ((2, 6, 6, 3), (1, 1, 3, 2), (2, 2), "VALID", (1, 1)),     # 1x1, strided
    ((1, 10, 9, 2), (3, 3, 2, 3), (1, 1), "SAME", (2, 2)),     # dilated
    ((2, 11, 10, 1), (2, 3, 1, 2), (1, 2), "VALID", (3, 1)),   # dilated and strided
    ((1, 4, 4, 1), (5, 5, 1, 1), (1, 1), "SAME", (1, 1)),      # window larger than the input
    ((2, 1, 1, 3), (3, 3, 3, 2), (2, 2), "SAME", (1, 1)),
]


def _conv_id(case):
    i, f, s, p, d = case
    return f"{'x'.join(map(str, i))}-f{f[0]}x{f[1]}-s{s[0]}{s[1]}-{p}-d{d[0]}{d[1]}"


def _nchw(x):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("case", CONV_CASES, ids=_conv_id)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv2d_and_gradients_match_cpu(gpu, case, fmt):
    i, f, (sh, sw), padding, (dh, dw) = case
    x, w = _f(*i), _f(*f)
    if fmt == "NCHW":
        x = _nchw(x)
    strides = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
    dil = [1, dh, dw, 1] if fmt == "NHWC" else [1, 1, dh, dw]

    def build(x, w):
        y = tw.nn.conv2d(x, w, strides, padding, data_format=fmt, dilations=dil)
        loss = tw.reduce_sum(y * tw.sin(y))  # a gradient that differs per output element
        return [y] + tw.gradients(loss, [x, w])
    compare(gpu, build, rtol=2e-4, atol=2e-4, on_gpu=("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"),
            x=x, w=w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_float64_and_float32(gpu, dtype):
    x, w = _f(2, 6, 5, 3, dtype=dtype), _f(3, 3, 3, 2, dtype=dtype)

    def build(x, w):
        y = tw.nn.conv2d(x, w, [1, 2, 2, 1], "SAME")
        return [y] + tw.gradients(tw.reduce_sum(y * y), [x, w])
    compare(gpu, build, **_tol(dtype), on_gpu=("Conv2D",), x=x, w=w)


def test_conv2d_backprop_ops_directly(gpu):
    """Conv2DBackpropInput/Filter as ops (the transposed convolution), float64, NCHW too."""
    x, w = _f(2, 3, 7, 6, dtype=np.float64), _f(3, 3, 3, 4, dtype=np.float64)
    dy = _f(2, 4, 4, 3, dtype=np.float64)  # NCHW output of a stride-2 SAME conv of 7x6
    attrs = {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}

    def build(x, w, dy):
        di = apply_op("Conv2DBackpropInput", [tw.constant([2, 3, 7, 6]), w, dy], attrs)
        df = apply_op("Conv2DBackpropFilter", [x, tw.constant([3, 3, 3, 4]), dy], attrs)
        return [di, df]
    compare(gpu, build, **_tol(np.float64), on_gpu=("Conv2DBackpropInput", "Conv2DBackpropFilter"), x=x, w=w, dy=dy)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv2d_in_batch_chunks(gpu, fmt, monkeypatch):
    """A workspace smaller than one image's im2col matrix: one image per chunk (the filter
    gradient adds the chunks' products), same values."""
    from tensorweave_cuda.kernels import conv

    monkeypatch.setattr(conv, "WORKSPACE_BYTES", 1)
    x, w = _f(5, 6, 7, 3), _f(3, 3, 3, 4)
    if fmt == "NCHW":
        x = _nchw(x)
    strides = [1, 1, 1, 1]

    def build(x, w):
        y = tw.nn.conv2d(x, w, strides, "SAME", data_format=fmt)
        return [y] + tw.gradients(tw.reduce_sum(y * tw.cos(y)), [x, w])
    compare(gpu, build, rtol=2e-4, atol=2e-4, on_gpu=("Conv2D",), x=x, w=w)
    monkeypatch.setattr(conv, "WORKSPACE_BYTES", 3 * 6 * 7 * 27 * 4)  # three images, then two
    compare(gpu, build, rtol=2e-4, atol=2e-4, x=x, w=w)


def test_conv2d_empty_and_channelless(gpu):
    def build(x, w, e, z):
        y = tw.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
        return [y, tw.nn.conv2d(e, w, [1, 1, 1, 1], "VALID")] + tw.gradients(tw.reduce_sum(y), [x, w]) + [
            tw.nn.conv2d(z, tw.zeros([2, 2, 0, 3]), [1, 1, 1, 1], "SAME")]
    compare(gpu, build, x=_f(1, 3, 3, 2), w=_f(2, 2, 2, 3), e=_f(0, 4, 4, 2), z=_f(2, 3, 3, 0))


def test_conv2d_run_time_errors_name_the_node(gpu):
    shapes = {"x": [None, None, None, None], "w": [None, None, None, None]}
    with pytest.raises(errors.InvalidArgumentError, match=r"Conv2D node 'conv' on .*input depth 3 does not match"):
        _run(gpu.device(), lambda x, w: tw.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", name="conv"),
             {"x": _f(1, 4, 4, 3), "w": _f(3, 3, 2, 1)}, soft=False, shapes=shapes)
    with pytest.raises(errors.InvalidArgumentError, match=r"node 'conv'.*larger than the input"):
        _run(gpu.device(), lambda x, w: tw.nn.conv2d(x, w, [1, 1, 1, 1], "VALID", name="conv"),
             {"x": _f(1, 2, 2, 1), "w": _f(3, 3, 1, 1)}, soft=False, shapes=shapes)


# ---------------------------------------------------------------------------------------
# pooling
# (input NHWC, window, strides, padding)
POOL_CASES = [
    ((2, 6, 6, 3), (2, 2), (2, 2), "VALID"),
    ((1, 5, 7, 2), (3, 3), (1, 1), "SAME"),     # overlapping windows
    ((2, 5, 5, 1), (2, 2), (2, 2), "SAME"),     # padding after
    ((1, 7, 6, 2), (3, 2), (2, 3), "SAME"),
    ((1, 4, 9, 3), (1, 4), (1, 2), "VALID"),
]


def _pool_id(case):
    i, k, s, p = case
    return f"{'x'.join(map(str, i))}-k{k[0]}{k[1]}-s{s[0]}{s[1]}-{p}"


@pytest.mark.parametrize("case", POOL_CASES, ids=_pool_id)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_pooling_and_gradients_match_cpu(gpu, case, fmt, ties):
    i, (kh, kw), (sh, sw), padding = case
    # with ties, most windows hold their maximum several times: the gradient must go to the
    # same (first) one as on the CPU
    x = RNG.integers(0, 3, i).astype(np.float32) if ties else _f(*i)
    if fmt == "NCHW":
        x = _nchw(x)
    k = [1, kh, kw, 1] if fmt == "NHWC" else [1, 1, kh, kw]
    s = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]

    def build(x):
        mp = tw.nn.max_pool(x, k, s, padding, data_format=fmt)
        ap = tw.nn.avg_pool(x, k, s, padding, data_format=fmt)
        weights = tw.cos(tw.range(0.0, tw.cast(tw.size(mp), tw.float32)))  # a different gradient per output
        weights = tw.reshape(weights, tw.shape(mp))
        return [mp, ap] + tw.gradients(tw.reduce_sum(mp * weights) + tw.reduce_sum(ap * weights * 3.0), [x])
    compare(gpu, build, rtol=1e-6, atol=1e-6, on_gpu=("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"), x=x)


def test_max_pool_grad_first_maximum_wins(gpu):
    """All-equal windows: the whole gradient goes to each window's first element."""
    x = np.ones((1, 4, 4, 1), np.float32)
    got = compare(gpu, lambda x: tw.gradients(tw.reduce_sum(tw.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")),
                                              [x])[0], x=x)
    want = np.zeros((4, 4), np.float32)
    want[::2, ::2] = 1
    np.testing.assert_array_equal(got[0][0, :, :, 0], want)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_max_pool_other_dtypes(gpu, dtype):
    x = RNG.integers(-50, 50, (2, 5, 6, 3)).astype(dtype)
    build = lambda x: tw.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")  # noqa: E731
    compare(gpu, build, on_gpu=("MaxPool",), x=x)
    if dtype == np.float64:
        compare(gpu, lambda x: [tw.nn.avg_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")] + tw.gradients(
            tw.reduce_sum(tw.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME") ** 2), [x]),
            rtol=1e-12, atol=1e-12, on_gpu=("AvgPool", "MaxPoolGrad"), x=x)


def test_max_pool_nan_propagates(gpu):
    x = _f(1, 4, 4, 1)
    x[0, 1, 1, 0] = np.nan
    got, _ = _run(gpu.device(), lambda x: tw.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), {"x": x})
    assert np.isnan(got[0][0, 0, 0, 0]) and np.isfinite(got[0][0, 1:, :, 0]).all()


# ---------------------------------------------------------------------------------------
# random
_M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """A reference Philox4x32-10 (Salmon et al., SC 2011) in Python."""
    c, (k0, k1) = list(ctr), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & _M32, p1 & _M32, ((p0 >> 32) ^ c[3] ^ k1) & _M32, p0 & _M32]
    return c


def test_reference_philox_known_answers():
    """The published known-answer vectors (Random123's kat_vectors)."""
    assert philox4x32_10([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox4x32_10([_M32] * 4, [_M32, _M32]) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox4x32_10([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def _random_session(gpu, op, shape, dtype=tw.float32, seed=5, seed2=9, runs=2, extra=()):
    g = tw.Graph()
    with g.as_default(), tw.device(gpu.device()):
        if op == "RandomUniformInt":
            out = apply_op(op, [tw.constant(shape)] + [tw.constant(v) for v in extra], {"seed": seed, "seed2": seed2})
        else:
            out = apply_op(op, [tw.constant(shape)], {"seed": seed, "seed2": seed2, "dtype": dtype})
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=False)) as s:
        md = tw.RunMetadata()
        vals = [s.run(out, run_metadata=md) for _ in range(runs)]
    assert f"device:{gpu.device_type}:0" in str(md.placement[out.op.name])
    return vals


def test_uniform_is_the_philox_stream(gpu):
    """Key = seed, counter words 2-3 = seed2, words 0-1 = the block number, continuing from run to
    run: float32 values are the top 24 bits of each word times 2^-24."""
    seed, seed2 = (1 << 40) + 7, 3
    first, second = _random_session(gpu, "RandomUniform", [3, 5], seed=seed, seed2=seed2)
    key = [seed & _M32, seed >> 32]
    words = [w for b in range(8) for w in philox4x32_10([b, 0, seed2, 0], key)]
    want = np.array([w >> 8 for w in words], np.float64) * 2.0**-24
    np.testing.assert_array_equal(first.reshape(-1), want[:15].astype(np.float32))
    np.testing.assert_array_equal(second.reshape(-1), want[16:31].astype(np.float32))  # 4 blocks per run


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_random_distributions(gpu, dtype):
    n = 1_000_000
    (u,) = _random_session(gpu, "RandomUniform", [n], dtype, runs=1)
    assert u.dtype == dtype.np_dtype and u.shape == (n,)
    assert (u >= 0).all() and (u < 1).all()
    assert abs(u.mean() - 0.5) < 3e-3 and abs(u.std() - np.sqrt(1 / 12)) < 3e-3
    assert np.histogram(u, 10, (0, 1))[0].min() > 0.098 * n
    (z,) = _random_session(gpu, "RandomStandardNormal", [1000, 1000], dtype, runs=1)
    assert z.shape == (1000, 1000) and np.isfinite(z).all()
    assert abs(z.mean()) < 5e-3 and abs(z.std() - 1) < 5e-3
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 3e-3
    (t,) = _random_session(gpu, "TruncatedNormal", [n + 3], dtype, runs=1)  # not a multiple of 4
    assert (np.abs(t) <= 2).all() and abs(t.mean()) < 5e-3
    assert abs(t.std() - 0.8796) < 5e-3  # the standard normal truncated to [-2, 2]
    assert np.count_nonzero(t == 0) < 3  # no slot left unfilled


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_random_uniform_int(gpu, dtype):
    lo, hi = np.asarray(-3, dtype), np.asarray(9, dtype)
    (v,) = _random_session(gpu, "RandomUniformInt", [200_000], runs=1, extra=(lo, hi))
    assert v.dtype == dtype and v.min() == -3 and v.max() == 8
    counts = np.bincount(v + 3, minlength=12)
    assert counts.min() > 0.95 * len(v) / 12
    big = np.iinfo(dtype)
    (w,) = _random_session(gpu, "RandomUniformInt", [1000], runs=1,
                           extra=(np.asarray(big.min, dtype), np.asarray(big.max, dtype)))
    assert (w < big.max).all() and w.std() > big.max / 4  # the full range, no overflow


def test_random_runs_differ_and_seeds_replay(gpu):
    a1, a2 = _random_session(gpu, "RandomStandardNormal", [7, 3])
    assert not np.array_equal(a1, a2)
    b1, b2 = _random_session(gpu, "RandomStandardNormal", [7, 3])
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    c1, _ = _random_session(gpu, "RandomStandardNormal", [7, 3], seed2=10)
    assert not np.array_equal(a1, c1)
    n1, _ = _random_session(gpu, "RandomStandardNormal", [7, 3], seed=0, seed2=0)
    n2, _ = _random_session(gpu, "RandomStandardNormal", [7, 3], seed=0, seed2=0)
    assert not np.array_equal(n1, n2)  # (0, 0): nondeterministic


def test_random_wrappers_and_graph_seed(gpu):
    def values():
        g = tw.Graph()
        with g.as_default(), tw.device(gpu.device()):
            tw.set_random_seed(11)
            u = tw.random_uniform([4, 5], -2.0, 3.0)
            t = tw.truncated_normal([6], stddev=0.5, dtype=tw.float64)
            i = tw.random_uniform([9], 0, 4, dtype=tw.int64)
        with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=False)) as s:
            return s.run([u, t, i])
    a, b = values(), values()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert (a[0] >= -2).all() and (a[0] < 3).all() and (np.abs(a[1]) <= 1.0).all() and a[1].dtype == np.float64
    assert ((a[2] >= 0) & (a[2] < 4)).all()


# ---------------------------------------------------------------------------------------
# BroadcastGradientArgs (the core's kernel for every device type)
def test_broadcast_gradient_args_with_unknown_shapes(gpu):
    """Unknown batch dimensions: the gradients of broadcasting ops need BroadcastGradientArgs at
    run time; its int32 outputs feed Sum's axes and Reshape on the device."""
    x, b = _f(5, 3), _f(3)
    shapes = {"x": [None, 3], "b": [None]}

    def build(x, b):
        y = (x + b) * (x - b)
        return tw.gradients(tw.reduce_sum(y * y), [x, b])
    got, where = _run(gpu.device(), build, {"x": x, "b": b}, soft=False, shapes=shapes)
    want, _ = _run(CPU, build, {"x": x, "b": b}, shapes=shapes)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    bga = [str(d) for n, d in where.items() if "BroadcastGradientArgs" in n]
    assert bga and all(gpu.device_type in d for d in bga)
    with pytest.raises(errors.InvalidArgumentError, match="BroadcastGradientArgs node .*incompatible shapes"):
        _run(gpu.device(), lambda a, b: apply_op("BroadcastGradientArgs", [tw.shape(a), tw.shape(b)]),
             {"a": _f(2, 3), "b": _f(4)}, soft=False, shapes={"a": [None, None], "b": [None]})


# ---------------------------------------------------------------------------------------
# the digits CNN: every node on the device, one training step as on the CPU
def _digits_module():
    spec = importlib.util.spec_from_file_location("tw_example_digits", EXAMPLES / "digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cnn_step(device, init_values=None):
    digits = _digits_module()
    data = np.random.default_rng(3)
    xs, ys = data.random((8, 64), dtype=np.float32), data.integers(0, 10, 8).astype(np.int32)
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        tw.set_random_seed(0)
        x = tw.placeholder(tw.float32, [None, 64], name="x")
        y = tw.placeholder(tw.int32, [None], name="y")
        keep_prob = tw.placeholder_with_default(np.float32(1.0), [], name="keep_prob")
        logits = digits.cnn(x, keep_prob)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        global_step = tw.train.get_or_create_global_step()
        train_op = tw.train.AdamOptimizer(2e-3).minimize(loss, global_step=global_step)
        init = tw.global_variables_initializer()
        tvars = tw.trainable_variables()
        feeds = [tw.placeholder(v.dtype.base_dtype, v.shape) for v in tvars]
        load = tw.group(*[tw.assign(v, p) for v, p in zip(tvars, feeds)])
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=False)) as s:
        s.run(init)
        if init_values is not None:
            s.run(load, dict(zip(feeds, init_values)))
        start = s.run(tvars)
        md = tw.RunMetadata()
        first = s.run([train_op, loss], {x: xs, y: ys}, run_metadata=md)[1]
        after = s.run(loss, {x: xs, y: ys})
        return start, first, after, md.placement, s.run(tvars)


def test_digits_cnn_step_with_every_node_on_the_gpu(gpu):
    start, cpu_loss, cpu_after, _, cpu_vars = _cnn_step(CPU)
    _, loss, after, placement, vars_ = _cnn_step(gpu.device(), init_values=start)
    off = {n: str(d) for n, d in placement.items() if f"device:{gpu.device_type}:0" not in str(d)}
    assert not off, off
    types = {n.split("/")[-1] for n in placement}
    assert any(t.startswith("Conv2DBackpropInput") for t in types) and any(t.startswith("MaxPoolGrad") for t in types)
    np.testing.assert_allclose(loss, cpu_loss, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after, cpu_after, rtol=1e-5, atol=1e-5)
    for g, w in zip(vars_, cpu_vars):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
