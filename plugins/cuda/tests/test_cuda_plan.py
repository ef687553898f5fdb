"""Driver-free logic of the CUDA plugin, checked against NumPy: broadcasting strides, launch
grids, reduction passes, the cuBLAS row-major mapping, kernel selection, the pool's size
classes and the memory limit. No GPU, driver or compiler involved."""

import itertools
import math
import warnings

import numpy as np
import pytest

from tensorweave.framework import dtypes
from tensorweave_cuda import blas, plan
from tensorweave_cuda.allocator import size_class
from tensorweave_cuda.device import memory_limit, parse_bytes
from tensorweave_cuda.kernels import catalog

RNG = np.random.default_rng(0)


# ---------------------------------------------------------------------------------------
# broadcasting
def _offsets(struct, n, operands):
    """What tw_offset/tw_offsets compute for output indices 0..n-1 (common.cuh, in NumPy)."""
    ndim = struct[0]
    shape = struct[1:1 + catalog.MAX_DIMS]
    strides = [struct[1 + (k + 1) * catalog.MAX_DIMS:1 + (k + 2) * catalog.MAX_DIMS] for k in range(operands)]
    i = np.arange(n, dtype=np.int64)
    offs = [np.zeros(n, np.int64) for _ in range(operands)]
    for d in range(catalog.MAX_DIMS - 1, -1, -1):
        if d < ndim:
            c = i % shape[d]
            i = i // shape[d]
            for k in range(operands):
                offs[k] += c * strides[k][d]
    return offs


SHAPE_PAIRS = [((), ()), ((3,), ()), ((), (4,)), ((2, 3), (3,)), ((2, 3), (2, 1)), ((4, 1, 5), (3, 1)),
               ((1, 1), (2, 3)), ((2, 1, 3, 1), (1, 4, 1, 5)), ((5, 6), (5, 6)), ((0, 3), (3,)),
               ((2, 3, 4, 5, 6, 7, 2), (7, 1)), ((6, 1, 1, 4), (6, 3, 2, 4))]


@pytest.mark.parametrize("xs,ys", SHAPE_PAIRS)
def test_binary_plan_indexes_like_numpy(xs, ys):
    x = RNG.standard_normal(xs)
    y = RNG.standard_normal(ys)
    p = plan.plan_binary(xs, ys)
    want = x - y
    assert p.out_shape == want.shape and p.n == want.size
    if p.flat:
        assert xs == ys
        got = x.reshape(-1) - y.reshape(-1)
    else:
        assert len(p.struct) == catalog.STRUCT_FIELDS["Y"]
        ox, oy = _offsets(p.struct, p.n, 2)
        got = x.reshape(-1)[ox] - y.reshape(-1)[oy] if p.n else np.zeros(0)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_collapse_merges_to_few_dimensions():
    # a bias row over a batch: one merged dimension per broadcast pattern
    p = plan.plan_binary((64, 8, 8, 32), (32,))
    assert p.struct[0] == 2
    p = plan.plan_binary((2, 3, 4), (1, 1, 1))
    assert p.struct[0] == 1
    shape, strides = plan.collapse((1, 1), (0, 0))
    assert shape == (1,) and strides == [(0,)]


def test_broadcast_errors():
    with pytest.raises(plan.BroadcastError, match=r"\(2, 3\) and \(4,\)"):
        plan.plan_binary((2, 3), (4,))
    with pytest.raises(plan.BroadcastError, match="handle 6"):
        # seven alternating broadcast patterns cannot merge
        plan.plan_binary((2, 1, 2, 1, 2, 1, 2), (1, 2, 1, 2, 1, 2, 1))


@pytest.mark.parametrize("shape,perm", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((4, 1, 3, 2), (3, 2, 1, 0))])
def test_transpose_strides(shape, perm):
    x = RNG.standard_normal(shape)
    want = np.transpose(x, perm)
    (off,) = _offsets(plan.strided_struct(want.shape, plan.transpose_strides(shape, perm)), want.size, 1)
    np.testing.assert_array_equal(x.reshape(-1)[off].reshape(want.shape), want)


@pytest.mark.parametrize("shape,to", [((3,), (2, 3)), ((2, 1), (2, 4)), ((), (3, 2)), ((1, 3, 1), (2, 3, 4))])
def test_broadcast_to_strides(shape, to):
    x = RNG.standard_normal(shape)
    want = np.broadcast_to(x, to)
    (off,) = _offsets(plan.strided_struct(to, plan.broadcast_strides(shape, to)), want.size, 1)
    np.testing.assert_array_equal(x.reshape(-1)[off].reshape(to), want)


# ---------------------------------------------------------------------------------------
# launch configuration
@pytest.mark.parametrize("n", [1, 255, 256, 257, 10**6, 10**9])
def test_launch_dims_cover_n(n):
    (gx, gy, gz), (bx, by, bz) = plan.launch_dims(n)
    assert (gy, gz, by, bz) == (1, 1, 1, 1) and bx == plan.BLOCK
    assert gx >= 1, gx
    assert gx <= plan.MAX_GRID, (gx, plan.MAX_GRID)
    assert gx * bx >= n or gx == plan.MAX_GRID  # the grid-stride loop covers the rest


def test_launch_dims_rejects_empty():
    with pytest.raises(ValueError):
        plan.launch_dims(0)


@pytest.mark.parametrize("length,block", [(0, 32), (1, 32), (10, 32), (33, 64), (200, 256), (10**6, 256)])
def test_row_block_power_of_two(length, block):
    assert plan.row_block(length) == block
    grid, blk = plan.row_launch(10**6, length)
    assert grid[0] == plan.MAX_GRID and blk[0] == block


# ---------------------------------------------------------------------------------------
# reductions
def _run_plan(p, x, kind):
    """Execute a ReducePlan with NumPy the way reduce.cu does (rows/cols passes)."""
    op = {"sum": np.sum, "mean": np.sum, "max": np.max, "prod": np.prod}[kind]
    if p.fill:
        return np.full(p.out_shape, {"sum": 0.0, "mean": np.nan, "max": -np.inf, "prod": 1.0}[kind])
    if not p.passes:
        return x.reshape(p.out_shape)
    cur = x.reshape(-1)
    for i, ps in enumerate(p.passes):
        last = i == len(p.passes) - 1
        if ps.layout == "rows":
            rows = cur.reshape(ps.outer, ps.r)
            out = np.empty(ps.outer * ps.parts)
            for b in range(ps.outer * ps.parts):
                row, part = divmod(b, ps.parts)
                seg = rows[row, part * ps.chunk:min(ps.r, (part + 1) * ps.chunk)]
                out[b] = op(seg) if seg.size else op(np.zeros(0))
        else:
            out = op(cur.reshape(ps.outer, ps.r, ps.inner), axis=1).reshape(-1)
        out = out * plan.reduction_scale(kind, p.count, last)
        cur = out
    return cur.reshape(p.out_shape)


REDUCTIONS = [((), ()), ((5,), (0,)), ((3, 4), (1,)), ((3, 4), (0,)), ((3, 4), (0, 1)), ((2, 3, 4), (0, 2)),
              ((2, 3, 4, 5), (1, 3)), ((2, 3, 4, 5), (0, 1, 3)), ((4, 1, 6), (1,)), ((4, 1, 6), (0, 1)),
              ((2, 0, 3), (1,)), ((2, 0, 3), (0,)), ((3, 4), (-1,)), ((6, 2), (1, 1, -1)),
              ((3, 40000), (1,)), ((70000,), (0,)), ((2, 50000, 3), (1,))]


@pytest.mark.parametrize("shape,axes", REDUCTIONS)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
def test_reduction_plan_matches_numpy(shape, axes, keep, kind):
    x = RNG.standard_normal(shape)
    p = plan.plan_reduction(shape, axes, keep)
    ax = tuple(sorted({a % len(shape) for a in axes})) if shape else ()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "mean of empty slice"
        if kind == "max" and x.size and not math.prod(shape[a] for a in ax):
            want = np.full(np.sum(x, axis=ax, keepdims=keep).shape, -np.inf)
        elif kind == "max":
            want = np.max(x, axis=ax, keepdims=keep, initial=-np.inf)
        else:
            want = {"sum": np.sum, "mean": np.mean}[kind](x, axis=ax, keepdims=keep)
        got = _run_plan(p, x, kind)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_reduction_plan_shapes_of_passes():
    p = plan.plan_reduction((32, 10), (1,))
    assert [ps.layout for ps in p.passes] == ["rows"] and p.count == 10
    p = plan.plan_reduction((64, 256), (0,))  # BiasAddGrad: a column reduction
    assert p.passes == (plan.ReducePass("cols", 1, 64, 256),)
    p = plan.plan_reduction((1 << 20,), (0,))  # one long row: split, then the parts
    assert [ps.layout for ps in p.passes] == ["rows", "rows"] and p.passes[0].parts == 256
    assert p.passes[1].r == p.passes[0].parts
    p = plan.plan_reduction((2, 3, 4), (0, 2))  # two reduced groups: two passes, innermost first
    assert [(ps.layout, ps.outer, ps.r, ps.inner) for ps in p.passes] == [("rows", 6, 4, 1), ("cols", 1, 2, 3)]


def test_reduction_axis_errors():
    with pytest.raises(ValueError, match="reduction axis 2 is out of range for input of rank 2"):
        plan.plan_reduction((2, 3), (2,))
    assert plan.plan_reduction((), (0,)).out_shape == ()  # a scalar accepts axis 0, as on the CPU


def test_mean_scale():
    assert plan.reduction_scale("mean", 4, True) == 0.25
    assert plan.reduction_scale("mean", 4, False) == 1.0
    assert math.isnan(plan.reduction_scale("mean", 0, True))
    assert plan.reduction_scale("sum", 4, True) == 1.0


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1)])
def test_arg_reduction_plan(shape, axis):
    x = RNG.standard_normal(shape)
    outer, r, inner = plan.plan_arg_reduction(shape, axis)
    v = x.reshape(outer, r, inner)
    got = np.argmax(v, axis=1).reshape(np.delete(shape, axis % len(shape)))
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis))


# ---------------------------------------------------------------------------------------
# cuBLAS mapping
def _colmajor_gemm(call, a_buf, b_buf, c_buf):
    """cuBLAS gemm from its definition: column-major operands in flat buffers."""
    bufs = {"a": a_buf, "b": b_buf}

    def mat(buf, rows, cols, ld):
        assert ld >= max(1, rows)
        return np.array([[buf[i + j * ld] for j in range(cols)] for i in range(rows)]).reshape(rows, cols)
    a = mat(bufs[call.first], *((call.m, call.k) if call.transa == blas.OP_N else (call.k, call.m)), call.lda)
    b = mat(bufs[call.second], *((call.k, call.n) if call.transb == blas.OP_N else (call.n, call.k)), call.ldb)
    a = a if call.transa == blas.OP_N else a.T
    b = b if call.transb == blas.OP_N else b.T
    c = a @ b
    assert call.ldc >= call.m
    for i, j in itertools.product(range(call.m), range(call.n)):
        c_buf[i + j * call.ldc] = c[i, j]


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("m,k,n", [(2, 3, 4), (1, 5, 1), (4, 1, 3), (3, 3, 3)])
def test_gemm_plan_row_major(ta, tb, m, k, n):
    a = RNG.standard_normal((k, m) if ta else (m, k))
    b = RNG.standard_normal((n, k) if tb else (k, n))
    call, out_shape = blas.gemm_plan(a.shape, b.shape, ta, tb)
    assert out_shape == (m, n)
    c = np.zeros(m * n)
    _colmajor_gemm(call, a.reshape(-1), b.reshape(-1), c)
    want = (a.T if ta else a) @ (b.T if tb else b)
    np.testing.assert_allclose(c.reshape(m, n), want, rtol=1e-12)


def test_gemm_plan_rejects_mismatch():
    with pytest.raises(ValueError, match="2x3 and 4x5"):
        blas.gemm_plan((2, 3), (4, 5))


def test_cublas_candidates_prefer_wheels(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.12").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    importlib.invalidate_caches()
    cands = blas.cublas_candidates()
    assert cands[0] == str(lib / "libcublas.so.12")
    assert blas.find_cublas() == str(lib / "libcublas.so.12")


# ---------------------------------------------------------------------------------------
# kernel selection
def test_kernel_names_and_dtypes():
    f32, i64, b8 = catalog.DTYPES["float32"], catalog.DTYPES["int64"], catalog.DTYPES["bool"]
    assert catalog.dtype(dtypes.float32) is f32 and catalog.dtype(np.float32) is f32 and catalog.dtype("int64") is i64
    assert catalog.unary_kernel("Exp", f32).name == "tw_exp_flat_f32"
    assert catalog.binary_kernel("RealDiv", f32, True).name == "tw_div_bcast_f32"
    assert catalog.binary_kernel("Equal", b8, False).name == "tw_equal_flat_b8"
    assert catalog.cast_kernel(f32, i64).name == "tw_cast_f32_i64"
    assert catalog.reduce_kernel("sum", f32, "rows").name == "tw_reduce_sum_rows_f32"
    assert catalog.arg_kernel("ArgMax", f32, i64).name == "tw_argmax_f32_i64"
    assert catalog.xent_kernel(f32, catalog.DTYPES["int32"]).name == "tw_sparse_xent_rows_f32_i32"
    assert catalog.training_kernel("ApplyGradientDescent", f32).name == "tw_apply_gradient_descent_f32"
    assert dict(catalog.unary_kernel("Exp", f32).defines) == {"TW_T": "float", "TW_SUFFIX": "f32", "TW_KIND": "1"}
    for bad in (lambda: catalog.unary_kernel("Exp", i64), lambda: catalog.binary_kernel("Pow", i64, False),
                lambda: catalog.cast_kernel(f32, f32), lambda: catalog.softmax_kernel("Softmax", i64),
                lambda: catalog.dtype("complex64"), lambda: catalog.dtype("float16")):
        with pytest.raises(KeyError):
            bad()
    assert not catalog.supported("float16") and catalog.supported("bool")


def test_signatures_expand_for_pycuda():
    f64 = catalog.DTYPES["float64"]
    assert catalog.expand_sig(catalog.fill_kernel(f64).sig, f64) == "Pqd"
    assert catalog.expand_sig(catalog.SIG_BINARY_BCAST) == "PPPq" + "q" * (1 + 3 * catalog.MAX_DIMS)
    with pytest.raises(ValueError):
        catalog.expand_sig("Pqv")


def test_modules_group_kernels():
    mods = catalog.modules()
    names = [k.name for ks in mods.values() for k in ks]
    assert len(names) == len(set(names)), "a kernel name appears in two modules"
    assert len([k for k in mods if k[0] == "elementwise.cu"]) == len(catalog.ALL)


# ---------------------------------------------------------------------------------------
# allocator and device configuration
def test_size_classes():
    # the core's classes (tensorweave.runtime.allocator.size_class), which the pool uses
    assert size_class(1) == 256 and size_class(512) == 512 and size_class(513) == 640
    prev = 0
    for n in [1, 100, 2048, 2049, 4096, 5000, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7, 10**9]:
        c = size_class(n)
        assert c >= n and c >= prev and c % 64 == 0
        assert n <= 256 or c <= n * 1.25 + 1, (n, c)
        prev = c
    assert size_class((1 << 20) + 1) == (1 << 20) + (1 << 18)


def test_parse_bytes_and_memory_limit():
    assert parse_bytes("1024") == 1024 and parse_bytes("2KiB") == 2048 and parse_bytes("1.5G") == 3 * 2**29
    assert parse_bytes("512 MiB") == 512 * 2**20
    with pytest.raises(ValueError):
        parse_bytes("lots")
    assert memory_limit(1000, 4000, environ={}) == 950
    assert memory_limit(1000, 4000, environ={"TENSORWEAVE_GPU_MEMORY_LIMIT": "1KiB"}) == 1024

    class Opts:
        per_process_gpu_memory_fraction = 0.5

    class Cfg:
        gpu_options = Opts()
    assert memory_limit(1000, 4000, Cfg(), environ={}) == 2000
