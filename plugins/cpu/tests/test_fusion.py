"""The CPU's element-wise fuser (numba): fused kernels agree with the NumPy kernels over the
conformance kit's element-wise ops and dtypes, broadcast, keep float32 in float32, compile
once per expression, and a training step ends with the same weights. Skipped without numba
(the plugin then registers no fuser: checked too)."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.passes import fusion as fusion_pass
from tensorweave.testing import conformance
from tensorweave_cpu import fusion
from tensorweave_cpu import plugin as cpu_plugin

needs_numba = pytest.mark.skipif(not fusion.numba_available(), reason="numba is not installed (the fusion extra)")
OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
PARTS = tw.RunOptions(output_partition_graphs=True)


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch):
    monkeypatch.delenv(fusion_pass.ENV_SWITCH, raising=False)
    monkeypatch.setenv(fusion_pass.ENV_COMPILE_AFTER, "0")


def _run(fetches, feed, config=None):
    md = tw.RunMetadata()
    with tw.Session(config=config) as s:
        out = s.run(fetches, feed, options=PARTS, run_metadata=md)
        kernels = [n.fn for n in conformance._fused_nodes(s)]
    ops = [n["op"] for gd in md.partition_graphs for n in gd["node"]]
    return out, ops, kernels


def _bits(a):
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


@needs_numba
@pytest.mark.parametrize("check", conformance.fusion_checks("CPU"), ids=lambda c: c.name)
def test_fused_agrees_with_unfused_over_the_conformance_kit(check):
    try:
        assert check.run() >= 1
    except conformance.Unsupported as e:
        # only what the module docstring lists is left unfused
        assert check.dtype.split("->")[0] in ("float16", "complex64") or "->" in check.dtype or (
            check.op in ("Div", "RealDiv", "FloorDiv", "FloorMod", "Pow") and check.dtype in ("int32", "int64", "uint8")
        ), str(e)
        pytest.skip(str(e))


@needs_numba
def test_a_chain_is_one_ufunc_compiled_once_per_process():
    x = tw.placeholder(tw.float32, [4], name="x")
    y = x
    for _ in range(100):
        y = y * 1.0001 + 0.5
    v = np.linspace(-1, 1, 4, dtype=np.float32)
    before = len(fusion._cache)
    out, ops, kernels = _run(y, {x: v})
    assert ops == ["_FusedElementwise"]
    (k,) = kernels
    assert isinstance(k.compiled, np.ufunc) and k.compiled.nin == 1 and k.compiled.types == ["f->f"]
    assert len(fusion._cache) == before + 1
    out2, _, kernels2 = _run(y, {x: v})   # a new Session: the process-wide cache
    assert kernels2[0].compiled is k.compiled and len(fusion._cache) == before + 1
    ref = v
    for _ in range(100):  # float32 all the way, as the unfused kernels compute
        ref = ref * np.float32(1.0001) + np.float32(0.5)
    assert _bits(out) == _bits(ref) == _bits(out2)


@needs_numba
def test_inputs_broadcast_and_scalars_keep_their_dtype():
    x = tw.placeholder(tw.float32, [3, 1], name="x")
    y = tw.placeholder(tw.float32, [4], name="y")
    i = tw.placeholder(tw.int32, [], name="i")
    z = tw.maximum(x * 0.1 - y, 0.25) / (tw.cast(i, tw.float32) + 3.0)
    w = tw.cast(tw.cast(i * 3 + 1, tw.uint8) * 100, tw.int32)  # integers wrap as NumPy's do
    feed = {x: np.array([[1.0], [-2.0], [3.5]], np.float32), y: np.array([0.5, -0.25, 0.0, 1e-3], np.float32),
            i: np.int32(2)}
    (vz, vw), ops, kernels = _run([z, w], feed)
    assert ops.count("_FusedElementwise") == 2 and all(k.compiled is not None for k in kernels)
    (rz, rw), ops_off, _ = _run([z, w], feed, OFF)
    assert "_FusedElementwise" not in ops_off
    assert _bits(vz) == _bits(rz) and vz.shape == (3, 4)
    assert _bits(vw) == _bits(rw) and int(vw) == (7 * 100) % 256


@needs_numba
def test_transcendental_ops_fuse_only_into_small_tensors():
    small = tw.placeholder(tw.float32, [8], name="small")
    big = tw.placeholder(tw.float32, [1000], name="big")
    ys = tw.exp(small * 2.0) + 1.0
    yb = tw.exp(big * 2.0) + 1.0
    feed = {small: np.ones(8, np.float32), big: np.ones(1000, np.float32)}
    (vs, vb), ops, _ = _run([ys, yb], feed)
    assert ops.count("_FusedElementwise") == 1 and ops.count("Exp") == 1  # big's Mul alone is not fused
    np.testing.assert_allclose(vs, np.exp(np.float32(2)) + 1, rtol=1e-6)
    np.testing.assert_allclose(vb, np.exp(np.float32(2)) + 1, rtol=1e-6)


@needs_numba
def test_more_inputs_than_a_ufunc_takes_run_step_by_step():
    xs = [tw.placeholder(tw.float32, [2], name=f"x{i}") for i in range(fusion.MAX_INPUTS + 4)]
    y = xs[0] * 2.0
    for x in xs[1:]:
        y = y + x
    feed = {x: np.full(2, i, np.float32) for i, x in enumerate(xs)}
    out, ops, kernels = _run(y, feed)
    assert ops == ["_FusedElementwise"] and kernels[0].compiled is None
    assert _bits(out) == _bits(_run(y, feed, OFF)[0])


@needs_numba
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_a_training_step_ends_with_the_same_weights(activation):
    rng = np.random.default_rng(1)
    data = rng.normal(size=(8, 5)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]

    def train(config):
        g = tw.Graph()
        with g.as_default():
            x = tw.placeholder(tw.float32, [8, 5])
            t = tw.placeholder(tw.float32, [8, 3])
            w1 = tw.Variable(rng_w(5, 4))
            w2 = tw.Variable(rng_w(4, 3))
            h = getattr(tw.nn, activation)(tw.matmul(x, w1) * 1.5 + 0.1)
            logits = tw.matmul(h, w2)
            loss = tw.reduce_mean(tw.nn.softmax_cross_entropy_with_logits(labels=t, logits=logits)) + \
                0.01 * tw.reduce_sum(tw.square(w1))
            step = tw.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
            with tw.Session(graph=g, config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(4):
                    s.run(step, {x: data, t: labels})
                fused = len(conformance._fused_nodes(s))
                return s.run([w1, w2]), fused

    def rng_w(*shape):
        return np.random.default_rng(sum(shape)).normal(scale=0.5, size=shape).astype(np.float32)

    (f1, f2), n_fused = train(None)
    (u1, u2), n_off = train(OFF)
    assert n_fused >= 1 and n_off == 0
    if activation == "relu":  # only ops NumPy and the fused kernel compute alike
        assert _bits(f1) == _bits(u1) and _bits(f2) == _bits(u2)
    else:  # tanh from the C library inside the fused sigmoid
        np.testing.assert_allclose(f1, u1, rtol=1e-5)
        np.testing.assert_allclose(f2, u2, rtol=1e-5)


def test_without_numba_the_plugin_registers_no_fuser(monkeypatch):
    monkeypatch.setattr(fusion, "numba_available", lambda: False)
    reg = plugins.FuserRegistry("fuser")
    cpu_plugin.tensorweave_register_fusers(reg)
    assert "CPU" not in reg
    lines = dict(cpu_plugin.tensorweave_doctor())
    assert "numba is not installed" in lines["CPU fusion"] and "tensorweave-cpu[fusion]" in lines["hint"]
    monkeypatch.setattr(fusion, "numba_available", lambda: True)
    cpu_plugin.tensorweave_register_fusers(reg)
    assert isinstance(reg.for_device("cpu"), fusion.CPUFuser)


def test_the_fuser_refuses_what_numba_cannot_match():
    f = fusion.CPUFuser()
    f32, f16, i32, u8, c64, b = tw.float32, tw.float16, tw.int32, tw.uint8, tw.complex64, tw.bool
    assert f.supports("Add", (f32, f32), f32, None) and f.supports("Add", (i32, i32), i32, 10**9)
    assert not f.supports("Add", (f16, f16), f16, 4) and not f.supports("Mul", (c64, c64), c64, 4)
    assert not f.supports("FloorDiv", (i32, i32), i32, 4) and f.supports("FloorDiv", (f32, f32), f32, 4)
    assert not f.supports("Cast", (f32,), u8, 4) and f.supports("Cast", (u8,), f32, 4)
    assert f.supports("Exp", (f32,), f32, 64) and not f.supports("Exp", (f32,), f32, 65)
    assert not f.supports("Exp", (f32,), f32, None)
    assert f.supports("LogicalNot", (b,), b, None) and not f.supports("Exp", (i32,), i32, 4)


@needs_numba
@pytest.mark.parametrize("dtype", ["int8", "int16", "uint16", "uint32", "uint64", "int64"])
def test_integers_beyond_the_kit_wrap_as_numpy_does(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    a[:4] = [info.min, info.max, 0, 1]
    b[:4] = [info.max, info.max, info.min, 0]
    dt = tw.as_dtype(dtype)
    x, y = tw.placeholder(dt, [64], name="x"), tw.placeholder(dt, [64], name="y")
    sign = tw.sign(y) if not dt.is_unsigned else tw.minimum(y, 1)  # Sign takes signed types
    s = tw.square(x * y - x + 3) + tw.maximum(x, y) * sign
    m = tw.logical_and(tw.less(s, x), tw.not_equal(y, x))
    feed = {x: a, y: b}
    (vs, vm), ops, kernels = _run([s, m], feed)
    assert ops.count("_FusedElementwise") == 2 and all(k.compiled is not None for k in kernels)
    (rs, rm), _, _ = _run([s, m], feed, OFF)
    assert _bits(vs) == _bits(rs) and _bits(vm) == _bits(rm)
