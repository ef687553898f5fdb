"""The sparse-model kernels of the CUDA device (``kernels/indexing.cu``, the sparse optimizer
updates of ``training.cu``, ``kernels/rows.py``): every one compiled to PTX with nvcc (skipped,
naming nvcc, where it is absent), and run against the CPU kernels on small inputs with
repeated indices: gathers, scatters and segment reductions, DynamicPartition/Stitch,
Unique, SparseToDense, ReverseV2, the Pad family, TopKV2, Select, Where, OneHot, InTopK,
SparseTensorDenseMatMul, the SparseSegment ops, the variable Scatter ops and the
SparseApply* updates; what an index out of range does where indices stay on the device;
the host-checked errors; training steps of every optimizer's sparse path with the graph on
the device; in-place updates (untouched rows keep their bytes, the allocator's peak does not
grow with the table); and the conformance kit over these ops.

Each value test runs on the ``gpu`` backends of conftest.py: a real GPU when present (else
skipped with the probe's reason) and the CPU emulator of the driver layer.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.framework.graph import apply_op
from tensorweave.ops import training_ops
from tensorweave_cuda import kernels
from tensorweave_cuda.doctor import find_nvcc
from tensorweave_cuda.kernels import catalog

CPU = "/device:CPU:0"
RNG = np.random.default_rng(2016)
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")


def _f(*shape, dtype=np.float32):
    return RNG.uniform(-2, 2, shape).astype(dtype)


def _values(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind == "i":
        return RNG.integers(-50, 50, shape).astype(dtype)
    return _f(*shape, dtype=dtype)


def _run(device, build, feeds, soft=True, targets_first=()):
    g = tw.Graph()
    with g.as_default():
        phs = {k: tw.placeholder(tw.as_dtype(np.asarray(v).dtype), np.shape(v), name=k) for k, v in feeds.items()}
        with tw.device(device):
            outs = build(**phs)
        outs = list(outs) if isinstance(outs, list | tuple) else [outs]
        init = tw.global_variables_initializer() if g.get_collection(tw.GraphKeys.GLOBAL_VARIABLES) else None
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=soft)) as s:
        if init is not None:
            s.run(init)
        md = tw.RunMetadata()
        vals = s.run(outs, {phs[k]: v for k, v in feeds.items()}, run_metadata=md)
    return vals, md.placement


def compare(gpu, build, on_gpu=(), rtol=1e-5, atol=1e-5, **feeds):
    """Run on the device and on the CPU: outputs agree, dtypes and shapes too; the ops
    named in ``on_gpu`` ran on the device."""
    got, where = _run(gpu.device(), build, feeds)
    want, _ = _run(CPU, build, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
    for op in on_gpu:
        placed = [d for n, d in where.items() if n.split("/")[-1].split("_")[0] == op]
        assert placed and all(f"device:{gpu.device_type}:0" in d for d in placed), (op, where)
    return got


def on_device(gpu, build, **feeds):
    """Values computed with every op on the device (no soft placement)."""
    return _run(gpu.device(), build, feeds, soft=False)[0]


# ---------------------------------------------------------------------------------------
# PTX
NEW_FILES = ("indexing.cu", "training.cu")


def _ptx(tmp_path, key):
    file, defines = key
    src = tmp_path / (file[:-3] + "".join(f"_{v}" for k, v in defines if k == "TW_SUFFIX") + ".cu")
    src.write_text(kernels.source_text(file))
    out = src.with_suffix(".ptx")
    cmd = [NVCC, "--ptx", "-arch=sm_80", *[f"-D{k}={v}" for k, v in defines], "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"nvcc failed on {src.name}:\n{proc.stderr}"
    return out.read_text()


@needs_nvcc
@pytest.mark.parametrize("key", [k for k in catalog.modules() if k[0] in NEW_FILES],
                         ids=lambda k: k[0] + "".join(f"[{v}]" for n, v in k[1] if n == "TW_SUFFIX"))
def test_new_kernels_compile_to_ptx(tmp_path, key):
    """Each module defines exactly the catalog's functions (parameters: test_cuda_kernels_ptx.py),
    and sums to one element from repeated indices are atomic on the GPU: atomicAdd, and a
    compare-and-swap loop for max/min."""
    text = _ptx(tmp_path, key)
    entries = set(re.findall(r"\.entry\s+(\w+)", text))
    assert entries == {r.name for r in catalog.modules()[key]}
    suffix = dict(key[1]).get("TW_SUFFIX")
    if key[0] == "indexing.cu" and suffix != "b8":
        add = {"f32": "add.f32", "f64": "add.f64", "i32": "add.u32", "i64": "add.u64"}[suffix]
        cas = "cas.b32" if suffix in ("f32", "i32") else "cas.b64"
        assert f"atom.global.{add}" in text and f"atom.global.{cas}" in text


# ---------------------------------------------------------------------------------------
# gathers
DEVICE_DTYPES = [np.float32, np.float64, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", DEVICE_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("index", [np.int32, np.int64], ids=["i32", "i64"])
def test_gather_repeated_indices_and_axes(gpu, dtype, index):
    p = _values((5, 5, 5), dtype)
    ids = np.array([[4, 0], [4, 2]], index)

    def build(p, ids):
        return [tw.gather(p, ids), tw.gather(p, ids[0], axis=1), tw.gather(p, ids[1], axis=-1)]
    compare(gpu, build, on_gpu=("GatherV2",), p=p, ids=ids)


def test_gather_of_int32_stays_on_the_host(gpu):
    """int32 (shape arithmetic) gathers take and give host memory, with the CPU's checks."""
    got = on_device(gpu, lambda p, i: tw.gather(p, i), p=np.arange(6, dtype=np.int32) * 3, i=np.array([5, 0, 5]))
    np.testing.assert_array_equal(got[0], [15, 0, 15])
    with pytest.raises(errors.InvalidArgumentError, match=r"indices\[1\] = 6 is not in \[0, 6\)"):
        on_device(gpu, lambda p, i: tw.gather(p, i), p=np.arange(6, dtype=np.int32), i=np.array([0, 6]))


def test_gather_gradient_and_gather_nd(gpu):
    p, ids = _f(6, 3), np.array([1, 4, 1, 1], np.int64)
    nd = np.array([[0, 1], [5, 2], [0, 1]], np.int32)

    def build(p, ids, nd):
        rows = tw.gather(p, ids)
        grad = tw.convert_to_tensor(tw.gradients(tw.reduce_sum(rows * rows), p)[0])  # IndexedSlices, densified
        return [rows, grad, tw.gather_nd(p, nd), tw.gather_nd(p, nd[:, :1])]
    compare(gpu, build, on_gpu=("GatherV2", "GatherNd", "UnsortedSegmentSum"), p=p, ids=ids, nd=nd)


def test_device_indices_out_of_range_read_zeros_or_are_dropped(gpu):
    """Where indices stay on the device nothing can raise (TensorFlow's GPU conventions)."""
    p = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)

    def build(p):
        bad = tw.constant([2, 3, -1, 0], tw.int64)
        pairs = tw.constant([[0, 1], [3, 0], [1, -1]], tw.int32)
        return [tw.gather(p, bad),                                        # rows of zeros
                tw.gather_nd(p, pairs),                                   # zeros
                tw.scatter_nd(pairs, tw.constant([1.0, 2.0, 3.0]), [3, 2]),  # dropped
                tw.unsorted_segment_sum(p, tw.constant([0, 5, 1], tw.int32), 2),
                tw.unsorted_segment_max(p, tw.constant([7, 0, 0], tw.int32), 2),
                tw.one_hot(tw.constant([1, 3, -1], tw.int64), 3),         # all off
                tw.nn.in_top_k(p, tw.constant([1, 2, -1], tw.int32), 2),
                tw.sparse_tensor_dense_matmul(tw.SparseTensor([[0, 0], [1, 9]], [1.0, 5.0], [2, 3]), p)]
    g, gn, snd, uss, usm, oh, itk, spmm = on_device(gpu, build, p=p)
    np.testing.assert_array_equal(g, [[5, 6], [0, 0], [0, 0], [1, 2]])
    np.testing.assert_array_equal(gn, [2, 0, 0])
    np.testing.assert_array_equal(snd, [[0, 1], [0, 0], [0, 0]])
    np.testing.assert_array_equal(uss, [[1, 2], [5, 6]])
    low = np.finfo(np.float32).min
    np.testing.assert_array_equal(usm, [[5, 6], [low, low]])
    np.testing.assert_array_equal(oh, [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(itk, [True, False, False])
    np.testing.assert_array_equal(spmm, [[1, 2], [0, 0]])


# ---------------------------------------------------------------------------------------
# scatters and segment reductions (repeated indices)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_scatter_nd_and_unsorted_segments_with_repeats(gpu, dtype):
    data = _values((6, 3), dtype)
    ids = np.array([2, 0, 2, -1, 2, 3], np.int32)
    ids2 = np.array([[1, 1, 0], [1, 0, 1]], np.int64)
    nd = np.array([[1], [3], [1], [1]], np.int64)

    def build(data, ids, ids2, nd):
        outs = [apply_op(op, [data, ids, tw.constant(5)]) for op in
                ("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin")]
        outs += [apply_op(op, [tw.reshape(data, [2, 3, 3]), ids2, tw.constant(3)]) for op in
                 ("UnsortedSegmentSum", "UnsortedSegmentMax")]
        outs.append(tw.scatter_nd(nd, data[:4], [5, 3]))
        outs.append(tw.scatter_nd(tw.constant([[0, 1], [2, 2], [0, 1]]), data[0], [3, 3]))
        return outs
    compare(gpu, build, on_gpu=("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "ScatterNd"),
            data=data, ids=ids, ids2=ids2, nd=nd)


def test_many_updates_to_one_element_all_count(gpu):
    """Thousands of threads adding into three segments (the atomics' contention): integer
    sums exact, float sums within rounding, the max and min exact."""
    n = 5000
    ids = (np.arange(n) % 3).astype(np.int64)
    ints = RNG.integers(-1000, 1000, (n, 2)).astype(np.int64)
    floats = _f(n, 2, dtype=np.float64)

    def build(ints, floats, ids):
        return [tw.unsorted_segment_sum(ints, ids, 3), tw.unsorted_segment_sum(floats, ids, 3),
                tw.unsorted_segment_max(floats, ids, 3), tw.unsorted_segment_min(ints, ids, 3),
                tw.scatter_nd(tw.reshape(ids, [-1, 1]), floats, [3, 2])]
    compare(gpu, build, rtol=1e-12, atol=1e-10, ints=ints, floats=floats, ids=ids)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_sorted_segment_ops(gpu, dtype):
    data = _values((6, 2), dtype)
    data[2, 0] = np.array(-np.inf if np.dtype(dtype).kind == "f" else 0).astype(dtype)

    def build(data):
        ids = tw.constant([0, 0, 2, 2, 2, 5])  # segments 1, 3 and 4 are empty
        return [tw.segment_sum(data, ids), tw.segment_mean(data, ids), tw.segment_max(data, ids),
                tw.segment_min(data, ids), tw.segment_sum(data[:, 0], tw.constant([0, 1, 1, 1, 3, 3]))]
    compare(gpu, build, on_gpu=("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin"), data=data)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_segment_ops_and_gradients(gpu, dtype):
    data = _f(7, 3, dtype=dtype)
    idx = np.array([6, 0, 6, 2, 2, 2, 5], np.int32)
    seg = np.array([0, 0, 1, 3, 3, 3, 3], np.int64)  # segment 2 is empty
    weights = [_f(4, 3, dtype=dtype) for _ in range(3)]

    def build(data, idx, seg):
        outs = [tw.sparse_segment_sum(data, idx, seg), tw.sparse_segment_mean(data, idx, seg),
                tw.sparse_segment_sqrt_n(data, idx, seg)]
        loss = tw.add_n([tw.reduce_sum(o * tw.constant(w)) for o, w in zip(outs, weights)])
        return outs + tw.gradients(loss, [data])
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    compare(gpu, build, on_gpu=("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN",
                                "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad"),
            data=data, idx=idx, seg=seg, **tol)


def test_embedding_lookup_sparse_on_the_device(gpu):
    params = _f(10, 4)
    sp = tw.SparseTensorValue(np.array([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]], np.int64),
                              np.array([3, 7, 3, 3, 9], np.int64), np.array([3, 3], np.int64))
    weights = np.array([0.5, 2.0, 1.0, -1.0, 0.25], np.float32)

    def build(params, w):
        ids = tw.SparseTensor(sp.indices, sp.values, sp.dense_shape)
        sw = tw.SparseTensor(sp.indices, w, sp.dense_shape)
        return [tw.nn.embedding_lookup_sparse(params, ids, sw, combiner=c) for c in ("sum", "mean", "sqrtn")] + [
            tw.nn.embedding_lookup_sparse(params, ids, None, combiner="mean")]
    compare(gpu, build, params=params, w=weights)


# ---------------------------------------------------------------------------------------
# shape-from-values ops: host-memory indices
@pytest.mark.parametrize("dtype", DEVICE_DTYPES + [np.int32], ids=lambda d: np.dtype(d).name)
def test_partition_stitch_unique_where(gpu, dtype):
    data = _values((6, 2), dtype)
    x = _values((9,), dtype)
    x[4], x[7] = x[1], x[1]

    def build(data, x):
        parts = tw.dynamic_partition(data, tw.constant([2, 0, 2, 2, 0, 3]), 4)  # partition 1 empty
        stitched = tw.dynamic_stitch([tw.constant([0, 4]), tw.constant([[4, 1], [2, 6]])],
                                     [data[:2], tw.reshape(data[2:], [2, 2, 2])])  # 4 twice: the last wins
        y, i = tw.unique(x)
        y2, i2, c2 = tw.unique_with_counts(x, out_idx=tw.int64)
        return [*parts, stitched, y, i, y2, i2, c2, tw.where(tw.not_equal(data, tw.zeros_like(data)))]
    compare(gpu, build, on_gpu=("DynamicPartition", "DynamicStitch", "Unique", "UniqueWithCounts"), data=data, x=x)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
def test_sparse_to_dense(gpu, dtype):
    vals = _values((4,), dtype)
    default = _values((), dtype)

    def build(vals, default):
        idx = tw.constant([[0, 1], [1, 0], [2, 3], [2, 4]], tw.int64)
        return [tw.sparse_to_dense(idx, [3, 5], vals, default),
                tw.sparse_to_dense(tw.constant([4, 1, 4]), [6], vals[0], default, validate_indices=False),
                tw.sparse_to_dense(tw.constant([3, 1, 3]), [5], vals[:3], default, validate_indices=False)]
    compare(gpu, build, on_gpu=("SparseToDense",), vals=vals, default=default)


def test_host_checked_indices_raise_as_on_the_cpu(gpu):
    """Fed (so that no shape function sees them at construction): the kernels' own checks,
    with the CPU's messages."""
    data = _f(4, 2)
    i32 = np.int32
    cases = [
        (lambda d, i: tw.segment_sum(d, i), [0, 2, 1, 1], r"segment ids are not sorted: segment_ids\[2\] = 1"),
        (lambda d, i: tw.sparse_segment_sum(d, i, tw.constant([0, 0])), [0, 4], r"indices\[1\] = 4 is not in \[0, 4\)"),
        (lambda d, i: tw.dynamic_partition(d, i, 2), [0, 1, 2, 0], r"partitions\[2\] = 2 is not in \[0, 2\)"),
        (lambda d, i: tw.dynamic_stitch([i], [d[:2]]), [0, -1], r"indices\[0\]\[1\] = -1 is not in"),
        (lambda d, i: tw.sparse_to_dense(i, [3], d[:2, 0], 0.0), [1, 1], r"sparse_indices\[1\] = \[1\] is repeated"),
        (lambda d, i: tw.sparse_to_dense(i, [3], d[:2, 0], 0.0), [1, 3], r"is not in \[0, 3\) \(dimension 0\)"),
    ]
    for build, ids, match in cases:
        with pytest.raises(errors.InvalidArgumentError, match=match) as info:
            _run(gpu.device(), build, {"d": data, "i": np.array(ids, i32)})
        assert f"device:{gpu.device_type}:0" in str(info.value)


# ---------------------------------------------------------------------------------------
# copies: reverse, pads, top_k, select, one_hot, in_top_k, sparse-dense matmul
@pytest.mark.parametrize("dtype", DEVICE_DTYPES + [np.int32], ids=lambda d: np.dtype(d).name)
def test_reverse_and_pads(gpu, dtype):
    x = _values((3, 4, 2), dtype)

    def build(x):
        return [tw.reverse(x, [0]), tw.reverse(x, [1, -1]), tw.reverse(x, [0, 1, 2]),
                tw.pad(x, [[1, 0], [0, 2], [0, 0]]),
                tw.pad(x, [[0, 1], [2, 1], [1, 1]], constant_values=tw.cast(tw.constant(1), x.dtype)),
                tw.pad(x, [[2, 1], [3, 0], [0, 0]], mode="REFLECT"),
                tw.pad(x, [[3, 1], [1, 4], [2, 2]], mode="SYMMETRIC"),
                tw.pad(tw.reshape(x, [1, 3, 1, 4, 1, 2, 1]), [[0, 0], [1, 1], [0, 0], [1, 0], [0, 0], [0, 0], [1, 0]])]
    compare(gpu, build, on_gpu=("ReverseV2", "Pad", "PadV2", "MirrorPad"), x=x)


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad_gradient(gpu, mode):
    x = _f(4, 5, dtype=np.float64)
    pads = [[3, 2], [1, 4]] if mode == "SYMMETRIC" else [[3, 0], [2, 4]]  # REFLECT: at most size - 1
    w, g = _f(*[d + b + a for d, (b, a) in zip(x.shape, pads)], dtype=np.float64), _f(9, 10)

    def build(x):
        y = tw.pad(x, pads, mode=mode)
        return [y, tw.gradients(tw.reduce_sum(y * tw.constant(w)), x)[0],
                apply_op("MirrorPadGrad", [tw.constant(g), tw.constant([[3, 1], [1, 4]])], {"mode": mode})]
    compare(gpu, build, on_gpu=("MirrorPad", "MirrorPadGrad"), rtol=1e-6, atol=1e-6, x=x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_top_k_ties_and_nans(gpu, dtype):
    x = RNG.integers(-3, 3, (4, 300)).astype(dtype)  # many ties: equal values in index order
    if np.dtype(dtype).kind == "f":
        x[1, [5, 77, 200]] = np.nan  # NaNs above everything, as the CPU kernel's sort

    def build(x):
        return [*tw.nn.top_k(x, 5), *tw.nn.top_k(x[0, :7], 7), *tw.nn.top_k(tw.reshape(x, [2, 2, 300]), 1),
                *tw.nn.top_k(x, 0)]
    compare(gpu, build, on_gpu=("TopKV2",), x=x)


@pytest.mark.parametrize("dtype", DEVICE_DTYPES + [np.int32], ids=lambda d: np.dtype(d).name)
def test_select_and_one_hot(gpu, dtype):
    t, e = _values((3, 4), dtype), _values((3, 4), dtype)
    c = RNG.random((3, 4)) < 0.5

    def build(t, e, c):
        on, off = tw.cast(tw.constant(1), t.dtype), tw.cast(tw.constant(0), t.dtype)
        ids = tw.constant([[0, 3], [2, 2]], tw.int64)
        return [tw.where(c, t, e), tw.where(c[:, 0], t, e), tw.where(c[0, 0], t, e),
                tw.one_hot(ids, 4, on, off), tw.one_hot(ids, 3, on, off, axis=0), tw.one_hot(ids, 4, on, off, axis=1)]
    compare(gpu, build, on_gpu=("Select", "OneHot"), t=t, e=e, c=c)


def test_in_top_k_ties_and_non_finite(gpu):
    pred = np.array([[0.1, 0.5, 0.5, 0.2], [1.0, 2.0, 3.0, 4.0], [np.nan, 1, 2, 3], [np.inf, 1, 2, 3]], np.float32)

    def build(pred):
        return [tw.nn.in_top_k(pred, tw.constant([2, 0, 0, 0]), k) for k in (1, 2, 4)] + [
            tw.nn.in_top_k(pred, tw.constant([1, 3, 3, 1], tw.int64), 2)]
    compare(gpu, build, on_gpu=("InTopK",), pred=pred)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_tensor_dense_matmul_and_gradient(gpu, dtype):
    idx = np.array([[0, 1], [2, 0], [1, 3], [2, 0], [0, 1]], np.int64)  # repeated entries add up
    vals, b = _f(5, dtype=dtype), _f(4, 3, dtype=dtype)

    def build(vals, b):
        outs = []
        for adj_a, adj_b in ((False, False), (True, False), (False, True), (True, True)):
            shape = [4, 3] if adj_a else [3, 4]
            ix = idx[:, ::-1] if adj_a else idx
            bb = b if not adj_b else tw.transpose(b)
            a = tw.SparseTensor(ix, vals, shape)
            y = tw.sparse_tensor_dense_matmul(a, bb, adjoint_a=adj_a, adjoint_b=adj_b)
            outs += [y] + tw.gradients(tw.reduce_sum(y * y), [vals, b])
        return outs
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    compare(gpu, build, on_gpu=("SparseTensorDenseMatMul",), vals=vals, b=b, **tol)


# ---------------------------------------------------------------------------------------
# variable scatters (in place, on the device)
SCATTERS = {"update": tw.scatter_update, "add": tw.scatter_add, "sub": tw.scatter_sub, "mul": tw.scatter_mul,
            "div": tw.scatter_div, "min": tw.scatter_min, "max": tw.scatter_max}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_variable_scatters_with_repeated_indices(gpu, dtype):
    init = _values((6, 3), dtype)
    upd = _values((5, 3), dtype)
    if np.dtype(dtype).kind == "i":
        init, upd = init * 7 + 1, np.where(upd == 0, 3, upd)  # int division truncates; by 0 is not tested here
    ids = np.array([4, 1, 4, 0, 4], np.int32)

    def build(upd):
        outs = []
        for kind, fn in SCATTERS.items():
            v = tw.Variable(init, name=f"v_{kind}")
            outs.append(fn(v, ids, upd))
            w = tw.Variable(init, name=f"w_{kind}")
            outs.append(fn(w, ids.astype(np.int64)[:2], upd[0, 0]))  # a scalar update for every element
        for fn in (tw.scatter_nd_update, tw.scatter_nd_add):
            u = tw.Variable(init)
            outs.append(fn(u, [[2, 1], [0, 0], [2, 1]], upd[:3, 0]))
            z = tw.Variable(init)
            outs.append(fn(z, [[3], [3]], upd[:2]))
        return outs
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    compare(gpu, build, on_gpu=tuple(f"Scatter{k.capitalize()}" for k in SCATTERS) + ("ScatterNdUpdate",
                                                                                         "ScatterNdAdd"),
            upd=upd, **tol)


def test_scatter_update_of_bools_and_integer_division_by_zero(gpu):
    def build():
        b = tw.Variable(np.zeros((4, 2), bool))
        i = tw.Variable(np.array([[7, -7], [9, 9]], np.int64))
        return [tw.scatter_update(b, [3, 1], [[True, False], [True, True]]),
                tw.scatter_div(i, [0, 1, 0], tw.constant([[2, 2], [0, 3], [-3, 1]], tw.int64))]
    b, i = on_device(gpu, build)
    np.testing.assert_array_equal(b, [[0, 0], [1, 1], [0, 0], [1, 0]])
    np.testing.assert_array_equal(i, [[-1, -3], [0, 3]])  # 7/2/-3 -> -1, -7/2/1 -> -3, by zero -> 0


def test_scatter_out_of_range_leaves_the_variable_unchanged(gpu):
    g = tw.Graph()
    with g.as_default(), tw.device(gpu.device()):
        v = tw.Variable(np.ones((4, 2), np.float32))
        add = tw.scatter_add(v, tw.constant([1, 4]), tw.ones([2, 2]), name="sa")
    with tw.Session(graph=g) as s:
        s.run(v.initializer)
        with pytest.raises(errors.InvalidArgumentError, match=r"ScatterAdd node 'sa'.*indices\[1\] = 4 is not in"):
            s.run(add)
        np.testing.assert_array_equal(s.run(v), np.ones((4, 2)))


def test_a_value_read_before_an_in_place_update_keeps_its_values(gpu):
    g = tw.Graph()
    with g.as_default(), tw.device(gpu.device()):
        v = tw.Variable(np.ones((3, 2), np.float32))
        read = tw.identity(v)
        with tw.control_dependencies([read]):
            add = tw.scatter_add(v, [0], [[5.0, 5.0]])
        doubled = read * 2
    with tw.Session(graph=g) as s:
        s.run(v.initializer)
        r, a, d = s.run([read, add, doubled])
        assert r.sum() == 6 and a.sum() == 16 and d.sum() == 12
        assert s.run(v).sum() == 16


# ---------------------------------------------------------------------------------------
# sparse optimizer updates
SPARSE_APPLY = {
    "momentum": (2, lambda v, s, lr, g, i: training_ops.sparse_apply_momentum(v, s[0], lr, g, i, lr * 9)),
    "nesterov": (2, lambda v, s, lr, g, i: training_ops.sparse_apply_momentum(v, s[0], lr, g, i, lr * 9,
                                                                               use_nesterov=True)),
    "adagrad": (2, lambda v, s, lr, g, i: training_ops.sparse_apply_adagrad(v, s[0], lr, g, i)),
    "adagrad-no-slots": (2, lambda v, s, lr, g, i: apply_op("SparseApplyAdagrad", [v, s[0], lr, g, i],
                                                            {"update_slots": False})),
    "rmsprop": (3, lambda v, s, lr, g, i: training_ops.sparse_apply_rms_prop(v, s[0], s[1], lr, lr * 9, lr * 5,
                                                                             lr * 1e-3, g, i)),
    "ftrl": (3, lambda v, s, lr, g, i: training_ops.sparse_apply_ftrl(v, s[0], s[1], g, i, lr, lr * 0.5, lr, lr * -5)),
    "ftrl-power": (3, lambda v, s, lr, g, i: training_ops.sparse_apply_ftrl(v, s[0], s[1], g, i, lr, lr * 0.5, lr,
                                                                            lr * -3)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(SPARSE_APPLY))
def test_sparse_apply_ops_with_repeated_indices(gpu, name, dtype):
    """Two steps; a repeated index is applied twice, in order (TensorFlow's kernels); the
    rows not indexed keep their values; variable and slots compared after each."""
    n_refs, make = SPARSE_APPLY[name]
    init = [_f(6, 3, dtype=dtype)] + [RNG.uniform(0.1, 1.0, (6, 3)).astype(dtype) for _ in range(n_refs - 1)]
    grads = [_f(4, 3, dtype=dtype), _f(2, 3, dtype=dtype)]
    steps = [np.array([5, 1, 5, 5], np.int64), np.array([1, 0], np.int32)]

    def build():
        vs = [tw.Variable(x) for x in init]
        lr = tw.constant(0.1, tw.as_dtype(dtype))
        first = make(vs[0], vs[1:], lr, tw.constant(grads[0]), tw.constant(steps[0]))
        with tw.control_dependencies([first]):
            second = make(vs[0], vs[1:], lr, tw.constant(grads[1]), tw.constant(steps[1]))
        with tw.control_dependencies([second]):
            return [tw.identity(v) for v in vs]
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    op = {"m": "SparseApplyMomentum", "n": "SparseApplyMomentum", "a": "SparseApplyAdagrad",
          "r": "SparseApplyRMSProp", "f": "SparseApplyFtrl"}[name[0]]
    got = compare(gpu, build, on_gpu=(op,), **tol)
    for g, x in zip(got, init):
        np.testing.assert_array_equal(g[[2, 3, 4]], x[[2, 3, 4]])


def test_sparse_apply_out_of_range_leaves_everything_unchanged(gpu):
    g = tw.Graph()
    with g.as_default(), tw.device(gpu.device()):
        v = tw.Variable(np.ones((4, 2), np.float32))
        acc = tw.Variable(np.full((4, 2), 0.1, np.float32))
        idx = tw.placeholder(tw.int64, [None])
        out = training_ops.sparse_apply_adagrad(v, acc, tw.constant(0.1), tw.ones([2, 2]), idx, name="sparse_adagrad")
    with tw.Session(graph=g) as s:
        s.run(tw.variables_initializer([v, acc]))
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"SparseApplyAdagrad node 'sparse_adagrad'.*indices\[1\] = 4 is not in \[0, 4\)"):
            s.run(out, {idx: [0, 4]})
        np.testing.assert_array_equal(s.run(v), np.ones((4, 2)))
        np.testing.assert_array_equal(s.run(acc), np.full((4, 2), 0.1, np.float32))


OPTIMIZERS = {
    "sgd": lambda: tw.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tw.train.MomentumOptimizer(0.1, 0.9),
    "nesterov": lambda: tw.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "adagrad": lambda: tw.train.AdagradOptimizer(0.1),
    "rmsprop": lambda: tw.train.RMSPropOptimizer(0.1, decay=0.9, momentum=0.5),
    "ftrl": lambda: tw.train.FtrlOptimizer(0.1, l1_regularization_strength=0.05, l2_regularization_strength=0.1),
    "adam": lambda: tw.train.AdamOptimizer(0.1),
    "lazy_adam": lambda: tw.contrib.opt.LazyAdamOptimizer(0.1),
}
BATCHES = [[1, 4, 1, 7], [2, 4, 9, 9, 9], [0, 1, 1], [11, 4]]


def _train(device, name, dtype=np.float64):
    table = np.random.RandomState(0).uniform(-1, 1, (12, 3)).astype(dtype)
    w = np.random.RandomState(1).uniform(-1, 1, (5, 3)).astype(dtype)
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        v = tw.Variable(table, name="table")
        ids = tw.placeholder(tw.int32, [None], name="ids")
        rows = tw.nn.embedding_lookup(v, ids)
        loss = tw.reduce_sum(tw.constant(w)[:tw.shape(ids)[0]] * rows + rows * rows)
        step = OPTIMIZERS[name]().minimize(loss)
    out = []
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(tw.global_variables_initializer())
        for batch in BATCHES:
            md = tw.RunMetadata()
            s.run(step, {ids: batch}, run_metadata=md)
            out.append(s.run(v))
    return out, md.placement


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_sparse_steps_on_the_device(gpu, name):
    got, where = _train(gpu.device(), name)
    want, _ = _train(CPU, name)
    for t, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"step {t}")
    updates = [n for n in where if where[n].endswith(f"{gpu.device_type}:0") and
               re.search(r"Scatter|SparseApply", n.split("/")[-1])]
    assert updates, f"no sparse update ran on the device: {where}"


def _sparse_step(gpu, vocab, name="momentum"):
    """(bytes a sparse step allocates on the device beyond what was in use, the table's bytes,
    the table before and after, the rows the step touched)."""
    g = tw.Graph()
    batch = [17, 400, 17, vocab - 1]
    with g.as_default(), tw.device(gpu.device()):
        v = tw.Variable(tw.random_uniform([vocab, 16], seed=3), name="emb")
        ids = tw.placeholder(tw.int32, [None])
        loss = tw.reduce_sum(tw.square(tw.gather(v, ids)))
        step = OPTIMIZERS[name]().minimize(loss)
    with tw.Session(graph=g, config=tw.ConfigProto(allow_soft_placement=True)) as s:
        s.run(tw.global_variables_initializer())
        s.run(step, {ids: [0]})  # warm: plans built, the first copy-on-write done
        before = s.run(v)
        dev = [d for d in s.devices if d.device_type == gpu.device_type][0]
        start = dev.allocator.bytes_in_use
        dev.allocator.reset_peak()
        md = tw.RunMetadata()
        s.run(step, {ids: batch}, run_metadata=md)
        peak = md.allocator_stats[dev.name]["peak_bytes_in_use"]
        after = s.run(v)
    return peak - start, vocab * 16 * 4, before, after, batch


@pytest.mark.parametrize("name", ["sgd", "momentum", "adagrad"])
def test_a_sparse_step_updates_rows_in_place(gpu, name):
    """Untouched rows keep their bytes, and the step's allocations do not grow with the table."""
    small, _, _, _, _ = _sparse_step(gpu, 1000, name)
    large, table_bytes, before, after, batch = _sparse_step(gpu, 10_000, name)
    assert large <= small + 4096 and large < table_bytes // 20, (small, large, table_bytes)
    others = np.setdiff1d(np.arange(before.shape[0]), batch)
    assert after[others].tobytes() == before[others].tobytes()
    assert not np.array_equal(after[17], before[17])


# ---------------------------------------------------------------------------------------
NEW_OPS = ("Gather", "GatherV2", "GatherNd", "ScatterNd", "UnsortedSegmentSum", "UnsortedSegmentMax",
           "UnsortedSegmentMin", "SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SparseSegmentSum",
           "SparseSegmentMean", "SparseSegmentSqrtN", "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad",
           "DynamicPartition", "DynamicStitch", "ParallelDynamicStitch", "Unique", "UniqueWithCounts", "SparseToDense",
           "ReverseV2", "Pad", "PadV2", "MirrorPad", "MirrorPadGrad", "TopKV2", "Select", "Where", "OneHot", "InTopK",
           "SparseTensorDenseMatMul", "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv",
           "ScatterMin", "ScatterMax", "ScatterNdUpdate", "ScatterNdAdd", "SparseApplyMomentum", "SparseApplyAdagrad",
           "SparseApplyRMSProp", "SparseApplyFtrl")


def test_conformance_kit_over_the_sparse_ops(gpu):
    """The core's conformance kit for these ops (values and gradients against the CPU;
    dtypes without a kernel here are reported unsupported, not failed). Ops the kit has no
    cases for yet are listed by the kit's own test (test_cuda_runtime.py)."""
    from tensorweave.testing import conformance

    p = conformance.plan(gpu.device_type, ops=NEW_OPS)
    assert not p.errors, p.errors
    failures, passed = [], set()
    for check in p.checks:
        try:
            check.run()
            passed.add(check.op)
        except conformance.Unsupported:
            pass
        except Exception as e:  # noqa: BLE001 - collect them all, report at once
            failures.append(f"{check.name}: {type(e).__name__}: {str(e)[:400]}")
    assert not failures, "\n".join(failures)
    covered = {c.op for c in p.checks}
    assert covered - passed == set(), covered - passed
    assert len(covered) >= 35, sorted(covered)
