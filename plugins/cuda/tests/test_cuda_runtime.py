"""The CUDA device end to end: every kernel's values against the CPU (NumPy) kernels, copies,
variables and optimizers, the digits MLP, allocators and out-of-memory errors.

Each test runs on the ``gpu`` backends of conftest.py: a real GPU when present (else
skipped with the probe's reason) and the CPU emulator of the driver layer.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors

RNG = np.random.default_rng(42)
CPU = "/device:CPU:0"


def _f(*shape, dtype=np.float32, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


def _run(device, build, feeds, config=None):
    """Build ``build(**placeholders)`` under ``device``; run it; (values, placement)."""
    g = tw.Graph()
    with g.as_default():
        phs = {k: tw.placeholder(tw.as_dtype(np.asarray(v).dtype), np.shape(v), name=k) for k, v in feeds.items()}
        with tw.device(device):
            outs = build(**phs)
        single = not isinstance(outs, list | tuple)
        outs = [outs] if single else list(outs)
    cfg = config or tw.ConfigProto(allow_soft_placement=True)
    with tw.Session(graph=g, config=cfg) as s:
        md = tw.RunMetadata()
        vals = s.run(outs, {phs[k]: v for k, v in feeds.items()}, run_metadata=md)
    where = {t.op.name: str(md.placement.get(t.op.name, "")) for t in outs}
    return vals, where


def _initializers_on_cpu(device):
    """A device function: every node on ``device`` but the random ops, which run on the CPU so
    that the GPU and CPU runs start from the same weights (the GPU's Philox stream differs from
    the CPU's NumPy one, as TF's do)."""
    return lambda op: CPU if op.type in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal") else device


def compare(gpu, build, rtol=1e-5, atol=1e-6, on_gpu=True, **feeds):
    """Run on the GPU and on the CPU; the outputs must agree (dtype, shape, values)."""
    got, where = _run(gpu.device(), build, feeds)
    want, _ = _run(CPU, build, feeds)
    for name, g, w in zip(where, got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
        if on_gpu and name not in feeds:  # (a fed value is returned as fed)
            assert f"device:{gpu.device_type}:0" in where[name], f"{name} ran on {where[name]}"
    return got


# ---------------------------------------------------------------------------------------
# transfers
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(), (0, 3), (5,), (300, 7)])
def test_round_trip(gpu, dtype, shape):
    x = (RNG.uniform(-50, 50, shape) > 0) if dtype is np.bool_ else RNG.uniform(-50, 50, shape).astype(dtype)
    compare(gpu, lambda x: tw.identity(x) * tw.ones_like(x) if dtype is not np.bool_ else tw.logical_not(
        tw.logical_not(x)), x=x)


def test_large_tensor_goes_to_device_and_back(gpu):
    from tensorweave_cuda.device import CUDADevice

    dev = _device(gpu)
    assert isinstance(dev, CUDADevice)
    x = _f(513, 3)  # over HOST_BYTES: a real device buffer
    t = dev.to_device(x)
    assert t.host_value is None and t.ptr != 0
    np.testing.assert_array_equal(dev.to_host(t), x)
    small = dev.to_device(np.arange(4))
    assert small.host_value is not None  # shape-sized values stay host-backed until needed
    assert small.ptr != 0  # ... and are uploaded when a kernel asks
    np.testing.assert_array_equal(dev.to_host(small), np.arange(4))
    with pytest.raises(errors.InvalidArgumentError, match="complex64"):
        dev.to_device(np.zeros(3, np.complex64))


def _device(gpu, i=0):
    s = tw.Session(graph=tw.Graph())
    dev = [d for d in s.devices if d.device_type == gpu.device_type][i]
    s.close()
    return dev


def test_copies_between_two_gpus_and_the_cpu(gpu):
    x = _f(40, 30)
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.float32, x.shape)
        with tw.device(gpu.device(0)):
            a = p * 2.0
        with tw.device(gpu.device(1) if gpu.name == "emulator" else gpu.device(0)):
            b = a + 1.0
        with tw.device(CPU):
            c = b * a
    with tw.Session(graph=g) as s:
        got = s.run([c, b], {p: x})
    np.testing.assert_allclose(got[0], (x * 2 + 1) * x * 2, rtol=1e-6)
    np.testing.assert_allclose(got[1], x * 2 + 1, rtol=1e-6)
    if gpu.name == "emulator":  # two emulated GPUs can reach each other: a peer copy, no host trip
        assert gpu.open_driver(0).copies["peer"] > 0


# ---------------------------------------------------------------------------------------
# element-wise
UNARY_FLOAT = ["negative", "abs", "square", "sign", "exp", "tanh", "sigmoid", "floor", "ceil", "round", "sin", "cos",
               "log1p", "expm1"]


@pytest.mark.parametrize("name", UNARY_FLOAT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_float(gpu, name, dtype):
    fn = getattr(tw, name, None) or getattr(tw.math, name)
    x = _f(7, 9, dtype=dtype, low=-0.9, high=3)
    x[0, 0] = np.nan
    compare(gpu, lambda x: fn(x), rtol=2e-5 if dtype == np.float32 else 1e-12, x=x)


@pytest.mark.parametrize("name", ["sqrt", "rsqrt", "log", "reciprocal"])
def test_unary_positive(gpu, name):
    compare(gpu, lambda x: getattr(tw, name)(x), rtol=2e-5, x=_f(33, dtype=np.float32, low=0.1, high=5))


@pytest.mark.parametrize("name", ["relu", "relu6", "elu", "softplus"])
def test_activations(gpu, name):
    x = _f(4, 300, low=-8, high=8)
    x[0, 0] = np.nan
    compare(gpu, lambda x: getattr(tw.nn, name)(x), rtol=2e-5, x=x)


@pytest.mark.parametrize("name", ["relu", "elu", "softplus", "sigmoid", "tanh"])
def test_activation_gradients(gpu, name):
    fn = getattr(tw.nn, name, None) or getattr(tw, name)
    compare(gpu, lambda x: tw.gradients(tw.reduce_sum(fn(x) * x), [x])[0], rtol=2e-5, x=_f(6, 50, low=-4, high=4))


@pytest.mark.parametrize("xs,ys", [((), ()), ((5,), ()), ((2, 3), (3,)), ((4, 1, 5), (3, 1)), ((600,), (600,)),
                                   ((2, 1, 3, 1), (1, 4, 1, 5))])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum", "squared_difference", "pow"])
def test_binary_broadcasting(gpu, op, xs, ys):
    low = 0.2 if op == "pow" else -3
    compare(gpu, lambda x, y: getattr(tw, op)(x, y), rtol=3e-5, x=_f(*xs, low=low), y=_f(*ys, low=low))


@pytest.mark.parametrize("op", ["realdiv", "floordiv", "floormod", "div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_division(gpu, op, dtype):
    x = RNG.integers(-20, 20, (5, 8)).astype(dtype)
    y = RNG.integers(1, 7, (8,)).astype(dtype) * np.where(RNG.random(8) < 0.5, -1, 1).astype(dtype)
    if op == "realdiv" and dtype == np.int64:
        return
    compare(gpu, lambda x, y: getattr(tw, op)(x, y), x=x, y=y)


def test_int32_shape_arithmetic_stays_on_the_host(gpu):
    x = np.array([6, 7, -9], np.int32)
    got = compare(gpu, lambda x: [x + 1, tw.floordiv(x, 2), tw.maximum(x, 0), tw.equal(x, 7)], x=x)
    assert got[0].dtype == np.int32
    with pytest.raises(errors.InvalidArgumentError, match="division by zero"):
        _run(gpu.device(), lambda x: tw.floordiv(x, 0), {"x": x})


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_comparisons(gpu, op, dtype):
    x = RNG.integers(-3, 3, (4, 6)).astype(dtype)
    y = RNG.integers(-3, 3, (6,)).astype(dtype)
    compare(gpu, lambda x, y: getattr(tw, op)(x, y), x=x, y=y)


def test_logical(gpu):
    x, y = RNG.random((3, 4)) < 0.5, RNG.random((4,)) < 0.5
    compare(gpu, lambda x, y: [tw.logical_and(x, y), tw.logical_or(x, y), tw.logical_not(x), tw.equal(x, y)], x=x, y=y)


@pytest.mark.parametrize("src", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("dst", [tw.float32, tw.float64, tw.int32, tw.int64, tw.bool])
def test_cast(gpu, src, dst):
    x = (RNG.random((5, 60)) < 0.5) if src is np.bool_ else RNG.uniform(-9, 9, (5, 60)).astype(src)
    compare(gpu, lambda x: tw.cast(x, dst), x=x)


def test_add_n(gpu):
    compare(gpu, lambda a, b, c: tw.add_n([a, b, c]), a=_f(3, 5), b=_f(3, 5), c=_f(3, 5))


# ---------------------------------------------------------------------------------------
# reductions
@pytest.mark.parametrize("shape,axis", [((5,), None), ((4, 7), 1), ((4, 7), 0), ((2, 3, 4), [0, 2]),
                                        ((3, 1, 5), 1), ((2, 20000), 1), ((2, 0, 3), 1)])
@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"])
@pytest.mark.parametrize("keep", [False, True])
def test_reductions(gpu, op, shape, axis, keep):
    low, high = (0.9, 1.1) if op == "reduce_prod" else (-2, 2)
    compare(gpu, lambda x: getattr(tw, op)(x, axis=axis, keepdims=keep), rtol=1e-4, atol=1e-5,
            x=_f(*shape, low=low, high=high))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_integer_and_double_sums(gpu, dtype):
    compare(gpu, lambda x: [tw.reduce_sum(x, 0), tw.reduce_max(x, 1)], rtol=1e-12,
            x=RNG.integers(-100, 100, (6, 9)).astype(dtype))


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 7), 1), ((4, 7), 0), ((2, 3, 4), 1)])
@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_arg_reductions(gpu, fn, shape, axis):
    x = _f(*shape)
    compare(gpu, lambda x: [getattr(tw, fn)(x, axis), getattr(tw, fn)(x, axis, output_type=tw.int32)], x=x)


# ---------------------------------------------------------------------------------------
# neural-net ops
@pytest.mark.parametrize("shape", [(3, 10), (2, 3, 300), (1, 1)])
def test_softmax(gpu, shape):
    x = _f(*shape, low=-20, high=20)
    compare(gpu, lambda x: [tw.nn.softmax(x), tw.nn.log_softmax(x)], rtol=2e-5, atol=1e-6, x=x)


def test_cross_entropies(gpu):
    logits, labels = _f(9, 10, low=-5, high=5), RNG.integers(0, 10, 9).astype(np.int32)
    dense = np.eye(10, dtype=np.float32)[labels] * 0.9 + 0.01
    compare(gpu, lambda x, y: tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x), rtol=2e-5,
            x=logits, y=labels)
    compare(gpu, lambda x, y: tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x), rtol=2e-5,
            x=logits, y=labels.astype(np.int64))
    compare(gpu, lambda x, y: tw.nn.softmax_cross_entropy_with_logits(labels=y, logits=x), rtol=2e-5,
            x=logits, y=dense)
    compare(gpu, lambda x, y: tw.gradients(tw.reduce_mean(
        tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)), [x])[0], rtol=2e-5, x=logits, y=labels)


def test_sparse_label_out_of_range_is_nan_on_the_gpu(gpu):
    (loss,), _ = _run(gpu.device(), lambda x, y: tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x),
                      {"x": _f(2, 3), "y": np.array([1, 7], np.int32)})
    assert np.isfinite(loss[0]) and np.isnan(loss[1])


@pytest.mark.parametrize("fmt,shape", [("NHWC", (6, 5)), ("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 5, 3, 4))])
def test_bias_add_and_grad(gpu, fmt, shape):
    c = shape[1] if fmt == "NCHW" else shape[-1]
    compare(gpu, lambda v, b: [tw.nn.bias_add(v, b, data_format=fmt),
                               tw.gradients(tw.reduce_sum(tw.nn.bias_add(v, b, data_format=fmt) * v), [b])[0]],
            rtol=1e-5, v=_f(*shape), b=_f(c))


# ---------------------------------------------------------------------------------------
# array ops
def test_shape_ops(gpu):
    x = _f(2, 3, 4)
    compare(gpu, lambda x: [tw.reshape(x, [4, -1]), tw.expand_dims(x, 1), tw.squeeze(tw.expand_dims(x, 0)),
                            tw.shape(x), tw.size(x), tw.rank(x), tw.transpose(x, [2, 0, 1]),
                            tw.broadcast_to(x[:, :1, :] if False else tw.reshape(x, [2, 1, 12]), [2, 5, 12])], x=x)


def test_fills(gpu):
    x = _f(3, 4)
    compare(gpu, lambda x: [tw.zeros_like(x), tw.ones_like(x), tw.fill([2, 3], 7.5), tw.fill([4], tw.reduce_max(x)),
                            tw.ones_like(tw.cast(x, tw.int64)), tw.zeros_like(tw.greater(x, 0))], x=x)


def test_reshape_errors(gpu):
    with pytest.raises(errors.InvalidArgumentError, match="cannot reshape"):
        _run(gpu.device(), lambda x: tw.reshape(x, tw.shape(x) * 2), {"x": _f(2, 3)})


# ---------------------------------------------------------------------------------------
# MatMul
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul(gpu, ta, tb, dtype):
    m, k, n = 7, 5, 3
    a = _f(*((k, m) if ta else (m, k)), dtype=dtype)
    b = _f(*((n, k) if tb else (k, n)), dtype=dtype)
    compare(gpu, lambda a, b: tw.matmul(a, b, transpose_a=ta, transpose_b=tb),
            rtol=1e-5 if dtype == np.float32 else 1e-12, a=a, b=b)


def test_matmul_empty_inner_dimension(gpu):
    compare(gpu, lambda a, b: tw.matmul(a, b), a=np.zeros((3, 0), np.float32), b=np.zeros((0, 2), np.float32))


# ---------------------------------------------------------------------------------------
# variables and training
def _train(device, optimizer, steps=3, config=None):
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(3)
        x = tw.placeholder(tw.float32, [None, 8])
        y = tw.placeholder(tw.int32, [None])
        with tw.device(_initializers_on_cpu(device)):
            h = tw.layers.dense(x, 16, activation=tw.nn.relu, name="h")
            logits = tw.layers.dense(h, 4, name="out")
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            step = optimizer().minimize(loss)
            counter = tw.Variable(0, dtype=tw.int64, name="counter")
            bump = tw.assign_add(counter, 1)
            scaled = tw.assign_sub(tw.Variable(np.ones(3, np.float32)), [0.5, 0.25, 0.0])
        init = tw.global_variables_initializer()
        tvars = tw.trainable_variables()
    rng = np.random.default_rng(7)  # the same data for every device
    xv, yv = rng.standard_normal((12, 8)).astype(np.float32), rng.integers(0, 4, 12).astype(np.int32)
    with tw.Session(graph=g, config=config or tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(init)
        md = tw.RunMetadata()
        losses = [s.run([step, loss, bump], {x: xv, y: yv}, run_metadata=md)[1] for _ in range(steps)]
        if device != CPU:  # the updates ran where their variables live: on the device
            kind = device.split(":")[-2]
            updates = [n for n, d in md.placement.items() if n.split("/")[-1].startswith(("Apply", "AssignAdd"))]
            assert updates and all(kind in str(md.placement[n]) for n in updates), md.placement
        return losses, s.run([counter, scaled] + tvars)


@pytest.mark.parametrize("opt", [lambda: tw.train.GradientDescentOptimizer(0.5),
                                 lambda: tw.train.MomentumOptimizer(0.1, 0.9),
                                 lambda: tw.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                                 lambda: tw.train.AdamOptimizer(0.01)], ids=["sgd", "momentum", "nesterov", "adam"])
def test_training_matches_cpu(gpu, opt):
    got = _train(gpu.device(), opt)
    want = _train(CPU, opt)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_variable_lives_on_the_gpu(gpu):
    g = tw.Graph()
    with g.as_default():
        with tw.device(gpu.device()):
            v = tw.Variable(np.arange(600, dtype=np.float32), name="v")
            upd = tw.assign(v, v * 2.0)
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as s:
        s.run(init)
        first = s.run(v)
        s.run(upd)
        np.testing.assert_array_equal(s.run(v), first * 2)
        store = s._resources.variable("", "v", tw.float32, [600])
        assert type(store.value).__name__ == "GPUTensor"


def _digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        rng = np.random.default_rng(0)
        return rng.random((128, 64), dtype=np.float32), rng.integers(0, 10, 128).astype(np.int32)
    d = load_digits()
    return (d.data[:128] / 16.0).astype(np.float32), d.target[:128].astype(np.int32)


def _digits_mlp(device, steps=4, config=None):
    xs, ys = _digits()
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(0)
        x = tw.placeholder(tw.float32, [None, 64], name="x")
        y = tw.placeholder(tw.int32, [None], name="y")
        with tw.device(_initializers_on_cpu(device)):
            h = tw.layers.dense(x, 64, activation=tw.nn.relu, name="hidden")
            logits = tw.layers.dense(h, 10, name="logits")
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            correct = tw.equal(tw.cast(tw.argmax(logits, 1), tw.int32), y)
            accuracy = tw.reduce_mean(tw.cast(correct, tw.float32))
            train = tw.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tw.global_variables_initializer()
    cfg = config or tw.ConfigProto(allow_soft_placement=True)
    with tw.Session(graph=g, config=cfg) as s:
        s.run(init)
        md = tw.RunMetadata()
        out = [s.run([train, loss, accuracy], {x: xs[i::2], y: ys[i::2]}, run_metadata=md)[1:] for i in
               range(steps)]
        return np.array(out), md


def test_digits_mlp_step_matches_cpu(gpu):
    got, md = _digits_mlp(gpu.device())
    want, _ = _digits_mlp(CPU)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    on_gpu = [n for n, d in md.placement.items() if f"{gpu.device_type}:0" in str(d)]
    for op in ("hidden/MatMul", "hidden/Relu", "SparseSoftmaxCrossEntropyWithLogits", "ArgMax"):
        assert op in on_gpu, f"{op} was not placed on the GPU"
    assert any("ApplyGradientDescent" in n for n in on_gpu)
    stats = md.allocator_stats[[n for n in md.allocator_stats if gpu.device_type in n][0]]
    assert stats["peak_bytes_in_use"] > 0 and stats["num_allocs"] > 0


def test_digits_mlp_with_pool_allocator(gpu):
    cfg = tw.ConfigProto(allow_soft_placement=True, allocator={gpu.device_type: "pool"})
    got, md = _digits_mlp(gpu.device(), config=cfg)
    want, _ = _digits_mlp(CPU)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    stats = md.allocator_stats[[n for n in md.allocator_stats if gpu.device_type in n][0]]
    assert stats["allocator"] == "pool" and stats["cache_hits"] > 0


# ---------------------------------------------------------------------------------------
# allocators
@pytest.mark.parametrize("kind", ["default", "pool"])
def test_allocator_stats_follow_lifetimes(gpu, kind):
    from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator

    cls = CUDAAllocator if kind == "default" else CUDAPoolAllocator
    alloc = cls("test", gpu.open_driver(0), memory_limit=None)
    a = alloc.allocate(10_000)
    b = alloc.allocate(3000)
    assert alloc.bytes_in_use >= 13_000 and alloc.num_allocs == 2
    peak = alloc.peak_bytes_in_use
    del a
    assert alloc.bytes_in_use < peak
    del b
    assert alloc.bytes_in_use == 0 and alloc.peak_bytes_in_use == peak
    c = alloc.allocate(10_000)
    if kind == "pool":
        assert alloc.stats()["cache_hits"] == 1 and alloc.stats()["bytes_cached"] > 0
    del c
    assert alloc.allocate(0) is None


@pytest.mark.parametrize("kind", ["default", "pool"])
def test_out_of_memory(gpu, kind):
    from tensorweave_cuda.allocator import CUDAAllocator, CUDAPoolAllocator

    cls = CUDAAllocator if kind == "default" else CUDAPoolAllocator
    alloc = cls("/device:GPU:test", gpu.open_driver(0), memory_limit=1 << 20)
    keep = alloc.allocate(600_000)
    with pytest.raises(errors.ResourceExhaustedError, match=r"out of memory on /device:GPU:test: asked for \d+ bytes"):
        alloc.allocate(600_000)
    assert alloc.bytes_in_use >= 600_000  # the failed request left no trace
    unlimited = cls("/device:GPU:test", gpu.open_driver(0), memory_limit=None)
    with pytest.raises(errors.ResourceExhaustedError, match="bytes in use"):
        unlimited.allocate(1 << 50)  # more than any device has: the driver refuses
    del keep


def test_out_of_memory_in_a_session_names_the_node(gpu, monkeypatch):
    monkeypatch.setenv("TENSORWEAVE_GPU_MEMORY_LIMIT", "64KiB")
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [10])
        with tw.device(gpu.device()):
            y = tw.broadcast_to(tw.exp(x), [20_000, 10], name="big")
    with tw.Session(graph=g) as s:
        with pytest.raises(errors.ResourceExhaustedError,
                           match=r"node 'big' on .*out of memory on .*asked for 800000 bytes"):
            s.run(y, {x: np.zeros(10, np.float32)})


# ---------------------------------------------------------------------------------------
def test_conformance_kit(gpu):
    """The core's conformance kit: every op with a kernel here, values and gradients, against
    the CPU; dtypes this device has no kernel for are reported unsupported, not failed."""
    conformance = pytest.importorskip("tensorweave.testing.conformance")
    p = conformance.plan(gpu.device_type)
    assert not p.not_covered and not p.errors, (p.not_covered, p.errors)
    failures, passed = [], 0
    for check in p.checks:
        try:
            check.run()
            passed += 1
        except conformance.Unsupported:
            pass
        except Exception as e:  # noqa: BLE001 - collect them all, report at once
            failures.append(f"{check.name}: {type(e).__name__}: {str(e)[:400]}")
    assert not failures, "\n".join(failures)
    assert passed > 300
