"""Compiled loops for small tensors, where NumPy's per-call cost is most of the time: ReLU's
gradient (kernels/nn.py) and the bias and ReLU after a fused product (kernels/math.py). Each
gives the bits of the NumPy path it replaces, NaN, infinities and signed zeros included, and
is the path the kernel takes with numba (the ``path`` fixture runs each test both ways)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework.graph import apply_op
from tensorweave_cpu.kernels import math as cpu_math
from tensorweave_cpu.kernels import nn as cpu_nn

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0]


def _with_specials(a):
    flat = a.reshape(-1)
    flat[:len(SPECIAL)] = SPECIAL
    flat[len(SPECIAL):2 * len(SPECIAL)] = SPECIAL[::-1]
    return a


def _count_calls(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("shape", [(64, 128), (12,), (3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_gradient_has_the_products_bits(monkeypatch, path, shape, dtype):
    calls = _count_calls(monkeypatch, cpu_nn, "_relu_grad_loop")
    rng = np.random.default_rng(0)
    gv = _with_specials(rng.standard_normal(shape).astype(dtype))
    fv = rng.standard_normal(shape).astype(dtype)
    fv.reshape(-1)[:len(SPECIAL)] = [-1, -1, 2, 3, 0]       # inf * 0 is NaN; -0.0 * 1 stays -0.0
    fv.reshape(-1)[-3:] = [np.nan, -0.0, np.inf]
    g = tw.Graph()
    with g.as_default():
        gp, fp = tw.placeholder(dtype, [None] * len(shape)), tw.placeholder(dtype, [None] * len(shape))
        dx = apply_op("ReluGrad", [gp, fp])
        # a transposed gradient is not C-contiguous: the NumPy path, same values
        dx_t = apply_op("ReluGrad", [tw.transpose(gp), tw.transpose(fp)])
    with np.errstate(invalid="ignore"):
        want = gv * (fv > 0)
        want_t = gv.T * (fv.T > 0)
    with tw.Session(graph=g) as s:
        got, got_t = s.run([dx, dx_t], {gp: gv, fp: fv})
    assert got.dtype == dtype and got.tobytes() == want.tobytes()
    assert np.array_equal(got_t, want_t, equal_nan=True)
    assert bool(calls) == (path == "compiled")


@pytest.mark.parametrize("activation", ["relu", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_product_bias_and_relu_have_the_unfused_bits(monkeypatch, path, activation, dtype):
    calls = _count_calls(monkeypatch, cpu_math, "_epilogue_loop")
    rng = np.random.default_rng(1)
    av = rng.standard_normal((64, 32)).astype(dtype)
    av[0, 0], av[1, :] = np.nan, 0.0                      # a NaN row; a row of zero products
    bv = rng.standard_normal((32, 128)).astype(dtype)
    bias = _with_specials(rng.standard_normal(128).astype(dtype))
    bias[20] = -0.0
    outs = {}
    for fuse in (True, False):
        config = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=fuse))
        g = tw.Graph()
        with g.as_default():
            a = tw.placeholder(dtype, [None, 32])
            y = tw.matmul(a, tw.constant(bv)) + tw.constant(bias)
            if activation:
                y = tw.nn.relu(y)
        md = tw.RunMetadata()
        with tw.Session(graph=g, config=config) as s:
            outs[fuse] = s.run(y, {a: av}, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
        types = {n["op"] for gd in md.partition_graphs for n in gd["node"]}
        assert ("_FusedMatMul" in types) == fuse
    assert outs[True].tobytes() == outs[False].tobytes()
    assert bool(calls) == (path == "compiled")
