"""The CUDA element-wise fuser: generated kernels agree with the unfused kernels over the
conformance kit's element-wise ops (bit for bit: the same expressions, no FMA contraction),
compile to PTX with nvcc, and a chain runs as one launch. On both ``gpu`` backends (the
emulator compiles the generated CUDA C with g++; a real GPU with nvcc)."""

import os
import re
import subprocess

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.fusion_ops import FusedExpression, Step
from tensorweave.passes import fusion as fusion_pass
from tensorweave.testing import conformance
from tensorweave_cuda import fusion
from tensorweave_cuda.doctor import find_nvcc

OFF = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
NVCC = find_nvcc()
# On the emulator every generated kernel is a g++ build: a representative set by default,
# every op with TENSORWEAVE_CUDA_FUSION=all (and always on a real GPU).
EMULATOR_OPS = ("Add", "Mul", "Maximum", "SquaredDifference", "Sign", "Relu6", "ReluGrad", "EluGrad", "Sigmoid",
                "Softplus", "Exp", "Pow", "Cast", "Less", "Equal", "LogicalAnd", "LogicalNot", "AddN", "BiasAdd",
                "FloorDiv", "Div")


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch):
    monkeypatch.delenv(fusion_pass.ENV_SWITCH, raising=False)
    monkeypatch.setenv(fusion_pass.ENV_COMPILE_AFTER, "0")


def test_fused_agrees_with_unfused_over_the_conformance_kit(gpu):
    every = gpu.name == "cuda" or os.environ.get("TENSORWEAVE_CUDA_FUSION") == "all"
    checks = conformance.fusion_checks(gpu.device_type, ops=None if every else EMULATOR_OPS)
    failures, fused, refused = [], 0, []
    for check in checks:
        try:
            check.run()
            fused += 1
        except conformance.Unsupported:
            refused.append(check.name)
        except conformance.ConformanceFailure as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)
    assert fused >= (100 if every else 40)
    # refused only what the module docstring says: int32 (host memory), FloorMod, integer FloorDiv
    assert all("int32" in name or "FloorMod" in name or name.startswith("fused-FloorDiv[int")
               for name in refused), refused


def test_a_chain_is_one_launch(gpu):
    x = tw.placeholder(tw.float32, [5], name="x")
    with tw.device(gpu.device(0)):
        y = x
        for _ in range(20):
            y = y * 1.0001 + 0.5
        y = tw.nn.relu(y - 30.0)
    v = np.linspace(-1, 1, 5, dtype=np.float32)
    with tw.Session() as s:
        drv = gpu.open_driver(0)
        out = s.run(y, {x: v})
        before = drv.launches
        s.run(y, {x: v})
        launches = drv.launches - before
    with tw.Session(config=OFF) as s:
        ref = s.run(y, {x: v})
        before = drv.launches
        s.run(y, {x: v})
        launches_off = drv.launches - before
    assert launches == 1 and launches_off == 42
    assert out.tobytes() == ref.tobytes()


def test_broadcast_inputs_and_literals(gpu):
    with tw.device(gpu.device(0)):
        x = tw.placeholder(tw.float64, [3, 1, 2], name="x")
        y = tw.placeholder(tw.float64, [4, 1], name="y")
        b = tw.placeholder(tw.bool, [2], name="b")
        z = (x * -2.5 + y) * tw.cast(b, tw.float64) + tw.cast(tw.logical_not(b), tw.float64)
    feed = {x: np.arange(6, dtype=np.float64).reshape(3, 1, 2), y: np.array([[1.0], [-1.0], [0.5], [2.0]]),
            b: np.array([True, False])}
    with tw.Session() as s:
        out = s.run(z, feed)
        assert len(conformance._fused_nodes(s)) == 1
    with tw.Session(config=OFF) as s:
        ref = s.run(z, feed)
    assert out.shape == (3, 4, 2) and out.tobytes() == ref.tobytes()


def test_a_training_step_ends_with_the_same_weights(gpu):
    rng = np.random.default_rng(3)
    data = rng.normal(size=(6, 4)).astype(np.float32)
    target = rng.normal(size=(6, 2)).astype(np.float32)

    def train(config):
        g = tw.Graph()
        with g.as_default(), tw.device(gpu.device(0)):
            x = tw.placeholder(tw.float32, [6, 4])
            t = tw.placeholder(tw.float32, [6, 2])
            w = tw.Variable(np.full((4, 2), 0.2, np.float32))
            h = tw.tanh(tw.matmul(x, w) * 0.5 + 0.1)
            loss = tw.reduce_sum(tw.square(h - t) * 0.5)
            step = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
            with tw.Session(graph=g, config=config) as s:
                s.run(tw.global_variables_initializer())
                for _ in range(3):
                    s.run(step, {x: data, t: target})
                return s.run(w), len(conformance._fused_nodes(s))

    (w_on, n_on), (w_off, n_off) = train(None), train(OFF)
    # the forward chain and its gradient's (the gradient's seed, ones_like(loss), is folded)
    assert n_on >= 1 and n_off == 0
    assert w_on.tobytes() == w_off.tobytes()


# ---------------------------------------------------------------------------------------
# generated sources with nvcc (no GPU needed)
def _exprs():
    f32, f64, i64, b = tw.float32, tw.float64, tw.int64, tw.bool
    return {
        "mul-add": FusedExpression((f32,), ((1.0001, f32), (0.5, f32)), (Step("Mul", (0, 1), f32),
                                                                        Step("Add", (3, 2), f32))),
        "mixed": FusedExpression((f64, i64, b), ((float("inf"), f64), (-3.0, i64)), (
            Step("Cast", (1,), f64), Step("Minimum", (0, 5), f64), Step("Sigmoid", (6,), f64),
            Step("Mul", (1, 4), i64), Step("Greater", (8, 1), b), Step("LogicalAnd", (9, 2), b),
            Step("Cast", (10,), f64), Step("SoftplusGrad", (7, 11), f64))),
    }


@pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")
@pytest.mark.parametrize("name", ["mul-add", "mixed"])
@pytest.mark.parametrize("modes", ["same", "broadcast"])
def test_generated_kernels_compile_to_ptx_without_fma(tmp_path, name, modes):
    expr = _exprs()[name]
    m = [fusion.SAME] * expr.n_inputs if modes == "same" else [fusion.STRIDED, fusion.SCALAR, fusion.SAME][
        :expr.n_inputs]
    src, sig = fusion.generate(expr, m)
    path = tmp_path / "fused.cu"
    path.write_text(src)
    out = tmp_path / "fused.ptx"
    proc = subprocess.run([NVCC, "--ptx", "-arch=sm_80", *fusion.OPTIONS, "-o", str(out), str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    entry = re.search(r"\.entry\s+tw_fused\s*\(([^)]*)\)", text, re.S)
    assert entry is not None
    assert entry.group(1).count(".param") == len(sig)  # a TwStrided is one (struct) parameter
    if name == "mul-add":  # (libdevice's math functions call fma themselves)
        assert "fma." not in text  # --fmad=false: no step's multiply joined to the next step's add
        plain = tmp_path / "plain.ptx"
        subprocess.run([NVCC, "--ptx", "-arch=sm_80", "-o", str(plain), str(path)], check=True, timeout=300)
        assert "fma.rn.f32" in plain.read_text()  # what the flag prevents


def test_the_fuser_refuses_int32_and_helper_expressions():
    f = fusion.CUDAFuser()
    f32, i32, i64, b = tw.float32, tw.int32, tw.int64, tw.bool
    assert f.supports("Add", (f32, f32), f32, None) and f.supports("Add", (i64, i64), i64, None)
    assert not f.supports("Add", (i32, i32), i32, None) and not f.supports("Cast", (i32,), f32, None)
    assert not f.supports("FloorMod", (f32, f32), f32, None) and f.supports("FloorDiv", (f32, f32), f32, None)
    assert not f.supports("FloorDiv", (i64, i64), i64, None) and f.supports("Div", (i64, i64), i64, None)
    assert f.supports("Equal", (b, b), b, None) and f.supports("LogicalNot", (b,), b, None)
    assert f.supports("Elu", (f32,), f32, 10**9)  # no size limit: one launch is all gain on a GPU
