"""oneDNN's convolutions (tensorweave_cpu/onednn.py, the cpu plugin's ``onednn`` extra): float32
Conv2D and both its gradients give what the CPU's own im2col + BLAS paths give in float64, for
both layouts, strides, dilations and every padding; other dtypes and switched-off oneDNN take
the own paths; batch sizes change; concurrent steps share the primitives safely. Its float32
products (``sgemm`` through blas.matmul) in every operand layout, small, float64 and odd
layouts left to OpenBLAS, large ones by their inner dimension beside concurrent small ones."""

import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave_cpu import onednn

pytestmark = pytest.mark.skipif(not onednn.available(), reason="oneDNN is not installed (the cpu plugin's onednn extra)")


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setitem(onednn._state, "on", True)


def _conv_and_grads(x, f, dy, *, strides, padding, dilations, data_format):
    g = tw.Graph()
    with g.as_default():
        xp = tw.placeholder(x.dtype, [None, *x.shape[1:]])
        fp, dyp = tw.placeholder(f.dtype, f.shape), tw.placeholder(dy.dtype, [None, *dy.shape[1:]])
        y = tw.nn.conv2d(xp, fp, strides=strides, padding=padding, dilations=dilations, data_format=data_format)
        dx, df = tw.gradients(y, [xp, fp], grad_ys=dyp)
        with tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0})) as s:
            return s.run([y, dx, df], {xp: x, fp: f, dyp: dy})


def _out_shape(x, f, strides, padding, dilations, data_format):
    """Shape of conv2d's output, computed by a float64 run (never oneDNN's)."""
    g = tw.Graph()
    with g.as_default():
        y = tw.nn.conv2d(tw.constant(x.astype(np.float64)), tw.constant(f.astype(np.float64)), strides=strides,
                         padding=padding, dilations=dilations, data_format=data_format)
        with tw.Session(graph=g) as s:
            return s.run(y).shape


GEOMETRIES = [
    # (kernel, strides, padding, dilations)
    (5, (1, 1), "SAME", (1, 1)),
    (3, (2, 2), "SAME", (1, 1)),
    (4, (2, 1), "SAME", (1, 1)),          # even window: more padding after than before
    (3, (2, 2), "VALID", (1, 1)),
    (3, (1, 1), "SAME", (2, 2)),
    (2, (3, 2), "VALID", (2, 1)),         # strides that skip rows at the end
    (1, (1, 1), "VALID", (1, 1)),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("k,strides,padding,dilations", GEOMETRIES)
@pytest.mark.parametrize("channels", [1, 3])
def test_conv2d_and_gradients_match_float64(on, data_format, k, strides, padding, dilations, channels):
    rng = np.random.default_rng(k * 10 + channels)
    nhwc_x = rng.standard_normal((3, 9, 10, channels))
    f = rng.standard_normal((k, k, channels, 5))
    s4 = [1, *strides, 1] if data_format == "NHWC" else [1, 1, *strides]
    d4 = [1, *dilations, 1] if data_format == "NHWC" else [1, 1, *dilations]
    x = nhwc_x if data_format == "NHWC" else nhwc_x.transpose(0, 3, 1, 2).copy()
    dy = rng.standard_normal(_out_shape(x, f, s4, padding, d4, data_format))
    kw = dict(strides=s4, padding=padding, dilations=d4, data_format=data_format)
    want = _conv_and_grads(x, f, dy, **kw)  # float64: the CPU's own paths
    before = dict(onednn.stats)
    got = _conv_and_grads(x.astype(np.float32), f.astype(np.float32), dy.astype(np.float32), **kw)
    for name, a, b in zip(("Conv2D", "input gradient", "filter gradient"), got, want):
        assert a.dtype == np.float32 and a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max(), err_msg=name)
    ran = {k: onednn.stats[k] - before[k] for k in before}
    # One input channel keeps the compiled col2im for the input gradient (kernels/nn.py).
    assert ran == {"forward": 1, "forward_bias": 0, "forward_bias_relu": 0, "backward_data": int(channels > 1),
                   "backward_weights": 1}


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("fused_ops", [["BiasAdd"], ["BiasAdd", "Relu"], ["BiasAdd", "Relu6"]])
@pytest.mark.parametrize("use_onednn", [True, False])
def test_fused_conv2d_gives_the_unfused_values(monkeypatch, data_format, fused_ops, use_onednn):
    """_FusedConv2D (made by passes/matmul_fusion.py for NHWC; the kernel takes both layouts):
    the bias added by oneDNN in the convolution's pass, or after our own convolution, then
    the activation: the values of Conv2D, a bias add and Relu/Relu6, bit for bit."""
    from tensorweave.framework.graph import apply_op

    monkeypatch.setitem(onednn._state, "on", use_onednn)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 9, 10, 4)).astype(np.float32) * 3
    x[1, 2, 3, 1] = np.nan
    f = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    if data_format == "NCHW":
        x = x.transpose(0, 3, 1, 2).copy()
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": data_format}
    g = tw.Graph()
    with g.as_default():
        xt, ft, bt = tw.placeholder(tw.float32, x.shape), tw.constant(f), tw.constant(bias)  # (not folded)
        fused = apply_op("_FusedConv2D", [xt, ft, [bt]], {**attrs, "fused_ops": fused_ops})
        want = tw.nn.bias_add(apply_op("Conv2D", [xt, ft], attrs), bt, data_format=data_format)
        if len(fused_ops) == 2:
            want = (tw.nn.relu if fused_ops[1] == "Relu" else tw.nn.relu6)(want)
        off = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
        with tw.Session(graph=g, config=off) as s:
            before = dict(onednn.stats)
            got = s.run(fused, {xt: x})
            ran = onednn.stats["forward_bias"] - before["forward_bias"]
            expected = s.run(want, {xt: x})
    assert np.isnan(got).any()
    np.testing.assert_array_equal(got, expected)
    assert ran == int(use_onednn)  # (with a NaN in x, never oneDNN's ReLU)


@pytest.mark.parametrize("case", ["finite", "nan", "inf filter", "overflow"])
def test_fused_relu_runs_in_onednn_only_where_no_output_can_be_nan(on, case):
    """oneDNN's ReLU post-op gives 0 for NaN, Relu keeps NaN: _FusedConv2D asks oneDNN to
    rectify only when every input is finite and no window's sum can overflow; either way its
    values are those of Conv2D, the bias add and Relu."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 12, 12, 2)).astype(np.float32)  # 2 * x.size <= the output's size
    f = rng.standard_normal((3, 3, 2, 6)).astype(np.float32)
    if case == "nan":
        x[0, 0, 0, 0] = np.nan
    elif case == "inf filter":
        f[1, 1, 0, 0] = np.inf
    elif case == "overflow":
        x[0, 5, 5, :] = 3e38  # finite, but x * f sums overflow to inf and inf - inf is NaN
        x[0, 5, 6, :] = -3e38
    g = tw.Graph()
    with g.as_default():
        xp = tw.placeholder(tw.float32, [None, 12, 12, 2])
        y = tw.nn.relu(tw.nn.conv2d(xp, tw.constant(f), [1, 1, 1, 1], "SAME") + tw.constant(np.ones(6, np.float32)))
        results = {}
        for fuse in (True, False):
            cfg = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=fuse))
            with tw.Session(graph=g, config=cfg) as s:
                before = onednn.stats["forward_bias_relu"]
                results[fuse] = s.run(y, {xp: x})
                in_onednn = onednn.stats["forward_bias_relu"] - before
            if fuse:
                assert in_onednn == (case == "finite")
    np.testing.assert_array_equal(results[True], results[False])  # NaN and inf where the unfused have them
    if case == "nan":
        assert np.isnan(results[True]).any()


def test_float64_and_switched_off_take_the_own_paths(monkeypatch):
    rng = np.random.default_rng(0)
    x, f, dy = rng.standard_normal((2, 6, 6, 3)), rng.standard_normal((3, 3, 3, 4)), rng.standard_normal((2, 6, 6, 4))
    kw = dict(strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 1, 1, 1], data_format="NHWC")
    monkeypatch.setitem(onednn._state, "on", True)
    before = dict(onednn.stats)
    want = _conv_and_grads(x, f, dy, **kw)
    assert onednn.stats == before                       # float64: oneDNN has no such convolution
    monkeypatch.setitem(onednn._state, "on", False)
    own = _conv_and_grads(*(a.astype(np.float32) for a in (x, f, dy)), **kw)
    assert onednn.stats == before
    for a, b in zip(own, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_environment_switch(monkeypatch):
    monkeypatch.delitem(onednn._state, "on", raising=False)
    monkeypatch.setenv("TENSORWEAVE_ONEDNN", "0")
    assert onednn.enabled() is False
    monkeypatch.delitem(onednn._state, "on")
    monkeypatch.delenv("TENSORWEAVE_ONEDNN")
    assert onednn.enabled() is True


def test_a_forked_child_switches_onednn_off(monkeypatch):
    """(GNU OpenMP is not fork-safe: the handler os.register_at_fork runs in a child.)"""
    monkeypatch.setitem(onednn._state, "on", True)
    onednn._after_fork_in_child()
    assert onednn.enabled() is False


def test_batch_sizes_change_and_concurrent_steps_agree(on):
    """One node sees several batch sizes (one set of primitives each, bounded), and steps run
    from four threads at once give each its own values."""
    rng = np.random.default_rng(1)
    f = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        xp = tw.placeholder(tw.float32, [None, 8, 8, 4])
        y = tw.nn.conv2d(xp, tw.constant(f), strides=[1, 1, 1, 1], padding="SAME")
        (dx,) = tw.gradients(tw.reduce_sum(y * y), [xp])
    xs = {n: rng.standard_normal((n, 8, 8, 4)).astype(np.float32) for n in (1, 2, 5, 7)}
    with tw.Session(graph=g) as s:
        want = {n: s.run([y, dx], {xp: x}) for n, x in xs.items()}
        ref = {n: _conv_and_grads(x.astype(np.float64), f.astype(np.float64),
                                  2 * want[n][0].astype(np.float64), strides=[1, 1, 1, 1], padding="SAME",
                                  dilations=[1, 1, 1, 1], data_format="NHWC") for n, x in xs.items()}
        for n in xs:
            np.testing.assert_allclose(want[n][0], ref[n][0], rtol=1e-4, atol=1e-3)
            np.testing.assert_allclose(want[n][1], ref[n][1], rtol=1e-4, atol=1e-3)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            runs = [(n, pool.submit(s.run, [y, dx], {xp: xs[n]})) for n in [1, 2, 5, 7] * 6]
            for n, fut in runs:
                got = fut.result(timeout=60)
                np.testing.assert_array_equal(got[0], want[n][0])
                np.testing.assert_array_equal(got[1], want[n][1])


def test_loading_leaves_the_environment_as_it_was():
    """libgomp, loaded with libdnnl, reads OMP_WAIT_POLICY once: PASSIVE unless the user chose,
    and the process's environment (what child processes inherit) is left as it was."""
    code = ("import os, tensorweave_cpu.onednn as o; assert o.available(); "
            "print(os.environ.get('OMP_WAIT_POLICY')); "
            "print(any('libgomp' in l for l in open('/proc/self/maps')))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "True"]


# ---------------------------------------------------------------------------------------
# products (onednn.sgemm through blas.matmul)
def _layouts(rng, rows, cols, how):
    """A float32 [rows, cols] operand: C-ordered, a transposed view, or rows of a wider array."""
    if how == "rows":
        return rng.normal(size=(rows, cols)).astype(np.float32)
    if how == "transposed":
        return rng.normal(size=(cols, rows)).astype(np.float32).T
    return rng.normal(size=(rows, cols + 13)).astype(np.float32)[:, 5:5 + cols]  # leading dimension > cols


@pytest.mark.parametrize("a_how", ["rows", "transposed", "strided"])
@pytest.mark.parametrize("b_how", ["rows", "transposed", "strided"])
@pytest.mark.parametrize("m,k,n", [(32, 400, 800), (7, 1000, 600)])
def test_float32_products_run_on_onednn_in_every_layout(on, m, k, n, a_how, b_how):
    from tensorweave_cpu import blas

    rng = np.random.default_rng(m + k)
    a, b = _layouts(rng, m, k, a_how), _layouts(rng, k, n, b_how)
    before = onednn.products["sgemm"]
    got = blas.matmul(a, b)
    assert onednn.products["sgemm"] == before + 1
    assert got.dtype == np.float32 and got.shape == (m, n) and got.flags.c_contiguous
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("case", ["small", "float64", "every other column", "switched off"])
def test_other_products_take_openblas(monkeypatch, case):
    from tensorweave_cpu import blas

    monkeypatch.setitem(onednn._state, "on", case != "switched off")
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32)
    if case == "small":
        a, b = a[:, :40], b[:40, :64]  # 2 * 32 * 40 * 64 flops: below ONEDNN_MIN_FLOPS
    elif case == "float64":
        a, b = a.astype(np.float64), b.astype(np.float64)
    elif case == "every other column":
        b = rng.normal(size=(400, 1600)).astype(np.float32)[:, ::2]
    before = onednn.products["sgemm"]
    got = blas.matmul(a, b)
    assert onednn.products["sgemm"] == before
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("inner,cols,on_onednn", [(200, 1000, True), (1000, 200, True), (400, 1000, False)])
def test_large_products_by_their_shape_and_concurrent_ones_stay_correct(on, inner, cols, on_onednn):
    """A large product (SMALL_FLOPS and more) with a short inner dimension or few output
    columns runs on oneDNN's OpenMP team (one at a time), others split over the cores on
    OpenBLAS; small products run on their callers' threads side by side beside it
    (two-stage loops make them concurrently)."""
    from tensorweave_cpu import blas

    rng = np.random.default_rng(2)
    big_a = rng.normal(size=(1120, inner)).astype(np.float32)
    big_b = rng.normal(size=(inner, cols)).astype(np.float32)
    assert 2.0 * 1120 * inner * cols >= blas.SMALL_FLOPS
    assert (min(inner, cols) <= blas.ONEDNN_TEAM_MAX_SHORT) == on_onednn
    big_want = big_a.astype(np.float64) @ big_b
    before = onednn.products["sgemm"]
    np.testing.assert_allclose(blas.matmul(big_a, big_b), big_want, rtol=1e-5, atol=1e-5 * np.abs(big_want).max())
    assert onednn.products["sgemm"] == before + on_onednn
    pairs = [(rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32))
             for _ in range(4)] + [(big_a, big_b)]
    wants = [a.astype(np.float64) @ b.astype(np.float64) for a, b in pairs]
    before = onednn.products["sgemm"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            for got, want in zip(pool.map(lambda ab: blas.matmul(*ab), pairs), wants):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert onednn.products["sgemm"] == before + 5 * (4 + on_onednn)


def test_a_session_product_and_its_gradients_on_onednn_match_float64(on):
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32)
    dy = rng.normal(size=(32, 800)).astype(np.float32)
    g = tw.Graph()
    with g.as_default():
        xp, wp, dyp = tw.placeholder(tw.float32, [None, 400]), tw.placeholder(tw.float32, [400, 800]), \
            tw.placeholder(tw.float32, [None, 800])
        y = tw.matmul(xp, wp)
        dx, dw = tw.gradients(y, [xp, wp], grad_ys=dyp)
    before = onednn.products["sgemm"]
    with tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0})) as s:
        got = s.run([y, dx, dw], {xp: x, wp: w, dyp: dy})
    assert onednn.products["sgemm"] == before + 3
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    for a, want in zip(got, [x64 @ w64, dy64 @ w64.T, x64.T @ dy64]):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("a_how", ["rows", "transposed"])
def test_a_product_is_added_into_a_sum_in_place(on, a_how):
    """``CPUDevice.accumulate_product`` (blas.accumulate): sum += a @ b by sgemm with
    beta = 1, written into the sum; loops' gradient sums of an LSTM cell's products use it."""
    from tensorweave_cpu.device import CPUDevice

    rng = np.random.default_rng(5)
    a, b = _layouts(rng, 400, 32, a_how), rng.normal(size=(32, 800)).astype(np.float32)
    acc = rng.normal(size=(400, 800)).astype(np.float32)
    want = acc.astype(np.float64) + a.astype(np.float64) @ b
    where = acc.__array_interface__["data"][0]
    dev = CPUDevice("/job:localhost/replica:0/task:0/device:CPU:0", None)
    assert dev.accumulate_product(acc, a, b) is True
    assert acc.__array_interface__["data"][0] == where
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", ["small", "float64", "wrong shape", "switched off"])
def test_products_oneDNN_does_not_take_are_not_added(monkeypatch, case):
    from tensorweave_cpu import blas

    monkeypatch.setitem(onednn._state, "on", case != "switched off")
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(400, 32)).astype(np.float32), rng.normal(size=(32, 800)).astype(np.float32)
    acc = np.zeros((400, 800), np.float32)
    if case == "small":
        a, b, acc = a[:40, :4], b[:4, :40], acc[:40, :40].copy()
    elif case == "float64":
        a, b, acc = a.astype(np.float64), b.astype(np.float64), acc.astype(np.float64)
    elif case == "wrong shape":
        acc = np.zeros((400, 799), np.float32)
    assert blas.accumulate(acc, a, b) is False
    assert not acc.any()


def test_a_convolution_after_a_product_on_the_same_thread_gets_the_whole_team(on, monkeypatch):
    """Products ask OpenMP for a team of one on their thread (``omp_set_num_threads`` is a
    per-thread setting); a convolution on that thread afterwards must ask for the whole team
    again, both when oneDNN makes its primitives (it sizes their work split for the team of
    the moment) and when it runs them, or it would run on one core (the convnet step went
    0.99x -> 1.35-1.6x TF's)."""
    from tensorweave_cpu import blas

    omp = onednn._omp()
    if not omp:
        pytest.skip("GNU OpenMP is not loaded")
    teams = []
    real_make, real_direction = onednn.Convolution.make, onednn.Convolution._direction

    def make(*a, **k):
        teams.append(omp.omp_get_max_threads())
        return real_make(*a, **k)

    def direction(self, kind):
        if kind not in self._made:
            teams.append(omp.omp_get_max_threads())
        return real_direction(self, kind)
    monkeypatch.setattr(onednn.Convolution, "make", staticmethod(make))
    monkeypatch.setattr(onednn.Convolution, "_direction", direction)
    rng = np.random.default_rng(7)
    blas.matmul(rng.normal(size=(32, 400)).astype(np.float32), rng.normal(size=(400, 800)).astype(np.float32))
    assert omp.omp_get_max_threads() == 1
    x = rng.normal(size=(2, 9, 9, 3)).astype(np.float32)
    f = rng.normal(size=(3, 3, 3, 4)).astype(np.float32)
    before = onednn.stats["forward"]
    g = tw.Graph()
    with g.as_default():
        xp, fp = tw.placeholder(tw.float32, x.shape), tw.placeholder(tw.float32, f.shape)
        y = tw.nn.conv2d(xp, fp, strides=[1, 1, 1, 1], padding="SAME")
    with tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0})) as s:
        s.run(y, {xp: x, fp: f})  # a one-node plan: run on this thread
    assert onednn.stats["forward"] == before + 1
    team = onednn._team()
    assert team == (int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count())
    assert omp.omp_get_max_threads() == team
    assert len(teams) == 2 and set(teams) == {team}, teams  # made, then its forward primitive
