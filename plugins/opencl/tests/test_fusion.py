"""The OpenCL element-wise fuser: generated kernels agree with the plugin's own kernels over
the conformance kit's element-wise ops (bit for bit: the same expressions and compiler, no
FMA contraction), inputs broadcast, a chain is one launch, and gradients are unchanged.
PoCL compiles each new kernel the first time it runs, so the kit's agreement runs float32,
int32 and bool by default (TENSORWEAVE_OPENCL_CONFORMANCE=all: every dtype)."""

import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.fusion_ops import FusedExpression, Step
from tensorweave.passes import fusion as fusion_pass
from tensorweave.testing import conformance

OPENCL0 = "/device:OPENCL:0"
OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch):
    monkeypatch.delenv(fusion_pass.ENV_SWITCH, raising=False)
    monkeypatch.setenv(fusion_pass.ENV_COMPILE_AFTER, "0")


def test_fused_agrees_with_unfused_over_the_conformance_kit():
    every = os.environ.get("TENSORWEAVE_OPENCL_CONFORMANCE") == "all"
    failures, fused, refused = [], 0, []
    for check in conformance.fusion_checks("OPENCL"):
        if not every and check.dtype.split("->")[0] not in ("float32", "int32", "bool"):
            continue
        try:
            check.run()
            fused += 1
        except conformance.Unsupported as e:
            refused.append(f"{check.name}: {e}")
        except conformance.ConformanceFailure as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)
    assert not refused, refused  # every op and dtype the plugin has a kernel for fuses
    assert fused >= 60


def _bits(a):
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


def test_transcendentals_are_bit_for_bit_too():
    # Same expressions, same compiler: even exp and tanh agree exactly on OpenCL.
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        x = tw.placeholder(tw.float32, [257], name="x")
        y = tw.sigmoid(tw.exp(x * 0.5) - tw.tanh(x)) * tw.nn.softplus(x) + tw.log1p(tw.abs(x))
    v = np.linspace(-6, 6, 257, dtype=np.float32)
    with tw.Session(graph=g) as s:
        out = s.run(y, {x: v})
        assert len(conformance._fused_nodes(s)) == 1
    with tw.Session(graph=g, config=OFF) as s:
        ref = s.run(y, {x: v})
    assert _bits(out) == _bits(ref)


def test_broadcasting_modes_scalars_and_strides():
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        a = tw.placeholder(tw.float32, [2, 3, 4], name="a")   # the output's shape
        b = tw.placeholder(tw.float32, [3, 1], name="b")      # strided
        c = tw.placeholder(tw.float32, [], name="c")          # one element
        d = tw.placeholder(tw.int32, [1, 1, 4], name="d")     # strided, another dtype
        y = tw.maximum(a * b - c, tw.cast(d * 2, tw.float32)) / 3.0
    rng = np.random.default_rng(0)
    feed = {a: rng.normal(size=(2, 3, 4)).astype(np.float32), b: rng.normal(size=(3, 1)).astype(np.float32),
            c: np.float32(0.25), d: np.array([[[-1, 0, 1, 2]]], np.int32)}
    with tw.Session(graph=g) as s:
        out = s.run(y, feed)
        assert len(conformance._fused_nodes(s)) == 1
    with tw.Session(graph=g, config=OFF) as s:
        ref = s.run(y, feed)
    assert _bits(out) == _bits(ref)


def test_a_chain_is_one_kernel(device):
    from tensorweave_opencl import fusion

    expr = FusedExpression((tw.float32,), ((2.0, tw.float32), (1.0, tw.float32)),
                           (Step("Mul", (0, 1), tw.float32), Step("Add", (3, 2), tw.float32)))
    src = fusion.generate(expr, [fusion.SAME])
    assert src.count("__kernel") == 1 and "FP_CONTRACT OFF" in src
    assert "0x1.0000000000000p+1f" in src  # literals as exact hex floats
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        x = tw.placeholder(tw.float32, [6], name="x")
        y = x
        for _ in range(30):
            y = y * 1.0001 + 0.5
    md = tw.RunMetadata()
    with tw.Session(graph=g) as s:
        out = s.run(y, {x: np.ones(6, np.float32)}, options=tw.RunOptions(output_partition_graphs=True),
                    run_metadata=md)
    assert [n["op"] for gd in md.partition_graphs for n in gd["node"]] == ["_FusedElementwise"]
    ref = np.ones(6, np.float32)
    for _ in range(30):
        ref = ref * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_a_training_step_ends_with_the_same_weights():
    rng = np.random.default_rng(2)
    data = rng.normal(size=(8, 3)).astype(np.float32)
    target = rng.normal(size=(8, 1)).astype(np.float32)

    def train(config):
        g = tw.Graph()
        with g.as_default(), tw.device(OPENCL0):
            x = tw.placeholder(tw.float32, [8, 3])
            t = tw.placeholder(tw.float32, [8, 1])
            w = tw.Variable(np.full((3, 1), 0.3, np.float32))
            h = tw.nn.relu(tw.matmul(x, w) * 2.0 - 0.1)
            loss = tw.reduce_mean(tw.square(h - t))
            step = tw.train.GradientDescentOptimizer(0.05).minimize(loss)
            with tw.Session(graph=g, config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(3):
                    s.run(step, {x: data, t: target})
                return s.run(w), len(conformance._fused_nodes(s))

    (w_on, n_on), (w_off, n_off) = train(None), train(OFF)
    assert n_on >= 1 and n_off == 0
    assert _bits(w_on) == _bits(w_off)


@pytest.mark.parametrize("variant", ["blocked", "tiled"])
@pytest.mark.parametrize("activation", [None, "relu", "relu6"])
def test_fused_matmul_epilogue_agrees_with_the_separate_kernels(variant, activation, monkeypatch):
    from tensorweave_opencl.kernels import matmul

    monkeypatch.setattr(matmul.MatMul, "variant", variant)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 7)) * 4).astype(np.float32)
    b = rng.standard_normal((7, 10)).astype(np.float32)   # 10 columns: a full and a partial group of 8
    bias = rng.standard_normal(10).astype(np.float32)

    def run(config):
        g = tw.Graph()
        with g.as_default(), tw.device(OPENCL0):
            x = tw.placeholder(tw.float32, [None, 7])
            y = tw.matmul(x, tw.constant(b)) + tw.constant(bias)
            if activation:
                y = getattr(tw.nn, activation)(y)
            md = tw.RunMetadata()
            with tw.Session(graph=g, config=config) as s:
                out = s.run(y, {x: a}, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
        return out, [n["op"] for gd in md.partition_graphs for n in gd["node"] if n["op"] != "Const"]

    (fused, ops), (separate, ops_off) = run(None), run(OFF)
    assert ops == ["_FusedMatMul"] and "MatMul" in ops_off
    assert _bits(fused) == _bits(separate)


def test_an_mlp_step_launches_at_most_half_the_kernels_of_the_unoptimised_plan(monkeypatch):
    # The benchmark's OpenCL mlp step (64->128->10, None batch): constant folding of the
    # gradient's shape arithmetic, matmul + bias + Relu epilogues, element-wise fusion and the
    # grouped update together. Counted at the plugin's launchers.
    from tensorweave_opencl import program

    launched = []
    call, run1 = program.Launcher.__call__, program.Launcher.run
    monkeypatch.setattr(program.Launcher, "__call__", lambda self, *a: (launched.append(self.name), call(self, *a)))
    monkeypatch.setattr(program.Launcher, "run", lambda self, *a: (launched.append(self.name), run1(self, *a)))
    rng = np.random.default_rng(4)
    xb = rng.random((64, 64), np.float32)
    yb = rng.integers(0, 10, 64).astype(np.int32)
    w1_0 = (rng.standard_normal((64, 128)) * 0.1).astype(np.float32)
    w2_0 = (rng.standard_normal((128, 10)) * 0.1).astype(np.float32)
    none = tw.ConfigProto(graph_options=tw.GraphOptions(
        enable_constant_folding=False, enable_elementwise_fusion=False, enable_update_grouping=False))

    def step(config):
        g = tw.Graph()
        with g.as_default(), tw.device(OPENCL0):
            x = tw.placeholder(tw.float32, [None, 64])
            y = tw.placeholder(tw.int32, [None])
            w1, b1 = tw.Variable(w1_0), tw.Variable(np.zeros(128, np.float32))
            w2, b2 = tw.Variable(w2_0), tw.Variable(np.zeros(10, np.float32))
            logits = tw.matmul(tw.nn.relu(tw.matmul(x, w1) + b1), w2) + b2
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
            with tw.Session(graph=g, config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(2):
                    s.run(train, {x: xb, y: yb})
                launched.clear()
                s.run(train, {x: xb, y: yb})
                n = len(launched)
                return n, s.run([w1, b1, w2, b2])

    (optimised, values), (plain, reference) = step(None), step(none)
    assert 2 * optimised <= plain, (optimised, plain)
    for v, r in zip(values, reference):
        np.testing.assert_allclose(v, r, rtol=1e-5, atol=1e-6)
