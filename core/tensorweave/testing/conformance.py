"""The device conformance kit: checks any device type against the CPU reference.

For every op that has a kernel for the device type under test, the kit builds small graphs
from a table of example inputs and attrs (below), once with every node pinned to
``/device:<TYPE>:0`` (soft placement lets helper nodes the device has no kernel for fall back
to the CPU; the op under test must land on the device) and once on ``/device:CPU:0``, runs
both and compares outputs (dtype, shape, values within dtype-appropriate tolerances). For
differentiable ops it also compares ``tw.gradients`` of a weighted sum of the outputs, with
the forward and gradient ops on the device, against the same on the CPU (float32 inputs).

Data inputs are fed through placeholders of fully defined shape; inputs that act as attrs
(axes, shapes, permutations, sizes) are constants. Stateful ops run on variables created on
the device; random ops against the CPU's Philox streams (``tensorweave.kernels.random``:
uniforms bit for bit, normals to float rounding) and their distribution's invariants.

The pytest plugin (``tensorweave.testing.pytest_plugin``, ``pytest --tw-device=OPENCL``)
turns :func:`plan` into test items and reports what is missing. The same API works without
pytest::

    from tensorweave.testing import conformance
    p = conformance.plan("OPENCL")
    for check in p.checks:
        check.run()          # raises ConformanceFailure or Unsupported

Ops that come from other plugins get cases from :func:`register_cases`; element-wise ops
with a plain ``x: T -> y: T`` (or ``x: T, y: T -> z: T``) signature are covered
automatically; the rest are reported as "not covered".

:func:`fusion_checks` (at the end) checks a device's element-wise fuser: every element-wise
op's cases fused on the device against the same ops unfused on the device.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

import tensorweave as tw
from tensorweave import errors, plugins
from tensorweave.framework.graph import apply_op
from tensorweave.ops.fusion_ops import FUSABLE, FusedExpression, Step
from tensorweave.ops.training_ops import _INPUT_ORDER, SPARSE_UPDATES, UPDATES
from tensorweave.passes import fusion

# ---------------------------------------------------------------------------------------
# tolerances

# (rtol, atol) for value comparisons by output dtype; integers and bools compare exactly.
TOLERANCES = {
    "float16": (1e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-9, 1e-12),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-9, 1e-12),
}
# Gradients are compared for float32 inputs.
GRADIENT_TOLERANCE = (1e-4, 1e-4)
GRADIENT_DTYPE = "float32"

# The dtypes the kit tries for an op's main type attr, in this order (where the op allows them).
DTYPES = ("float32", "float64", "float16", "int32", "int64", "uint8", "complex64", "bool")

# Type attrs that type attr-like inputs (axes, shapes, sizes): those inputs are constants.
AUX_TYPE_ATTRS = frozenset({"Tidx", "Tshape", "Tperm", "Index", "Tmultiples", "Tdim", "Taxis", "Tlen",
                            "Tnumsegments", "index_type", "Tpaddings", "out_idx"})

# Ops that produce no values to compare: the runtime feeds placeholders and NoOp only orders.
# Nothing to compare: no value (Placeholder, NoOp), or interpreted by the executor for every
# device (the control-flow primitives; tested through tw.cond/tw.while_loop instead).
STRUCTURAL = frozenset({"Placeholder", "NoOp", "Switch", "Merge", "Enter", "Exit", "NextIteration",
                        "LoopCond", "ControlTrigger"})
# TensorArray ops: a per-step resource behind a string handle, nothing to compare op by op;
# tested through tw.TensorArray (tests/ops/test_tensor_array.py) on every device.
STRUCTURAL |= frozenset({"TensorArrayV3", "TensorArrayWriteV3", "TensorArrayReadV3", "TensorArrayGatherV3",
                         "TensorArrayScatterV3", "TensorArrayConcatV3", "TensorArraySplitV3", "TensorArraySizeV3",
                         "TensorArrayCloseV3", "TensorArrayGradV3"})


class ConformanceFailure(AssertionError):
    """The device disagrees with the CPU reference (the message says where and by how much)."""


class Unsupported(Exception):  # noqa: N818 - a skip, not an error
    """The check cannot run: the device (or the CPU reference) has no kernel for these dtypes."""


# ---------------------------------------------------------------------------------------
# cases
@dataclasses.dataclass
class Case:
    """One node to build: its inputs (one entry per input argument; a list for list
    arguments), attrs, and how each input enters the graph.

    ``modes`` per argument: ``"feed"`` (a placeholder), ``"const"`` or ``"var"`` (a variable
    on the device, for ``Ref`` inputs); None picks feed for data and const for attr-like inputs.
    ``check(device_outputs, cpu_outputs, case)`` replaces the value comparison (random ops).
    ``build(op_type, inputs, attrs)`` replaces ``apply_op`` (ops built through a wrapper).
    ``grad_args``: the arguments to differentiate (default: fed floating-point ones);
    ``grad_outputs``: the outputs the loss uses (default: all floating-point ones).
    """

    inputs: list
    attrs: dict = dataclasses.field(default_factory=dict)
    label: str = ""
    modes: tuple | None = None
    check: Callable | None = None
    build: Callable | None = None
    grad_args: tuple | None = None
    grad_outputs: tuple | None = None
    tol: tuple | None = None


def _rng_for(*parts) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def values(shape, dtype, rng, domain="any") -> np.ndarray:
    """Example values: ``any`` (around zero), ``pos`` (0.5..2), ``nonzero``, ``small`` (|x| <= 2
    for integers), ``unit`` (0..1), ``nonneg`` (0..2; integers 0..3)."""
    dt = np.dtype(dtype)
    shape = tuple(shape)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo, hi = {"any": (-5, 6), "pos": (1, 6), "nonzero": (1, 6), "small": (-2, 3), "unit": (0, 2),
                  "nonneg": (0, 4)}[domain]
        if dt.kind == "u":
            lo = max(lo, 0 if domain in ("any", "small", "unit", "nonneg") else 1)
        v = rng.integers(lo, hi, shape)
        if domain == "nonzero" and dt.kind == "i":
            v = v * rng.choice([-1, 1], shape)
        return v.astype(dt)
    if dt.kind == "c":
        part = np.dtype(np.float32 if dt == np.complex64 else np.float64)
        return (values(shape, part, rng, domain) + 1j * values(shape, part, rng, "any" if domain != "unit" else "unit")).astype(dt)
    if domain == "pos":
        v = rng.uniform(0.5, 2.0, shape)
    elif domain == "nonzero":
        v = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif domain == "unit":
        v = rng.uniform(0.0, 1.0, shape)
    elif domain == "nonneg":
        v = rng.uniform(0.0, 2.0, shape)
    else:
        v = rng.uniform(-2.0, 2.0, shape)
    return np.asarray(v, dtype=dt)


# ---------------------------------------------------------------------------------------
# generators: gen(dtype, rng) -> [Case]
UNARY_SHAPES = [(), (7,), (2, 3, 4)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3))]


def _label(*shapes) -> str:
    return "@".join("x".join(map(str, s)) or "scalar" for s in shapes)


def unary(domain="any", shapes=None, attrs=None):
    def gen(dtype, rng):
        return [Case([values(s, dtype, rng, domain)], dict(attrs or {}), _label(s)) for s in (shapes or UNARY_SHAPES)]
    return gen


def binary(domain_x="any", domain_y="any", shapes=None, ties=False):
    def gen(dtype, rng):
        out = []
        for sx, sy in shapes or BINARY_SHAPES:
            x, y = values(sx, dtype, rng, domain_x), values(sy, dtype, rng, domain_y)
            if ties and sx == sy and x.size:
                mask = rng.random(sx) < 0.5
                y = np.where(mask, x, y).astype(x.dtype)
            out.append(Case([x, y], {}, _label(sx, sy)))
        return out
    return gen


def same_shape_binary(domain_x="any", domain_y="any"):
    return binary(domain_x, domain_y, shapes=[((3, 4), (3, 4)), ((2, 3, 4), (2, 3, 4))])


def _i32(*v):
    return np.array(v, dtype=np.int32)


def reduction(domain="any"):
    def gen(dtype, rng):
        x = values((2, 3, 4), dtype, rng, domain)
        cases = []
        for axes, keep in (([1], False), ([0, 2], True), ([-1], False), ([], False), ([0, 1, 2], False), ([2], True)):
            cases.append(Case([x, _i32(*axes)], {"keep_dims": keep}, f"axes={axes}{'-keep' if keep else ''}"))
        cases.append(Case([values((5,), dtype, rng, domain), np.int32(0)], {}, "5-axis0"))
        return cases
    return gen


def arg_reduction(dtype, rng):
    return [Case([values((3, 4), dtype, rng), np.int32(a)], {}, f"3x4-axis{a}") for a in (0, 1, -1)] + [
        Case([values((2, 3, 4), dtype, rng), np.int32(1)], {"output_type": "int32"}, "2x3x4-axis1-int32")]


def cumulative(dtype, rng):
    x = values((3, 4), dtype, rng, "small" if np.dtype(dtype).kind in "iu" else "any")
    return [Case([x, np.int32(a)], {"exclusive": e, "reverse": r}, f"axis{a}{'-excl' if e else ''}{'-rev' if r else ''}")
            for a, e, r in ((0, False, False), (1, True, False), (-1, False, True), (0, True, True))]


def matmul(dtype, rng):
    out = []
    for ta in (False, True):
        for tb in (False, True):
            a = values((3, 2) if ta else (2, 3), dtype, rng)
            b = values((4, 3) if tb else (3, 4), dtype, rng)
            out.append(Case([a, b], {"transpose_a": ta, "transpose_b": tb}, f"ta={int(ta)}-tb={int(tb)}"))
    out.append(Case([values((1, 5), dtype, rng), values((5, 1), dtype, rng)], {}, "1x5@5x1"))
    return out


def batch_matmul(dtype, rng):
    out = []
    for ax in (False, True):
        for ay in (False, True):
            x = values((2, 3, 2) if ax else (2, 2, 3), dtype, rng)
            y = values((2, 4, 3) if ay else (2, 3, 4), dtype, rng)
            out.append(Case([x, y], {"adj_x": ax, "adj_y": ay}, f"adj_x={int(ax)}-adj_y={int(ay)}"))
    out.append(Case([values((3, 4), dtype, rng), values((4, 2), dtype, rng)], {}, "rank2"))
    return out


def _well_conditioned(shape, dtype, rng):
    n = shape[-1]
    a = values(shape, dtype, rng) * 0.3 + np.eye(n) * 2
    return a.astype(dtype)


def matrix_inverse(dtype, rng):
    return [Case([_well_conditioned((3, 3), dtype, rng)], {}, "3x3"),
            Case([_well_conditioned((2, 2, 2), dtype, rng)], {"adjoint": True}, "2x2x2-adjoint")]


def matrix_determinant(dtype, rng):
    return [Case([_well_conditioned((3, 3), dtype, rng)], {}, "3x3"),
            Case([_well_conditioned((2, 4, 4), dtype, rng)], {}, "2x4x4")]


def add_n(dtype, rng):
    return [Case([[values((3, 4), dtype, rng) for _ in range(3)]], {}, "3 inputs"),
            Case([[values((2,), dtype, rng)]], {}, "1 input")]


def softmax(dtype, rng):
    return [Case([values(s, dtype, rng)], {}, _label(s)) for s in ((3, 5), (1, 4), (2, 2, 3))]


def bias_add(dtype, rng):
    return [Case([values((2, 3, 4), dtype, rng), values((4,), dtype, rng)], {}, "2x3x4"),
            Case([values((5, 3), dtype, rng), values((3,), dtype, rng)], {}, "5x3")]


def bias_add_grad(dtype, rng):
    return [Case([values(s, dtype, rng)], {}, _label(s)) for s in ((2, 3, 4), (5, 3))]


def softmax_xent(dtype, rng):
    logits = values((3, 5), dtype, rng)
    raw = rng.uniform(0.1, 1.0, (3, 5))
    labels = (raw / raw.sum(-1, keepdims=True)).astype(dtype)
    onehot = np.eye(4, dtype=dtype)[[0, 3]]
    return [Case([logits, labels], {}, "3x5", grad_args=(0,), grad_outputs=(0,)),
            Case([values((2, 4), dtype, rng), onehot], {}, "one-hot", grad_args=(0,), grad_outputs=(0,))]


def sparse_softmax_xent(dtype, rng):
    return [Case([values((4, 5), dtype, rng), np.array(lab, dtype=np.int64)], {"Tlabels": "int64"}, f"labels={lab}",
                 grad_args=(0,), grad_outputs=(0,)) for lab in ([0, 4, 2, 2], [1, 1, 3, 0])] + [
        Case([values((2, 3), dtype, rng), np.array([2, 0], dtype=np.int32)], {"Tlabels": "int32"}, "int32 labels",
             grad_args=(0,), grad_outputs=(0,))]


_CONV = [  # input shape, filter shape, strides, padding
    ((1, 5, 5, 2), (3, 3, 2, 3), [1, 1, 1, 1], "SAME"),
    ((1, 5, 5, 2), (3, 3, 2, 3), [1, 2, 2, 1], "VALID"),
    ((2, 4, 4, 1), (2, 2, 1, 2), [1, 2, 2, 1], "SAME"),
]


def _conv_out(in_shape, f_shape, strides, padding):
    n, h, w, _ = in_shape
    if padding == "SAME":
        oh, ow = -(-h // strides[1]), -(-w // strides[2])
    else:
        oh, ow = (h - f_shape[0]) // strides[1] + 1, (w - f_shape[1]) // strides[2] + 1
    return (n, oh, ow, f_shape[3])


def conv2d(dtype, rng):
    return [Case([values(i, dtype, rng), values(f, dtype, rng)], {"strides": s, "padding": p}, f"{_label(i, f)}-s{s[1]}-{p}")
            for i, f, s, p in _CONV]


def conv2d_backprop_input(dtype, rng):
    return [Case([_i32(*i), values(f, dtype, rng), values(_conv_out(i, f, s, p), dtype, rng)],
                 {"strides": s, "padding": p}, f"{_label(i, f)}-s{s[1]}-{p}") for i, f, s, p in _CONV]


def conv2d_backprop_filter(dtype, rng):
    return [Case([values(i, dtype, rng), _i32(*f), values(_conv_out(i, f, s, p), dtype, rng)],
                 {"strides": s, "padding": p}, f"{_label(i, f)}-s{s[1]}-{p}") for i, f, s, p in _CONV]


_POOL = [((1, 4, 4, 2), [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), ((1, 4, 4, 2), [1, 3, 3, 1], [1, 1, 1, 1], "SAME"),
         ((2, 5, 5, 1), [1, 2, 2, 1], [1, 2, 2, 1], "SAME")]


def pool(dtype, rng):
    return [Case([values(i, dtype, rng)], {"ksize": k, "strides": s, "padding": p}, f"{_label(i)}-k{k[1]}-s{s[1]}-{p}")
            for i, k, s, p in _POOL]


def _pool_out(i, k, s, p):
    return _conv_out(i, (k[1], k[2], i[3], i[3]), s, p)


def max_pool_grad(dtype, rng):
    i, k, s, p = _POOL[0]  # 2x2 windows, stride 2: the forward value is a plain reshape-max
    x = values(i, dtype, rng)
    y = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4))
    return [Case([x, y, values(y.shape, dtype, rng)], {"ksize": k, "strides": s, "padding": p}, "4x4-k2-s2-VALID")]


def avg_pool_grad(dtype, rng):
    return [Case([_i32(*i), values(_pool_out(i, k, s, p), dtype, rng)], {"ksize": k, "strides": s, "padding": p},
                 f"{_label(i)}-k{k[1]}-s{s[1]}-{p}") for i, k, s, p in _POOL]


def in_top_k(dtype, rng):
    pred = values((4, 5), np.float32, rng)
    return [Case([pred, np.array([0, 4, 2, 1], dtype=dtype)], {"k": k}, f"k={k}") for k in (1, 2, 5)]


def l2_loss(dtype, rng):
    return [Case([values(s, dtype, rng)], {}, _label(s)) for s in ((3, 4), (5,))]


def check_numerics(dtype, rng):
    return [Case([values(s, dtype, rng)], {"message": "conformance"}, _label(s)) for s in ((3, 4), ())]


def relu6(dtype, rng):
    v = values((4, 5), dtype, rng) * 4
    return [Case([v.astype(dtype)], {}, "4x5")]


def reshape(dtype, rng):
    x = values((2, 3, 4), dtype, rng)
    return [Case([x, _i32(*s)], {}, f"to{s}") for s in ((4, 6), (-1,), (2, -1, 2), (24, 1))]


def expand_dims(dtype, rng):
    return [Case([values((2, 3), dtype, rng), np.int32(d)], {}, f"dim{d}") for d in (0, 1, -1)]


def squeeze(dtype, rng):
    x = values((1, 3, 1, 2), dtype, rng)
    return [Case([x], {"squeeze_dims": d}, f"dims{d}") for d in ([], [0], [-2])]


def transpose(dtype, rng):
    return [Case([values((2, 3, 4), dtype, rng), _i32(*p)], {}, f"perm{p}") for p in ((2, 0, 1), (1, 0, 2))] + [
        Case([values((3, 4), dtype, rng), _i32(1, 0)], {}, "2d")]


def concat(dtype, rng):
    return [Case([[values((2, 3), dtype, rng), values((2, 2), dtype, rng)], np.int32(1)], {}, "axis1"),
            Case([[values((1, 3), dtype, rng), values((2, 3), dtype, rng), values((1, 3), dtype, rng)], np.int32(0)], {}, "axis0"),
            Case([[values((2, 2), dtype, rng), values((2, 1), dtype, rng)], np.int32(-1)], {}, "axis-1")]


def pack(dtype, rng):
    return [Case([[values((2, 3), dtype, rng) for _ in range(3)]], {"axis": a}, f"axis{a}") for a in (0, 1, -1)]


def unpack(dtype, rng):
    return [Case([values((3, 2, 4), dtype, rng)], {"num": 3, "axis": 0}, "axis0"),
            Case([values((3, 2, 4), dtype, rng)], {"num": 4, "axis": -1}, "axis-1")]


def split(dtype, rng):
    return [Case([np.int32(1), values((2, 6), dtype, rng)], {"num_split": 3}, "dim1"),
            Case([np.int32(0), values((4, 3), dtype, rng)], {"num_split": 2}, "dim0")]


def split_v(dtype, rng):
    return [Case([values((5, 3), dtype, rng), np.array([1, 3, 1], np.int64), np.int32(0)], {"num_split": 3}, "dim0"),
            Case([values((2, 4), dtype, rng), np.array([-1, 2], np.int64), np.int32(1)], {"num_split": 2}, "dim1-inferred")]


def slice_(dtype, rng):
    x = values((3, 4, 5), dtype, rng)
    return [Case([x, _i32(1, 0, 2), _i32(2, -1, 2)], {}, "3d"), Case([x, _i32(0, 0, 0), _i32(3, 4, 5)], {}, "all")]


def strided_slice(dtype, rng):
    x = values((4, 5, 6), dtype, rng)
    return [
        Case([x, _i32(1, 0, 0), _i32(3, 5, 6), _i32(1, 2, 1)], {}, "stride2"),
        Case([x, _i32(3, 0, 0), _i32(0, 5, 6), _i32(-1, 1, 2)], {}, "negative-stride"),
        Case([x, _i32(1, 0, 0), _i32(2, 0, 0), _i32(1, 1, 1)], {"shrink_axis_mask": 1, "end_mask": 6}, "shrink"),
        Case([x, _i32(0, 1), _i32(0, 4), _i32(1, 1)], {"begin_mask": 1, "end_mask": 1}, "masks"),
    ]


def strided_slice_grad(dtype, rng):
    return [Case([_i32(4, 5), _i32(1, 0), _i32(3, 5), _i32(1, 2), values((2, 3), dtype, rng)], {}, "stride2")]


def tile(dtype, rng):
    return [Case([values((2, 3), dtype, rng), _i32(*m)], {}, f"mult{m}") for m in ((2, 1), (1, 3), (2, 2))]


def gather(dtype, rng):
    return [Case([values((5, 3), dtype, rng), np.array([[0, 4], [2, 2]], np.int32)], {}, "2d-indices"),
            Case([values((6,), dtype, rng), np.array([5, 0, 1], np.int64)], {}, "int64-indices")]


def gather_v2(dtype, rng):
    return [Case([values((3, 4, 2), dtype, rng), np.array([1, 0, 1], np.int32), np.int32(a)], {}, f"axis{a}") for a in (0, 1, -1)]


def one_hot(dtype, rng):
    on, off = values((), dtype, rng, "pos"), values((), dtype, rng, "small")
    idx = np.array([0, 2, -1, 1], np.int64)
    return [Case([idx, np.int32(4), on, off], {"axis": a}, f"axis{a}") for a in (-1, 0)]


def fill(dtype, rng):
    return [Case([_i32(2, 3), values((), dtype, rng)], {}, "2x3"), Case([_i32(0, 2), values((), dtype, rng)], {}, "empty")]


def range_(dtype, rng):
    if np.dtype(dtype).kind == "f":
        args = [(0.5, 3.0, 0.5), (2.0, -1.0, -0.75)]
    else:
        args = [(2, 11, 3), (5, -3, -2), (0, 0, 1)]
    return [Case([np.asarray(a, dtype) for a in t], {}, f"{t}", modes=("const",) * 3) for t in args]


def broadcast_to(dtype, rng):
    return [Case([values((3, 1), dtype, rng), _i32(2, 3, 4)], {}, "3x1-to-2x3x4"), Case([values((), dtype, rng), _i32(2, 2)], {}, "scalar")]


def shape_of(dtype, rng):
    return [Case([values((2, 3, 4), dtype, rng)], {"out_type": o}, f"2x3x4-{o}") for o in ("int32", "int64")]


def rank(dtype, rng):
    return [Case([values(s, dtype, rng)], {}, _label(s)) for s in ((2, 3, 4), ())]


def placeholder_with_default(dtype, rng):
    return [Case([values((2, 3), dtype, rng)], {"shape": [2, 3]}, "2x3")]


def broadcast_gradient_args(dtype, rng):
    return [Case([np.array(a, dtype), np.array(b, dtype)], {}, f"{a}-{b}", modes=("const", "const"))
            for a, b in (([2, 1, 4], [3, 1]), ([5], [2, 5]), ([], [3]))]


def reduced_shape(dtype, rng):
    return [Case([_i32(2, 3, 4), _i32(*ax)], {}, f"axes{ax}", modes=("const", "const")) for ax in ((1,), (0, 2), (-1,))]


def list_diff(dtype, rng):
    x = np.array([1, 2, 3, 4, 5, 6, 3], dtype)
    y = np.array([1, 3, 5], dtype)
    return [Case([x, y], {}, "7-3"), Case([x, x[:0]], {"out_idx": "int64"}, "empty-y")]


def invert_permutation(dtype, rng):
    return [Case([np.array(p, dtype)], {}, f"{p}") for p in ([2, 0, 3, 1], [0])]


def unsorted_segment_sum(dtype, rng):
    return [Case([values((4, 3), dtype, rng), _i32(0, 2, 0, 1), np.int32(3)], {}, "4x3"),
            Case([values((2, 2, 2), dtype, rng), np.array([[1, 1], [0, 3]], np.int64), np.int32(4)], {}, "2d-ids")]


# indexing ops (ops/indexing_ops.py): duplicate indices, empty segments and partitions, ties
def gather_nd(dtype, rng):
    p = values((4, 3, 2), dtype, rng)
    return [Case([p, np.array([[0, 1], [3, 2], [0, 1]], np.int32)], {}, "pairs-duplicate"),
            Case([p, np.array([[[3]], [[1]]], np.int64)], {}, "rows-int64"),
            Case([p, np.array([[1, 2, 0], [2, 0, 1]], np.int32)], {}, "elements")]


def scatter_nd(dtype, rng):
    modes = ("feed", "feed", "const")
    return [Case([np.array([[1], [3], [1]], np.int32), values((3, 2), dtype, rng), _i32(5, 2)], {}, "rows-duplicate",
                 modes=modes),
            Case([np.array([[0, 1], [2, 0], [0, 1]], np.int64), values((3,), dtype, rng), np.array([3, 2], np.int64)],
                 {}, "elements-duplicate-int64", modes=modes)]


def unsorted_segment_extremum(dtype, rng):
    return [Case([values((5, 3), dtype, rng), _i32(0, 2, 0, -1, 2), np.int32(4)], {}, "empty-and-dropped"),
            Case([values((2, 2, 2), dtype, rng), np.array([[1, 1], [0, 1]], np.int64), np.int32(2)], {}, "2d-ids")]


def segment(dtype, rng):
    modes = ("feed", "const")  # constant ids give the output's number of rows at construction
    return [Case([values((5, 3), dtype, rng), _i32(0, 0, 1, 3, 3)], {}, "5x3-empty-segment", modes=modes),
            Case([values((4,), dtype, rng), np.array([0, 1, 1, 1], np.int64)], {}, "vector-int64", modes=modes)]


def dynamic_partition(dtype, rng):
    return [Case([values((5, 2), dtype, rng), _i32(1, 0, 2, 1, 1)], {"num_partitions": 3}, "5x2"),
            Case([values((2, 3), dtype, rng), np.array([[0, 1, 0], [3, 0, 1]], np.int32)], {"num_partitions": 4},
                 "2d-partitions-one-empty")]


def dynamic_stitch(dtype, rng):
    return [Case([[_i32(0, 4), np.array([[1, 2], [3, 4]], np.int32)], [values((2, 3), dtype, rng),
                                                                       values((2, 2, 3), dtype, rng)]], {},
                 "duplicate-index"),
            Case([[_i32(2, 0, 1)], [values((3,), dtype, rng)]], {}, "one-list")]


def unique(dtype, rng):
    x = values((8,), dtype, rng, "small")
    x[3], x[6] = x[0], x[1]
    return [Case([x], {}, "8"), Case([x], {"out_idx": "int64"}, "8-int64")]


def sparse_to_dense(dtype, rng):
    return [Case([np.array([[0, 1], [1, 0], [2, 3]], np.int32), _i32(3, 4), values((3,), dtype, rng),
                  values((), dtype, rng)], {}, "3x4", modes=("feed", "const", "feed", "feed")),
            Case([np.array([4, 1, 2], np.int64), np.array([6], np.int64), values((), dtype, rng), values((), dtype, rng)],
                 {"validate_indices": False}, "vector-unsorted-scalar-value", modes=("feed", "const", "feed", "feed"))]


def reverse_v2(dtype, rng):
    x = values((2, 3, 4), dtype, rng)
    return [Case([x, _i32(*a)], {}, f"axes{list(a)}") for a in ((0,), (1, -1), ())]


def pad(dtype, rng):
    return [Case([values((2, 3), dtype, rng), np.array([[1, 0], [2, 1]], np.int32)], {}, "2x3"),
            Case([values((2, 1, 2), dtype, rng), np.array([[0, 0], [1, 1], [0, 2]], np.int64)], {}, "3d-int64")]


def pad_v2(dtype, rng):
    return [Case([*c.inputs, values((), dtype, rng)], c.attrs, c.label) for c in pad(dtype, rng)]


def mirror_pad(dtype, rng):
    x = values((3, 4), dtype, rng)
    return [Case([x, np.array([[2, 1], [3, 0]], np.int32)], {"mode": "REFLECT"}, "reflect"),
            Case([x, np.array([[3, 1], [1, 4]], np.int64)], {"mode": "SYMMETRIC"}, "symmetric")]


def mirror_pad_grad(dtype, rng):
    return [Case([values((6, 7), dtype, rng), np.array([[2, 1], [3, 0]], np.int32)], {"mode": "REFLECT"}, "reflect"),
            Case([values((7, 9), dtype, rng), np.array([[3, 1], [1, 4]], np.int32)], {"mode": "SYMMETRIC"}, "symmetric")]


def top_k(dtype, rng):
    x = values((3, 5), dtype, rng)
    x[0, 3] = x[0, 1]  # a tie: the lower index comes first
    return [Case([x, np.int32(k)], {}, f"k={k}") for k in (1, 3)] + [
        Case([values((4,), dtype, rng), np.int32(4)], {"sorted": True}, "vector-all")]


def select(dtype, rng):
    c = rng.random((3, 4)) < 0.5
    return [Case([c, values((3, 4), dtype, rng), values((3, 4), dtype, rng)], {}, "3x4"),
            Case([c[:, 0], values((3, 4), dtype, rng), values((3, 4), dtype, rng)], {}, "rows"),
            Case([np.array(True), values((2,), dtype, rng), values((2,), dtype, rng)], {}, "scalar")]


def where_(dtype, rng):
    out = []
    for shape in ((3, 4), (5,)):
        x = values(shape, dtype, rng, "small")
        out.append(Case([np.where(rng.random(shape) < 0.4, np.zeros_like(x), x)], {}, _label(shape)))
    return out


def const(dtype, rng):
    def build(op_type, inputs, attrs, _v=None):
        return tw.constant(attrs["_value"])
    return [Case([], {"_value": values(s, dtype, rng)}, _label(s), build=build) for s in ((2, 3), ())]


_CASTS = [("float32", "int32"), ("int32", "float32"), ("float32", "float64"), ("float64", "float32"), ("bool", "float32"),
          ("float32", "bool"), ("int32", "int64"), ("float32", "float16"), ("float16", "float32"), ("int64", "int32"),
          ("uint8", "float32"), ("complex64", "float32"), ("float32", "complex64")]


# ---------------------------------------------------------------------------------------
# stateful ops: variables on the device
def _var_case(inputs, attrs, label, modes):
    return Case(inputs, attrs, label, modes=modes)


def variable(dtype, rng):
    def build(op_type, inputs, attrs):
        v = tw.Variable(attrs["_value"])
        return v.value()
    return [Case([], {"_value": values((2, 3), dtype, rng)}, "2x3", build=build)]


def assign_like(domain="any"):
    def gen(dtype, rng):
        return [Case([values((2, 3), dtype, rng), values((2, 3), dtype, rng, domain)], {}, "2x3", modes=("var", "feed"))]
    return gen


def is_variable_initialized(dtype, rng):
    return [Case([values((3,), dtype, rng)], {"dtype": dtype}, "initialized", modes=("var",))]


def apply_update(op_type):
    def gen(dtype, rng):
        refs = UPDATES[op_type][0]
        scalars = {"alpha": 0.1, "lr": 0.1, "momentum": 0.9, "beta1_power": 0.9, "beta2_power": 0.99, "beta1": 0.9,
                   "beta2": 0.999, "epsilon": 1e-3, "rho": 0.9}
        cases = []
        for extra in ({}, {"use_nesterov": True}) if "use_nesterov" in str(UPDATES[op_type][2]) else ({},):
            ins, modes = [], []
            for name in _INPUT_ORDER[op_type]:
                if name in refs:
                    pos = name in ("accum", "ms", "v") and op_type != "ApplyMomentum"
                    ins.append(values((2, 3), dtype, rng, "pos" if pos else "any"))
                    modes.append("var")
                elif name in scalars:
                    ins.append(np.asarray(scalars[name], dtype))
                    modes.append("feed")
                else:
                    ins.append(values((2, 3), dtype, rng))
                    modes.append("feed")
            cases.append(Case(ins, dict(extra), "nesterov" if extra else "2x3", modes=tuple(modes)))
        return cases
    return gen


def scatter_like(op_type):
    """Scatter ops on a variable of the device: repeated indices (all of them apply) except
    for the Update ops, whose winner among repeated indices is unspecified."""
    def gen(dtype, rng):
        dup = not op_type.endswith("Update")
        domain = "nonzero" if op_type == "ScatterDiv" else "any"
        modes = ("var", "feed", "feed")
        if op_type.startswith("ScatterNd"):
            pairs = np.array([[0, 1], [2, 0], [0, 1]] if dup else [[0, 1], [2, 0]], np.int32)
            rows = np.array([[2], [0], [2]] if dup else [[2], [0]], np.int64)
            return [Case([values((3, 2), dtype, rng), pairs, values((len(pairs),), dtype, rng, domain)], {},
                         "elements" + ("-duplicate" if dup else ""), modes=modes),
                    Case([values((3, 2), dtype, rng), rows, values((len(rows), 2), dtype, rng, domain)], {},
                         "rows-int64" + ("-duplicate" if dup else ""), modes=modes)]
        ids = np.array([3, 0, 3] if dup else [3, 0], np.int32)
        ids2 = np.array([[1, 1], [0, 2]] if dup else [[1, 3], [0, 2]], np.int64)
        return [Case([values((4, 2), dtype, rng), ids, values((len(ids), 2), dtype, rng, domain)], {},
                     "rows" + ("-duplicate" if dup else ""), modes=modes),
                Case([values((4, 2), dtype, rng), ids2, values((2, 2, 2), dtype, rng, domain)], {},
                     "2d-indices-int64" + ("-duplicate" if dup else ""), modes=modes),
                Case([values((4,), dtype, rng), ids, values((), dtype, rng, domain)], {}, "scalar-update",
                     modes=modes)]
    return gen


def sparse_apply_update(op_type):
    """The sparse optimizer updates on a few rows of a variable and its slots (distinct
    indices, as the optimizers hand them over; rows not named must stay as they are)."""
    def gen(dtype, rng):
        refs, scalars, extra, order = SPARSE_UPDATES[op_type]
        hyper = {"lr": 0.1, "momentum": 0.9, "rho": 0.9, "epsilon": 1e-3, "l1": 0.01, "l2": 0.1, "lr_power": -0.5}
        cases = []
        for extra_attrs, idx in (({}, np.array([3, 0], np.int32)), ({}, np.array([1, 4, 2], np.int64))):
            variants = [extra_attrs]
            if any("use_nesterov" in e for e in extra) and idx.dtype == np.int32:
                variants.append({"use_nesterov": True})
            for attrs in variants:
                ins, modes = [], []
                for name in order:
                    if name in refs:
                        pos = name in ("accum", "ms") and op_type != "SparseApplyMomentum"  # under a sqrt
                        ins.append(values((5, 2), dtype, rng, "pos" if pos else "any"))
                        modes.append("var")
                    elif name in scalars:
                        ins.append(np.asarray(hyper[name], dtype))
                        modes.append("feed")
                    elif name == "indices":
                        ins.append(idx)
                        modes.append("feed")
                    else:
                        ins.append(values((len(idx), 2), dtype, rng))
                        modes.append("feed")
                label = f"{len(idx)}-rows-{idx.dtype}" + ("-nesterov" if attrs else "")
                cases.append(Case(ins, dict(attrs), label, modes=tuple(modes)))
        return cases
    return gen


# random ops: every device draws the CPU's Philox streams (tensorweave.kernels.random): uniform
# values equal bit for bit, normals to the rounding of log/cos/sin (a few ulp); plus invariants.
# RandomShuffle (a NumPy permutation on the CPU) is checked by its invariant only.
_NORMAL_TOL = {"float16": (2e-3, 2e-3), "float32": (2e-6, 1e-7), "float64": (4e-15, 1e-16)}


def _random(op_type):
    def check(dev, cpu, case):
        for d, c in zip(dev, cpu):
            d = np.asarray(d)
            if d.shape != np.shape(c) or d.dtype != np.asarray(c).dtype:
                raise ConformanceFailure(f"shape/dtype {d.shape} {d.dtype}, CPU gives {np.shape(c)} {np.asarray(c).dtype}")
            if op_type in ("RandomUniform", "RandomUniformInt") and not np.array_equal(d, c):
                bad = int(np.count_nonzero(d != c))
                raise ConformanceFailure(f"{bad} of {d.size} values differ from the CPU's Philox stream (same seeds)")
            if op_type in ("RandomStandardNormal", "TruncatedNormal"):
                rtol, atol = _NORMAL_TOL[d.dtype.name]
                if not np.allclose(d, c, rtol=rtol, atol=atol):
                    worst = float(np.max(np.abs(d.astype(np.float64) - np.asarray(c, np.float64))))
                    raise ConformanceFailure(f"values differ from the CPU's Philox stream by up to {worst:.3g} "
                                             f"(rtol {rtol}, atol {atol})")
            if op_type == "RandomUniform" and not ((d >= 0) & (d < 1)).all():
                raise ConformanceFailure(f"values outside [0, 1): {d.min()} .. {d.max()}")
            if op_type == "TruncatedNormal" and not (np.abs(d.astype(np.float64)) <= 2.0 + 1e-3).all():
                raise ConformanceFailure(f"values beyond two standard deviations: {np.abs(d).max()}")
            if op_type == "RandomStandardNormal" and not np.isfinite(d).all():
                raise ConformanceFailure("non-finite values")
            if op_type == "RandomUniformInt":
                lo, hi = int(case.inputs[1]), int(case.inputs[2])
                if not ((d >= lo) & (d < hi)).all():
                    raise ConformanceFailure(f"values outside [{lo}, {hi}): {d.min()} .. {d.max()}")
            if op_type == "RandomShuffle":
                key = np.sort(d.reshape(d.shape[0], -1), axis=0)
                if not np.array_equal(key, np.sort(np.asarray(case.inputs[0]).reshape(d.shape[0], -1), axis=0)):
                    raise ConformanceFailure("the output is not a permutation of the input's rows")

    def gen(dtype, rng):
        attrs = {"seed": 7, "seed2": 11}
        if op_type == "RandomShuffle":
            return [Case([values((6, 2), dtype, rng)], attrs, "6x2", check=check)]
        if op_type == "RandomUniformInt":
            return [Case([_i32(50, 4), np.asarray(-3, dtype), np.asarray(9, dtype)], attrs, "50x4", check=check,
                         modes=("const", "const", "const"))]
        return [Case([_i32(50, 4)], dict(attrs, dtype=dtype), "50x4", check=check, modes=("const",))]
    return gen


# sparse-tensor ops (ops/sparse_ops.py): unsorted and repeated entries, int32 and int64 indices
_SP_IDX = np.array([[0, 1], [2, 0], [1, 3], [2, 0]], np.int64)


def sparse_dense_matmul(dtype, rng):
    modes = ("feed", "feed", "const", "feed")
    return [Case([_SP_IDX, values((4,), dtype, rng), np.array([3, 4], np.int64), values((4, 2), dtype, rng)], {},
                 "3x4@4x2-repeated", modes=modes),
            Case([_SP_IDX.astype(np.int32), values((4,), dtype, rng), np.array([3, 4], np.int64),
                  values((2, 3), dtype, rng)], {"adjoint_a": True, "adjoint_b": True}, "adjoints-int32", modes=modes)]


def sparse_reorder(dtype, rng):
    idx = np.array([[1, 2], [0, 3], [1, 0], [0, 0]], np.int64)
    return [Case([idx, values((4,), dtype, rng), np.array([2, 4], np.int64)], {}, "2x4",
                 modes=("feed", "feed", "const"))]


def sparse_add(dtype, rng):
    real = np.float32 if np.dtype(dtype).kind == "c" else dtype
    b_idx = np.array([[0, 0], [1, 3], [2, 2]], np.int64)
    a_idx = np.array([[0, 1], [1, 3], [2, 0]], np.int64)
    shape = np.array([3, 4], np.int64)
    return [Case([a_idx, values((3,), dtype, rng), shape, b_idx, values((3,), dtype, rng), shape,
                  np.asarray(0, real)], {}, "3x4-overlap", modes=("feed", "feed", "const") * 2 + ("const",))]


def sparse_add_grad(dtype, rng):
    sum_idx = np.array([[0, 0], [0, 1], [1, 3], [2, 0], [2, 2]], np.int64)
    return [Case([values((5,), dtype, rng), np.array([[0, 1], [1, 3], [2, 0]], np.int64),
                  np.array([[0, 0], [1, 3], [2, 1]], np.int64), sum_idx], {}, "one-dropped")]


def sparse_dense_add(dtype, rng):
    return [Case([_SP_IDX, values((4,), dtype, rng), np.array([3, 4], np.int64), values((3, 4), dtype, rng)], {},
                 "3x4-repeated", modes=("feed", "feed", "const", "feed"))]


def sparse_segment(dtype, rng):
    # rows 1 and 3 read twice, segment 1 empty, a last segment of one row
    return [Case([values((4, 3), dtype, rng), _i32(1, 3, 1, 3, 0), _i32(0, 0, 2, 2, 3)], {}, "repeated-rows",
                 modes=("feed", "const", "const"))]


def sparse_segment_grad(dtype, rng):
    return [Case([values((4, 3), dtype, rng), _i32(1, 3, 1, 3, 0), _i32(0, 0, 2, 2, 3), np.int32(5)], {},
                 "repeated-rows", modes=("feed", "const", "const", "const"))]


def embedding_ids_check(dtype, rng):
    return [Case([np.array([[3, 0], [1, 3]], dtype), np.asarray(4, dtype)], {}, "in-range", modes=("feed", "const"))]


# candidate samplers (stateful, random): invariants, not values
def _candidate_sampler(op_type):
    def check(dev, cpu, case):
        for d, c in zip(dev, cpu):
            if np.shape(d) != np.shape(c) or np.asarray(d).dtype != np.asarray(c).dtype:
                raise ConformanceFailure(f"shape/dtype {np.shape(d)} {np.asarray(d).dtype}, CPU gives "
                                         f"{np.shape(c)} {np.asarray(c).dtype}")
        sampled, true_count, sampled_count = (np.asarray(v) for v in dev)
        hi = case.attrs.get("range_max", case.attrs["num_sampled"])
        if not ((sampled >= 0) & (sampled < hi)).all():
            raise ConformanceFailure(f"sampled candidates outside [0, {hi}): {sampled}")
        if case.attrs["unique"] and len(set(sampled.tolist())) != sampled.size:
            raise ConformanceFailure(f"unique=True gave repeated candidates: {sampled}")
        if not (np.isfinite(true_count).all() and (sampled_count > 0).all()):
            raise ConformanceFailure(f"bad expected counts: {true_count}, {sampled_count}")

    def gen(dtype, rng):
        attrs = {"num_true": 2, "num_sampled": 5, "seed": 7, "seed2": 11}
        if op_type != "AllCandidateSampler":
            attrs["range_max"] = 10
        if op_type == "FixedUnigramCandidateSampler":
            attrs["unigrams"] = [float(i + 1) for i in range(10)]
        classes = np.array([[0, 3], [9, 1], [4, 4]], np.int64)
        return [Case([classes], dict(attrs, unique=u), f"unique={u}", check=check) for u in (True, False)]
    return gen


def accidental_hits(dtype, rng):
    return [Case([np.array([[1, 5], [2, 2], [9, 0]], np.int64), np.array([5, 2, 7, 0, 2], np.int64)],
                 {"num_true": 2}, "repeats")]


# string ops (host-side: strings are object arrays of bytes)
def _strings(*items, shape=None):
    out = np.empty(len(items), dtype=object)
    out[:] = [s.encode() if isinstance(s, str) else s for s in items]
    return out if shape is None else out.reshape(shape)


def string_to_hash_bucket(dtype, rng):
    return [Case([_strings("cat", "", "dog", "\u00e9lan", "cat", "x" * 40, shape=(2, 3))], {"num_buckets": 17}, "2x3"),
            Case([_strings("a")], {"num_buckets": 1}, "one-bucket")]


def as_string(dtype, rng):
    x = values((3, 2), dtype, rng)
    cases = [Case([x], {}, "3x2")]
    if np.dtype(dtype).kind == "f":
        cases += [Case([x], {"precision": 3, "width": 12}, "precision-width"),
                   Case([x], {"shortest": True}, "shortest"), Case([x], {"scientific": True}, "scientific")]
    elif np.dtype(dtype).kind in "iu":
        cases.append(Case([x], {"width": 5, "fill": "0"}, "zero-fill"))
    return cases


def sparse_cross(dtype, rng):
    hashed = dtype == "int64"
    idx = np.array([[0, 0], [0, 1], [2, 0]], np.int64)
    attrs = {"N": 2, "hashed_output": hashed, "num_buckets": 50 if hashed else 0, "hash_key": 7,
             "sparse_types": [tw.string, tw.int64], "dense_types": [tw.string], "out_type": tw.as_dtype(dtype),
             "internal_type": tw.string}
    return [Case([[idx, np.array([[1, 0]], np.int64)], [_strings("a", "b", "c"), np.array([4], np.int64)],
                  [np.array([3, 2], np.int64), np.array([3, 1], np.int64)], [_strings("x", "y", "z", shape=(3, 1))]],
                 attrs, "sparse-sparse-dense", modes=("feed", "feed", "const", "feed"))]


def vocabulary_lookup(dtype, rng):
    if dtype == "string":
        keys, vocab = _strings("b", "zz", "a", "", shape=(2, 2)), _strings("a", "b", "c")
    else:
        keys, vocab = np.array([[5, 9], [1, -1]], dtype), np.array([1, 3, 5], dtype)
    return [Case([keys, vocab], {}, "default"), Case([keys, vocab], {"num_oov_buckets": 3}, "oov"),
            Case([keys, vocab], {"default_value": 7}, "default-7")]


# ---------------------------------------------------------------------------------------
# batch normalization, LRN, depthwise convolution, resizing (ops/normalization_ops.py,
# ops/depthwise_conv_ops.py, ops/image_ops.py)
def _bn_u(dtype):
    return "float32" if dtype == "float16" else dtype


def fused_batch_norm(v3):
    def gen(dtype, rng):
        u = dtype if not v3 else _bn_u(dtype)
        out = []
        for shape, fmt, training in (((2, 3, 4, 3), "NHWC", True), ((2, 3, 2, 4), "NCHW", True),
                                     ((2, 3, 4, 3), "NHWC", False)):
            c = shape[3] if fmt == "NHWC" else shape[1]
            stats = [values((c,), u, rng), values((c,), u, rng, "pos")] if not training else \
                [np.zeros((0,), u), np.zeros((0,), u)]
            out.append(Case([values(shape, dtype, rng), values((c,), u, rng, "pos"), values((c,), u, rng)] + stats,
                            {"epsilon": 0.001, "data_format": fmt, "is_training": training},
                            f"{_label(shape)}-{fmt}-{'train' if training else 'infer'}",
                            grad_args=(0, 1, 2), grad_outputs=(0,)))
        return out
    return gen


def fused_batch_norm_grad(v3):
    def gen(dtype, rng):
        u = dtype if not v3 else _bn_u(dtype)
        out = []
        for shape, fmt, training in (((2, 3, 4, 3), "NHWC", True), ((2, 3, 2, 4), "NCHW", True),
                                     ((2, 3, 4, 3), "NHWC", False)):
            c = shape[3] if fmt == "NHWC" else shape[1]
            inputs = [values(shape, dtype, rng), values(shape, dtype, rng), values((c,), u, rng, "pos"),
                      values((c,), u, rng), values((c,), u, rng, "pos")] + ([np.zeros((0,), u)] if v3 else [])
            out.append(Case(inputs, {"epsilon": 0.001, "data_format": fmt, "is_training": training},
                            f"{_label(shape)}-{fmt}-{'train' if training else 'infer'}"))
        return out
    return gen


_LRN = [({"depth_radius": 2, "bias": 1.0, "alpha": 0.3, "beta": 0.75}, (2, 3, 3, 6)),
        ({}, (1, 2, 2, 3))]


def lrn(dtype, rng):
    return [Case([values(s, dtype, rng)], dict(a), f"{_label(s)}-r{a.get('depth_radius', 5)}") for a, s in _LRN]


def lrn_grad(dtype, rng):
    out = []
    for a, s in _LRN:
        x = values(s, dtype, rng)
        r, bias, alpha, beta = a.get("depth_radius", 5), a.get("bias", 1.0), a.get("alpha", 1.0), a.get("beta", 0.5)
        sq = np.square(x.astype(np.float64))
        cs = np.concatenate([np.zeros(s[:3] + (1,)), np.cumsum(sq, -1)], -1)
        d = np.arange(s[3])
        y = (x / (bias + alpha * (cs[..., np.minimum(d + r + 1, s[3])] - cs[..., np.maximum(d - r, 0)])) ** beta)
        out.append(Case([values(s, dtype, rng), x, y.astype(dtype)], dict(a), f"{_label(s)}-r{r}"))
    return out


_DEPTHWISE = [  # input shape (NHWC), filter shape, strides, padding, dilations
    ((1, 5, 5, 2), (3, 3, 2, 2), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ((1, 5, 5, 2), (3, 3, 2, 1), [1, 2, 2, 1], "VALID", [1, 1, 1, 1]),
    ((2, 4, 4, 3), (2, 2, 3, 2), [1, 2, 2, 1], "SAME", [1, 1, 1, 1]),
    ((1, 6, 6, 2), (2, 2, 2, 2), [1, 1, 1, 1], "SAME", [1, 2, 2, 1]),
]


def _dw_out(i, f, s, p, d):
    eff = (f[0] - 1) * d[1] + 1, (f[1] - 1) * d[2] + 1
    n, oh, ow, _ = _conv_out(i, (eff[0], eff[1], i[3], i[3] * f[3]), s, p)
    return (n, oh, ow, i[3] * f[3])


def depthwise(dtype, rng):
    return [Case([values(i, dtype, rng), values(f, dtype, rng)], {"strides": s, "padding": p, "dilations": d},
                 f"{_label(i, f)}-s{s[1]}-d{d[1]}-{p}") for i, f, s, p, d in _DEPTHWISE]


def depthwise_backprop_input(dtype, rng):
    return [Case([_i32(*i), values(f, dtype, rng), values(_dw_out(i, f, s, p, d), dtype, rng)],
                 {"strides": s, "padding": p, "dilations": d}, f"{_label(i, f)}-s{s[1]}-d{d[1]}-{p}")
            for i, f, s, p, d in _DEPTHWISE]


def depthwise_backprop_filter(dtype, rng):
    return [Case([values(i, dtype, rng), _i32(*f), values(_dw_out(i, f, s, p, d), dtype, rng)],
                 {"strides": s, "padding": p, "dilations": d}, f"{_label(i, f)}-s{s[1]}-d{d[1]}-{p}")
            for i, f, s, p, d in _DEPTHWISE]


_RESIZE = [((2, 3, 4, 2), (5, 7), {}), ((1, 4, 6, 1), (2, 3), {}), ((1, 3, 4, 2), (5, 6), {"align_corners": True}),
           ((1, 3, 4, 2), (7, 5), {"half_pixel_centers": True})]


def _resize_label(i, size, a):
    return f"{_label(i)}->{size[0]}x{size[1]}" + "".join(f"-{k}" for k in sorted(a))


def resize(dtype, rng):
    return [Case([values(i, dtype, rng), _i32(*size)], dict(a), _resize_label(i, size, a), modes=("feed", "const"))
            for i, size, a in _RESIZE]


def resize_bilinear_grad(dtype, rng):
    return [Case([values((i[0], *size, i[3]), "float32", rng), values(i, dtype, rng)], dict(a),
                 _resize_label(i, size, a)) for i, size, a in _RESIZE]


def resize_nearest_grad(dtype, rng):
    return [Case([values((i[0], *size, i[3]), dtype, rng, "small"), _i32(*i[1:3])], dict(a),
                 _resize_label(i, size, a), modes=("feed", "const")) for i, size, a in _RESIZE]


# ---------------------------------------------------------------------------------------
# the table
@dataclasses.dataclass
class OpSpec:
    gen: Callable
    dtypes: tuple | None = None      # None: DTYPES filtered by the op's main type attr
    type_attr: str | None = None     # the attr the dtype goes into (default: inferred)
    auto: bool = False               # covered by the signature-based fallback


def _unary_table():
    t = {}
    for name in ("Abs", "Neg", "Exp", "Expm1", "Square", "Sign", "Floor", "Ceil", "Round", "Sin", "Cos", "Tanh",
                 "Sigmoid", "Relu", "Elu", "Softplus", "Identity", "StopGradient", "OnesLike", "ZerosLike", "Conj",
                 "ComplexAbs"):
        t[name] = OpSpec(unary())
    for name in ("Log", "Log1p", "Sqrt", "Rsqrt"):
        t[name] = OpSpec(unary("pos"))
    t["Reciprocal"] = OpSpec(unary("nonzero"))
    t["LogicalNot"] = OpSpec(unary(), dtypes=("bool",))
    t["Relu6"] = OpSpec(relu6)
    t["CheckNumerics"] = OpSpec(check_numerics)
    t["L2Loss"] = OpSpec(l2_loss)
    t["Softmax"] = t["LogSoftmax"] = OpSpec(softmax)
    return t


def _binary_table():
    t = {}
    for name in ("Add", "Sub", "Mul", "SquaredDifference"):
        t[name] = OpSpec(binary())
    for name in ("Maximum", "Minimum"):
        t[name] = OpSpec(binary())
    for name in ("Div", "RealDiv", "FloorDiv", "FloorMod"):
        t[name] = OpSpec(binary("any", "nonzero"))
    t["Pow"] = OpSpec(binary("pos", "nonneg"))
    for name in ("Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"):
        t[name] = OpSpec(binary(ties=True))
    t["LogicalAnd"] = t["LogicalOr"] = OpSpec(binary(), dtypes=("bool",))
    for name in ("ReluGrad", "Relu6Grad", "EluGrad", "SoftplusGrad"):
        t[name] = OpSpec(same_shape_binary())
    return t


def _table() -> dict[str, OpSpec]:
    t = {**_unary_table(), **_binary_table()}
    for name in ("Sum", "Mean", "Max", "Min"):
        t[name] = OpSpec(reduction())
    t["Prod"] = OpSpec(reduction("small"))
    t["All"] = t["Any"] = OpSpec(reduction(), dtypes=("bool",), type_attr="")
    t["ArgMax"] = t["ArgMin"] = OpSpec(arg_reduction)
    t["Cumsum"] = t["Cumprod"] = OpSpec(cumulative)
    t["MatMul"] = OpSpec(matmul)
    t["BatchMatMul"] = OpSpec(batch_matmul)
    t["MatrixInverse"] = OpSpec(matrix_inverse)
    t["MatrixDeterminant"] = OpSpec(matrix_determinant)
    t["AddN"] = OpSpec(add_n)
    t["BiasAdd"] = OpSpec(bias_add)
    t["BiasAddGrad"] = OpSpec(bias_add_grad)
    t["SoftmaxCrossEntropyWithLogits"] = OpSpec(softmax_xent)
    t["SparseSoftmaxCrossEntropyWithLogits"] = OpSpec(sparse_softmax_xent)
    t["Conv2D"] = OpSpec(conv2d)
    t["Conv2DBackpropInput"] = OpSpec(conv2d_backprop_input)
    t["Conv2DBackpropFilter"] = OpSpec(conv2d_backprop_filter)
    t["MaxPool"] = t["AvgPool"] = OpSpec(pool)
    t["MaxPoolGrad"] = OpSpec(max_pool_grad)
    t["AvgPoolGrad"] = OpSpec(avg_pool_grad)
    t["InTopK"] = OpSpec(in_top_k)
    t["FusedBatchNorm"] = OpSpec(fused_batch_norm(False))
    t["FusedBatchNormV3"] = OpSpec(fused_batch_norm(True), type_attr="T")
    t["FusedBatchNormGrad"] = OpSpec(fused_batch_norm_grad(False))
    t["FusedBatchNormGradV3"] = OpSpec(fused_batch_norm_grad(True), type_attr="T")
    t["LRN"] = OpSpec(lrn)
    t["LRNGrad"] = OpSpec(lrn_grad)
    t["DepthwiseConv2dNative"] = OpSpec(depthwise)
    t["DepthwiseConv2dNativeBackpropInput"] = OpSpec(depthwise_backprop_input)
    t["DepthwiseConv2dNativeBackpropFilter"] = OpSpec(depthwise_backprop_filter)
    t["ResizeBilinear"] = t["ResizeNearestNeighbor"] = OpSpec(resize)
    t["ResizeBilinearGrad"] = OpSpec(resize_bilinear_grad)
    t["ResizeNearestNeighborGrad"] = OpSpec(resize_nearest_grad)
    t["Reshape"] = OpSpec(reshape)
    t["ExpandDims"] = OpSpec(expand_dims)
    t["Squeeze"] = OpSpec(squeeze)
    t["Transpose"] = OpSpec(transpose)
    t["ConcatV2"] = OpSpec(concat)
    t["Pack"] = OpSpec(pack)
    t["Unpack"] = OpSpec(unpack)
    t["Split"] = OpSpec(split)
    t["SplitV"] = OpSpec(split_v)
    t["Slice"] = OpSpec(slice_)
    t["StridedSlice"] = OpSpec(strided_slice)
    t["StridedSliceGrad"] = OpSpec(strided_slice_grad)
    t["Tile"] = OpSpec(tile)
    t["Gather"] = OpSpec(gather)
    t["GatherV2"] = OpSpec(gather_v2)
    t["OneHot"] = OpSpec(one_hot)
    t["Fill"] = OpSpec(fill)
    t["Range"] = OpSpec(range_, dtypes=("int32", "int64", "float32", "float64"), type_attr="Tidx")
    t["BroadcastTo"] = OpSpec(broadcast_to)
    t["Shape"] = t["Size"] = OpSpec(shape_of)
    t["Rank"] = OpSpec(rank)
    t["PlaceholderWithDefault"] = OpSpec(placeholder_with_default)
    t["BroadcastGradientArgs"] = OpSpec(broadcast_gradient_args)
    t["ReducedShape"] = OpSpec(reduced_shape, dtypes=("int32", "int64"), type_attr="Tidx")
    t["ListDiff"] = OpSpec(list_diff, dtypes=("int32", "float32"))
    t["InvertPermutation"] = OpSpec(invert_permutation)
    t["UnsortedSegmentSum"] = OpSpec(unsorted_segment_sum)
    t["GatherNd"] = OpSpec(gather_nd)
    t["ScatterNd"] = OpSpec(scatter_nd, type_attr="T")
    t["UnsortedSegmentMax"] = t["UnsortedSegmentMin"] = OpSpec(unsorted_segment_extremum)
    for name in ("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin"):
        t[name] = OpSpec(segment)
    t["DynamicPartition"] = OpSpec(dynamic_partition)
    t["DynamicStitch"] = t["ParallelDynamicStitch"] = OpSpec(dynamic_stitch, type_attr="T")
    t["Unique"] = t["UniqueWithCounts"] = OpSpec(unique)
    t["SparseToDense"] = OpSpec(sparse_to_dense, type_attr="T")
    t["ReverseV2"] = OpSpec(reverse_v2)
    t["Pad"] = OpSpec(pad)
    t["PadV2"] = OpSpec(pad_v2)
    t["MirrorPad"] = OpSpec(mirror_pad)
    t["MirrorPadGrad"] = OpSpec(mirror_pad_grad)
    t["TopKV2"] = OpSpec(top_k)
    t["Select"] = OpSpec(select)
    t["Where"] = OpSpec(where_)
    t["Const"] = OpSpec(const, dtypes=("float32", "float64", "int32", "bool"), type_attr="dtype")
    t["Cast"] = OpSpec(_cast_gen, dtypes=tuple(f"{a}->{b}" for a, b in _CASTS), type_attr="SrcT")
    t["Variable"] = OpSpec(variable, dtypes=("float32", "float64", "int32"), type_attr="dtype")
    t["Assign"] = OpSpec(assign_like())
    t["AssignAdd"] = t["AssignSub"] = OpSpec(assign_like())
    t["IsVariableInitialized"] = OpSpec(is_variable_initialized, dtypes=("float32", "int32"), type_attr="dtype")
    for name in ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyAdam", "ApplyRMSProp"):
        t[name] = OpSpec(apply_update(name))
    for name in ("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
                 "ScatterNdUpdate", "ScatterNdAdd"):
        t[name] = OpSpec(scatter_like(name), type_attr="T")
    for name in SPARSE_UPDATES:
        t[name] = OpSpec(sparse_apply_update(name), dtypes=("float32", "float64"), type_attr="T")
    for name in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal"):
        t[name] = OpSpec(_random(name), type_attr="dtype")
    t["RandomUniformInt"] = OpSpec(_random("RandomUniformInt"), type_attr="Tout")
    t["RandomShuffle"] = OpSpec(_random("RandomShuffle"))
    t["SparseTensorDenseMatMul"] = OpSpec(sparse_dense_matmul, type_attr="T")
    t["SparseReorder"] = OpSpec(sparse_reorder, type_attr="T")
    t["SparseAdd"] = OpSpec(sparse_add, dtypes=("float32", "float64", "int32", "int64", "complex64"), type_attr="T")
    t["SparseAddGrad"] = OpSpec(sparse_add_grad, type_attr="T")
    t["SparseTensorDenseAdd"] = OpSpec(sparse_dense_add, type_attr="T")
    t["EmbeddingIdsCheck"] = OpSpec(embedding_ids_check, type_attr="Tindices")
    for name in ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"):
        t[name] = OpSpec(sparse_segment, type_attr="T")
    for name in ("SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad"):
        t[name] = OpSpec(sparse_segment_grad, type_attr="T")
    for name in ("UniformCandidateSampler", "LogUniformCandidateSampler", "LearnedUnigramCandidateSampler",
                 "FixedUnigramCandidateSampler", "AllCandidateSampler"):
        t[name] = OpSpec(_candidate_sampler(name), dtypes=("int64",), type_attr="")
    t["ComputeAccidentalHits"] = OpSpec(accidental_hits, dtypes=("int64",), type_attr="")
    t["StringToHashBucketFast"] = OpSpec(string_to_hash_bucket)
    t["AsString"] = OpSpec(as_string, type_attr="T")
    t["SparseCross"] = OpSpec(sparse_cross, dtypes=("int64", "string"), type_attr="out_type")
    t["VocabularyLookup"] = OpSpec(vocabulary_lookup, dtypes=("string", "int32", "int64"), type_attr="T")
    # Transfer compression (fixed dtypes: the element-wise fallback does not cover them).
    t["_CompressF32ToBF16"] = OpSpec(_compress_bf16, dtypes=("float32",))
    t["_DecompressBF16ToF32"] = OpSpec(_decompress_bf16, dtypes=("uint16",))
    # The element-wise fusion pass's node, in the dtypes every device holds.
    t["_FusedElementwise"] = OpSpec(_fused, dtypes=("float32", "float64", "int32", "int64", "bool"), type_attr="Tout")
    return t


def _fused(dt, rng):
    d = tw.as_dtype(dt)
    if d.is_bool:  # LogicalOr(LogicalNot(x0), x1)
        expr = FusedExpression((d, d), (), (Step("LogicalNot", (0,), d), Step("LogicalOr", (2, 1), d)))
        return [Case([[values((3, 4), dt, rng), values((4,), dt, rng)]], expr.to_attrs(), "not-or")]
    # Add(Mul(x0, x1), 1), x1 broadcast along the rows
    mul_add = FusedExpression((d, d), ((1.0, d),), (Step("Mul", (0, 1), d), Step("Add", (3, 2), d)))
    cases = [Case([[values((3, 4), dt, rng), values((4,), dt, rng)]], mul_add.to_attrs(), "mul-add")]
    if d.is_floating:  # Tanh(Sub(x0, x1)) > 0 as bool, then back: a comparison and a cast inside
        b = tw.bool
        expr = FusedExpression((d, d), ((0.0, d),), (Step("Sub", (0, 1), d), Step("Tanh", (3,), d),
                                                     Step("Greater", (4, 2), b), Step("Cast", (5,), d),
                                                     Step("Mul", (6, 4), d)))
        cases.append(Case([[values((2, 3), dt, rng), values((2, 3), dt, rng)]], expr.to_attrs(), "tanh-mask"))
    return cases


def _check_fused_steps(op, device_type, kernels) -> None:
    expr = FusedExpression.from_attrs(op._attrs)
    for step in expr.steps:
        if kernels.lookup(step.op, device_type, expr.step_attrs(step)) is None:
            raise Unsupported(f"no {device_type} kernel for {step.op} with {expr.step_attrs(step)}, a step of "
                              f"{op.type}")


def _compress_bf16(dt, rng):
    # specials (zeros, the smallest subnormal, max float, infinities, NaNs with a payload
    # only in the low 16 bits) and random bit patterns
    bits = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0, 0x80000000, 1, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001]
    return [Case([bits.view(np.float32).reshape(8, 8)], label="8x8"), Case([np.float32(-1.5)], label="scalar")]


def _decompress_bf16(dt, rng):
    return [Case([np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)], label="every uint16", tol=(0.0, 0.0))]


def _cast_gen(pair, rng):
    src, dst = pair.split("->")
    x = values((3, 4), src, rng, "any")
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
        x = (x * 3).astype(src)  # truncation toward zero on both signs
    return [Case([x], {"DstT": dst}, "3x4")]


_EXTRA: dict[str, OpSpec] = {}
TABLE: dict[str, OpSpec] = _table()


def register_cases(op_type: str, gen: Callable, dtypes=None, type_attr=None) -> None:
    """Add example inputs for an op (e.g. one a third-party plugin defines):
    ``gen(dtype_name, rng) -> [Case, ...]``; ``dtypes`` defaults to those of DTYPES the op allows."""
    _EXTRA[op_type] = OpSpec(gen, tuple(dtypes) if dtypes else None, type_attr)


def spec_for(op_def) -> OpSpec | None:
    spec = _EXTRA.get(op_def.name) or TABLE.get(op_def.name)
    if spec is not None:
        return spec
    return _auto_spec(op_def)


def _auto_spec(op_def) -> OpSpec | None:
    """Element-wise ops by signature: 1 or 2 inputs and one output, all of one type attr T,
    no attrs without defaults besides T."""
    ins, outs = op_def.inputs, op_def.outputs
    if op_def.stateful or not 1 <= len(ins) <= 2 or len(outs) != 1:
        return None
    ta = outs[0].type_attr
    if ta is None or any(a.type_attr != ta or a.is_list or a.is_ref for a in [*ins, *outs]):
        return None
    if any(not a.has_default for n, a in op_def.attrs.items() if n != ta):
        return None
    gen = unary() if len(ins) == 1 else same_shape_binary()
    return OpSpec(gen, auto=True)


# ---------------------------------------------------------------------------------------
# building and running
def _main_type_attr(op_def, spec: OpSpec) -> str | None:
    if spec.type_attr is not None:
        return spec.type_attr or None
    for arg in op_def.inputs:
        if arg.type_attr and arg.type_attr not in AUX_TYPE_ATTRS and not arg.is_ref:
            return arg.type_attr
    for arg in op_def.inputs + op_def.outputs:
        if arg.type_attr:
            return arg.type_attr
    for name, a in op_def.attrs.items():
        if a.type == "type" and name not in AUX_TYPE_ATTRS:
            return name
    return None


def dtypes_for(op_def, spec: OpSpec) -> list[str]:
    if spec.dtypes is not None:
        allowed_attr = op_def.attrs.get(spec.type_attr) if spec.type_attr else None
        if allowed_attr is not None and allowed_attr.allowed is not None and "->" not in spec.dtypes[0]:
            return [d for d in spec.dtypes if any(x.name == d for x in allowed_attr.allowed)]
        return list(spec.dtypes)
    ta = _main_type_attr(op_def, spec)
    if ta is None:
        fixed = [a.fixed_dtype.name for a in op_def.inputs if a.fixed_dtype is not None]
        return fixed[:1] or ["float32"]
    attr = op_def.attrs[ta]
    allowed = attr.allowed
    return [d for d in DTYPES if allowed is None or any(x.name == d for x in allowed)]


def _is_float(dt) -> bool:
    return np.dtype(dt).kind == "f"


def _arg_is_aux(arg) -> bool:
    if arg.type_attr in AUX_TYPE_ATTRS:
        return True
    return arg.fixed_dtype is not None and arg.fixed_dtype.name in ("int32", "int64")


@dataclasses.dataclass
class _Built:
    graph: Any
    feeds: dict
    fetches: list          # per case: list of output tensors
    test_ops: list         # per case: the ops under test
    var_reads: list        # per case: reads of the case's variables, fetched after the op ran
    targets: list          # per case: ops to run (ops without outputs)
    initializer: Any
    grads: list | None = None


def _flatten(out) -> list:
    if out is None or isinstance(out, tw.Operation):
        return []
    if isinstance(out, tw.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in _flatten(o)]
    if hasattr(out, "value") and callable(out.value):
        return [out.value()]
    return [out]


def _build(op_type, cases, device, dtype, grads=False) -> _Built:
    op_def = plugins.registry().ops.get(op_type)
    g = tw.Graph()
    b = _Built(g, {}, [], [], [], [], None, [] if grads else None)
    with g.as_default(), tw.device(device):
        for ci, case in enumerate(cases):
            ins, fed = [], []
            modes = case.modes or tuple(
                "var" if arg.is_ref else ("const" if _arg_is_aux(arg) else "feed") for arg in op_def.inputs)
            var_objs = []
            for i, (arg, val, mode) in enumerate(zip(op_def.inputs, case.inputs, modes)):
                vals = val if arg.is_list else [val]
                made = []
                for j, v in enumerate(vals):
                    v = np.asarray(v)
                    name = f"c{ci}_{arg.name}{j if arg.is_list else ''}"
                    if mode == "feed":
                        ph = tw.placeholder(tw.as_dtype(v.dtype), v.shape, name=name)
                        b.feeds[ph] = v
                        fed.append((i, ph))
                        made.append(ph)
                    elif mode == "var":
                        var = tw.Variable(v, name=name)
                        var_objs.append(var)
                        made.append(var)
                    else:
                        made.append(tw.constant(v, dtype=tw.as_dtype(v.dtype), name=name))
                ins.append(made if arg.is_list else made[0])
            attrs = {k: v for k, v in case.attrs.items() if not k.startswith("_")}
            before = len(g.get_operations())
            if case.build is not None:
                out = case.build(op_type, ins, case.attrs)
            else:
                out = apply_op(op_type, ins, attrs, name=f"c{ci}_{op_type}")
            created = g.get_operations()[before:]
            b.test_ops.append([op for op in created if op.type == op_type])
            outs = _flatten(out)
            if isinstance(out, tw.Operation):
                b.targets.append(out)
            b.fetches.append(outs)
            # read in a second run: reading in the op's own run would race with its update
            b.var_reads.append([tw.identity(v._ref(), name=f"c{ci}_after_{k}") for k, v in enumerate(var_objs)])
            if grads:
                b.grads.append(_gradients(case, outs, fed, dtype))
        if g.get_collection(tw.GraphKeys.GLOBAL_VARIABLES):
            b.initializer = tw.global_variables_initializer()
    return b


def _gradients(case, outs, fed, dtype):
    which = case.grad_outputs if case.grad_outputs is not None else range(len(outs))
    ys = [outs[k] for k in which if k < len(outs) and outs[k].dtype.is_floating]
    xs = [(i, ph) for i, ph in fed if ph.dtype.is_floating and (case.grad_args is None or i in case.grad_args)]
    if not ys or not xs:
        return []
    rng = _rng_for("weights", case.label)
    terms = []
    for y in ys:
        if y.shape.is_fully_defined():
            w = tw.constant(values(y.shape.as_list(), y.dtype.np_dtype, rng, "any"))
        else:  # known only when it runs (SparseAdd's entries): weights that still differ per position
            w = tw.sin(tw.reshape(tw.cast(tw.range(tw.size(y)), y.dtype), tw.shape(y)) + 1.0)
        terms.append(tw.reduce_sum(y * w))
    loss = terms[0] if len(terms) == 1 else tw.add_n(terms)
    gs = tw.gradients(loss, [ph for _, ph in xs])
    # A gather's gradient is an IndexedSlices: compared densified (repeated rows summed).
    gs = [tw.convert_to_tensor(g) if isinstance(g, tw.IndexedSlices) else g for g in gs]
    return [(f"d/d input {i}", g) for (i, _), g in zip(xs, gs) if g is not None]


def _run(b: _Built, soft: bool):
    config = tw.ConfigProto(allow_soft_placement=soft)
    md = tw.RunMetadata()
    with tw.Session(graph=b.graph, config=config) as sess:
        if b.initializer is not None:
            sess.run(b.initializer)
        if b.grads is not None:
            out = sess.run([[g for _, g in gs] for gs in b.grads], b.feeds, run_metadata=md)
            return out, md.placement
        fetch = [f for f in b.fetches]
        out = sess.run([fetch, b.targets], b.feeds, run_metadata=md)[0]
        placement = dict(md.placement)
        if any(b.var_reads):
            after = sess.run(b.var_reads, b.feeds)
            out = [list(o) + list(a) for o, a in zip(out, after)]
        return out, placement


def _describe_mismatch(dev, ref, rtol, atol) -> str:
    d = np.asarray(dev)
    r = np.asarray(ref)
    if d.dtype.kind in "fc":
        err = np.abs(d.astype(np.complex128 if d.dtype.kind == "c" else np.float64) - r)
        bad = ~np.isclose(d, r, rtol=rtol, atol=atol, equal_nan=True)
    else:
        err = (d != r).astype(np.float64)
        bad = d != r
    idx = np.argwhere(bad)[:3]
    if d.ndim:
        where = ", ".join(f"at {tuple(int(x) for x in i)}: {d[tuple(i)].item()!r} vs {r[tuple(i)].item()!r}" for i in idx)
    else:
        where = f"{d.item()!r} vs {r.item()!r}"
    return (f"{int(bad.sum())} of {bad.size} elements differ (max abs diff {float(np.nanmax(err)) if err.size else 0:.3g}, "
            f"rtol={rtol}, atol={atol}); {where}")


def compare(dev, ref, declared_dtype, tol=None) -> str | None:
    """None when ``dev`` matches ``ref``; otherwise what differs."""
    d, r = np.asarray(dev), np.asarray(ref)
    if declared_dtype is not None and d.dtype != np.dtype(declared_dtype) and d.dtype != object:
        return f"dtype {d.dtype}, but the op declares {np.dtype(declared_dtype)} (CPU gives {r.dtype})"
    if d.dtype != r.dtype:
        return f"dtype {d.dtype}, CPU gives {r.dtype}"
    if d.shape != r.shape:
        return f"shape {d.shape}, CPU gives {r.shape}"
    rtol, atol = tol or TOLERANCES.get(d.dtype.name, (0.0, 0.0))
    if d.dtype.kind in "fc":
        ok = np.allclose(d, r, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = np.array_equal(d, r)
    return None if ok else _describe_mismatch(d, r, rtol, atol)


@dataclasses.dataclass
class Check:
    """One test: an op, one dtype, its cases; ``kind`` is "values" or "gradients"."""

    op: str
    dtype: str
    kind: str
    cases: list
    device_type: str
    auto: bool = False

    @property
    def name(self) -> str:
        return f"{self.op}[{'grad-' if self.kind == 'gradients' else ''}{self.dtype}]"

    def run(self) -> None:
        """Raise ConformanceFailure when the device disagrees with the CPU, Unsupported when
        the check cannot run on this device; return None when it passes."""
        device = f"/device:{self.device_type}:0"
        grads = self.kind == "gradients"
        dtype = self.dtype.split("->")[0]
        try:
            dev_b = _build(self.op, self.cases, device, dtype, grads)
            ref_b = _build(self.op, self.cases, "/device:CPU:0", dtype, grads)
        except errors.OpError as e:
            raise ConformanceFailure(f"building the example graph failed (a bug in the conformance table?): {e}") from e
        kernels = plugins.registry().kernels
        for ops in dev_b.test_ops:
            for op in ops:
                types = {k: v.name for k, v in op._attrs.items() if hasattr(v, "is_floating")}
                if kernels.lookup(op.type, self.device_type, op._attrs) is None:
                    raise Unsupported(f"no {self.device_type} kernel for {op.type} with {types}")
                if op.type == "_FusedElementwise":  # runs the device's kernels of its steps
                    _check_fused_steps(op, self.device_type, kernels)
                if kernels.lookup(op.type, "CPU", op._attrs) is None:
                    raise Unsupported(f"no CPU reference kernel for {op.type} with {types}")
        if grads and not any(dev_b.grads):
            raise Unsupported(f"no gradient reaches the inputs of {self.op}")
        try:
            ref, _ = _run(ref_b, soft=False)
        except errors.OpError as e:
            raise ConformanceFailure(f"the CPU reference failed (a bug in the conformance table?): {e}") from e
        try:
            got, placement = _run(dev_b, soft=True)
        except errors.OpError as e:
            raise ConformanceFailure(f"{self.op} on {self.device_type} raised {type(e).__name__}: {e}") from e
        problems = []
        for case, ops in zip(self.cases, dev_b.test_ops):
            for op in ops:
                where = placement.get(op.name)
                if where is not None and f"/device:{self.device_type}:" not in where:
                    problems.append(f"[{case.label}] {op.name} was placed on {where}, not on {self.device_type}")
        if grads:
            rtol, atol = GRADIENT_TOLERANCE
            for case, gs, d_vals, r_vals in zip(self.cases, dev_b.grads, got, ref):
                for (what, _), dv, rv in zip(gs, d_vals, r_vals):
                    msg = compare(dv, rv, None, (rtol, atol))
                    if msg:
                        problems.append(f"[{case.label}] gradient {what}: {msg}")
        else:
            for case, outs, d_vals, r_vals in zip(self.cases, dev_b.fetches, got, ref):
                if case.check is not None:
                    try:
                        case.check(d_vals, r_vals, case)
                    except ConformanceFailure as e:
                        problems.append(f"[{case.label}] {e}")
                    continue
                names = [f"output {k}" for k in range(len(outs))] + [
                    f"variable {k} after the op" for k in range(len(d_vals) - len(outs))]
                declared = [t.dtype.np_dtype if not t.dtype.is_string else None for t in outs] + [None] * (
                    len(d_vals) - len(outs))
                for name, dv, rv, dd in zip(names, d_vals, r_vals, declared):
                    msg = compare(dv, rv, dd, case.tol)
                    if msg:
                        problems.append(f"[{case.label}] {name}: {msg}")
        if problems:
            head = f"{self.op} ({self.dtype}, {self.kind}) on {self.device_type} differs from the CPU reference:"
            raise ConformanceFailure("\n  ".join([head, *problems]))


@dataclasses.dataclass
class Plan:
    device_type: str
    checks: list
    not_covered: list          # ops with a device kernel but no example inputs
    structural: list           # ops with nothing to compare (Placeholder, NoOp)
    missing: list              # ops with a CPU kernel but none for the device
    auto_covered: list         # ops covered by the signature-based fallback
    errors: dict               # op -> why its cases could not be generated


def missing_ops(device_type: str) -> list[str]:
    """Ops that have a CPU kernel but no kernel for ``device_type``."""
    kernels = plugins.registry().kernels
    have = set(kernels.ops_for_device(device_type.upper()))
    return sorted(op for op in kernels.ops_for_device("CPU") if op not in have)


def plan(device_type: str, ops=None, gradients: bool = True) -> Plan:
    """The checks for every op with a ``device_type`` kernel (or only ``ops``)."""
    device_type = device_type.upper()
    reg = plugins.registry()
    have = reg.kernels.ops_for_device(device_type)
    cpu = set(reg.kernels.ops_for_device("CPU"))
    checks, not_covered, structural, auto, errs = [], [], [], [], {}
    for op_type in have:
        if ops is not None and op_type not in ops:
            continue
        if op_type not in cpu or op_type not in reg.ops:
            continue  # nothing to compare against
        if op_type in STRUCTURAL:
            structural.append(op_type)
            continue
        op_def = reg.ops.get(op_type)
        spec = spec_for(op_def)
        if spec is None:
            not_covered.append(op_type)
            continue
        if spec.auto:
            auto.append(op_type)
        differentiable = op_def.gradient is not None and getattr(op_def.gradient, "__name__", "") != "NO_GRADIENT"
        for dt in dtypes_for(op_def, spec):
            rng = _rng_for(op_type, dt)
            try:
                cases = spec.gen(dt, rng)
            except Exception as e:  # noqa: BLE001 - a broken generator is reported, not fatal
                errs[op_type] = f"{type(e).__name__}: {e}"
                continue
            _fill_type_attr(op_def, spec, dt, cases)
            checks.append(Check(op_type, dt, "values", cases, device_type, spec.auto))
            src, _, dst = dt.partition("->")  # Cast checks are named by "src->dst"
            if (gradients and differentiable and src == GRADIENT_DTYPE and not op_def.stateful
                    and (not dst or dst.startswith("float"))):
                checks.append(Check(op_type, dt, "gradients", cases, device_type, spec.auto))
    return Plan(device_type, checks, not_covered, structural, missing_ops(device_type), auto, errs)


def _fill_type_attr(op_def, spec, dt, cases):
    """Attrs that inputs do not determine (a type attr of an op without such inputs)."""
    ta = _main_type_attr(op_def, spec)
    if not ta or "->" in dt:
        return
    inferred = {a.type_attr for a in op_def.inputs if a.type_attr}
    if ta in inferred or ta not in op_def.attrs:
        return
    for c in cases:
        if c.build is None:
            c.attrs.setdefault(ta, dt)


# ---------------------------------------------------------------------------------------
# fusion agreement: element-wise ops fused by the device's fuser against the same ops unfused
#
# Each element-wise op's cases run as ``op(inputs)`` followed by an exact second op (``* 1``,
# or ``LogicalNot`` for bool results), all on the device, once with element-wise fusion (the
# fused node compiled at once) and once without. The ops a fused kernel may compute with
# another implementation of a math function (the C library's instead of NumPy's SIMD loops)
# agree within FUSION_RTOL; every other op agrees bit for bit (signs of zeros included).
FUSION_INEXACT = frozenset({"Exp", "Log", "Log1p", "Expm1", "Sin", "Cos", "Tanh", "Sigmoid", "Elu", "Softplus",
                            "Pow", "EluGrad", "SoftplusGrad"})
FUSION_RTOL = 1e-6
FUSION_EXTRA_OPS = ("AddN", "BiasAdd")  # the pass rewrites these into Add steps


@dataclasses.dataclass
class FusionCheck:
    """One op and dtype of the fusion agreement (see above)."""

    op: str
    dtype: str
    cases: list
    device_type: str

    @property
    def name(self) -> str:
        return f"fused-{self.op}[{self.dtype}]"

    def run(self) -> int:
        """Raise ConformanceFailure when fused and unfused differ, Unsupported when the
        device's fuser fuses none of the cases; return how many cases were fused."""
        device = f"/device:{self.device_type}:0"
        g = tw.Graph()
        feeds, fetches = {}, []
        op_def = plugins.registry().ops.get(self.op)
        with g.as_default(), tw.device(device):
            for ci, case in enumerate(self.cases):
                ins = []
                for arg, val in zip(op_def.inputs, case.inputs):
                    made = []
                    for j, v in enumerate(val if arg.is_list else [val]):
                        v = np.asarray(v)
                        ph = tw.placeholder(tw.as_dtype(v.dtype), v.shape, name=f"c{ci}_{arg.name}{j}")
                        feeds[ph] = v
                        made.append(ph)
                    ins.append(made if arg.is_list else made[0])
                attrs = {k: v for k, v in case.attrs.items() if not k.startswith("_")}
                try:
                    y = apply_op(self.op, ins, attrs, name=f"c{ci}_{self.op}")
                except errors.OpError as e:
                    raise Unsupported(f"cannot build {self.op}: {e}") from e
                if y.dtype.is_bool:
                    z = tw.logical_not(y, name=f"c{ci}_follow")
                else:
                    z = tw.multiply(y, tw.constant(np.ones((), y.dtype.np_dtype)), name=f"c{ci}_follow")
                fetches.append(z)
        off = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=False))
        on = tw.ConfigProto(graph_options=tw.GraphOptions(enable_elementwise_fusion=True))
        try:
            with tw.Session(graph=g, config=off) as s:
                ref = s.run(fetches, feeds)
        except errors.OpError as e:
            raise Unsupported(f"{self.op} ({self.dtype}) does not run unfused on {self.device_type}: {e}") from e
        md = tw.RunMetadata()
        saved = {k: os.environ.get(k) for k in (fusion.ENV_COMPILE_AFTER, fusion.ENV_SWITCH)}
        os.environ[fusion.ENV_COMPILE_AFTER] = "0"
        os.environ.pop(fusion.ENV_SWITCH, None)
        try:
            with tw.Session(graph=g, config=on) as s:
                got = s.run(fetches, feeds, options=tw.RunOptions(output_partition_graphs=True), run_metadata=md)
                uncompiled = [n.op.name for n in _fused_nodes(s) if getattr(n.fn, "compiled", True) is None]
        except errors.OpError as e:
            raise ConformanceFailure(f"{self.op} ({self.dtype}) fused on {self.device_type} raised "
                                     f"{type(e).__name__}: {e}") from e
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        fused = sum(n["op"] == fusion.FUSED for gd in md.partition_graphs for n in gd["node"])
        if not fused:
            raise Unsupported(f"the {self.device_type} fuser does not fuse {self.op} ({self.dtype})")
        problems = [f"fused node {name} ran step by step: the fuser compiled nothing" for name in uncompiled]
        for case, d, r in zip(self.cases, got, ref):
            msg = fusion_mismatch(d, r, self.op in FUSION_INEXACT)
            if msg:
                problems.append(f"[{case.label}] {msg}")
        if problems:
            head = f"{self.op} ({self.dtype}) fused on {self.device_type} differs from the unfused nodes:"
            raise ConformanceFailure("\n  ".join([head, *problems]))
        return fused


def _fused_nodes(sess) -> list:
    """The executor's nodes of the fused nodes in a session's plans (their ``fn`` is the
    kernel: ``compiled`` is None while or when it runs step by step)."""
    out = []
    for plan in list(sess._plans.values()):
        parts = [plan.partition] if getattr(plan, "partition", None) is not None else list(plan.partitions or ())
        out.extend(n for p in parts for n in p.nodes if getattr(n.op, "type", "") == "_FusedElementwise")
    return out


def fusion_mismatch(fused, unfused, inexact: bool) -> str | None:
    """None when a fused value agrees with the unfused one (bit for bit, or within
    FUSION_RTOL when ``inexact``); otherwise what differs."""
    d, r = np.asarray(fused), np.asarray(unfused)
    if d.dtype != r.dtype or d.shape != r.shape:
        return f"{d.dtype}{list(d.shape)}, unfused {r.dtype}{list(r.shape)}"
    if d.dtype.kind in "fc":
        if inexact:
            ok = np.allclose(d, r, rtol=FUSION_RTOL, atol=0.0, equal_nan=True)
            return None if ok else _describe_mismatch(d, r, FUSION_RTOL, 0.0)
        same = (d == r) | (np.isnan(d) & np.isnan(r))
        same &= np.signbit(d) == np.signbit(r)
        return None if same.all() else _describe_mismatch(d, r, 0.0, 0.0)
    return None if np.array_equal(d, r) else _describe_mismatch(d, r, 0.0, 0.0)


def fusion_checks(device_type: str, ops=None) -> list[FusionCheck]:
    """The fusion agreement checks for ``device_type``: every element-wise op of the kit's
    table (``fusion_ops.FUSABLE``, AddN, BiasAdd) in every dtype the kit tries and the device
    has a kernel for (or only ``ops``)."""
    device_type = device_type.upper()
    reg = plugins.registry()
    out = []
    for op_type in sorted(set(FUSABLE) | set(FUSION_EXTRA_OPS)):
        if (ops is not None and op_type not in ops) or op_type not in reg.ops:
            continue
        op_def = reg.ops.get(op_type)
        spec = spec_for(op_def)
        if spec is None:
            continue
        for dt in dtypes_for(op_def, spec):
            cases = spec.gen(dt, _rng_for("fusion", op_type, dt))
            _fill_type_attr(op_def, spec, dt, cases)
            attrs = dict(cases[0].attrs)
            ta = _main_type_attr(op_def, spec)
            if ta and ta not in attrs and "->" not in dt:
                attrs[ta] = tw.as_dtype(dt)
            if "->" in dt:
                attrs.update(SrcT=tw.as_dtype(dt.split("->")[0]), DstT=tw.as_dtype(dt.split("->")[1]))
            if reg.kernels.lookup(op_type, device_type, attrs) is None:
                continue
            out.append(FusionCheck(op_type, dt, cases, device_type))
    return out
