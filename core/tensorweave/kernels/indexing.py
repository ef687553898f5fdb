"""The host side of the indexing and sparse kernels, the same on every device: argument,
shape and index checks, output shapes, and the index bookkeeping that comes before any
device work.

It owns the checks of GatherNd/ScatterNd, the segment reductions (sorted, unsorted and
SparseSegment*, with the SparseSegment gradients), EmbeddingIdsCheck,
DynamicPartition/DynamicStitch, Unique, SparseToDense, ReverseV2,
Pad/PadV2/MirrorPad/MirrorPadGrad, TopKV2 and the SparseTensor operands
(SparseTensorDenseMatMul/Add, SparseReorder, SparseAdd); and ``group_rows``: the positions
of repeated row numbers grouped by row, for the kernels that apply each destination row's
updates in order (deterministic, no atomics).

Every device plugin's kernel for these ops calls these functions with what it holds in host
memory (its ``host_memory`` inputs: NumPy arrays) and with its device tensors where only
their shapes are read (anything with ``shape``, ``runtime.device.DeviceTensor``), and keeps
only what is its own: NumPy's compute on the CPU, launching kernels elsewhere. So a bad
argument is the same InvalidArgumentError, with the same message, wherever the node runs:
it names the node (``ctx.error``, ``ctx`` the kernel's ``KernelContext``) and, for an index,
its position, its value and the valid range. Nothing here touches a device.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels.axes import int_list
from tensorweave.kernels.state import distinct
from tensorweave.ops.indexing_ops import check_axes, check_paddings

_E = errors.InvalidArgumentError


def position(shape, flat: int) -> str:
    """``[i,j]``-style position of flat element ``flat`` of an array of ``shape`` ("" for a scalar)."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def check_scalar(ctx, t, what: str) -> None:
    """Raise unless the tensor or host array ``t`` is a scalar."""
    if len(t.shape):
        raise ctx.error(_E, f"{what} must be a scalar, got shape {t.shape}")


def check_range(ctx, values, n: int, what: str) -> None:
    """Raise for the first element of the host vector ``values`` outside ``[0, n)``."""
    if values.size and (values.min() < 0 or values.max() >= n):
        pos = int(np.flatnonzero((values < 0) | (values >= n))[0])
        raise ctx.error(_E, f"{what}[{pos}] = {int(values[pos])} is not in [0, {n})")


def flat_index(rows, shape) -> np.ndarray:
    """The row-major numbers of the [N, K] index rows ``rows`` into the first K dimensions of
    ``shape`` (all zeros for K = 0)."""
    k = rows.shape[1]
    return np.ravel_multi_index(tuple(rows.T), tuple(shape[:k])) if k else np.zeros(rows.shape[0], np.int64)


def group_rows(keys):
    """``(rows, starts, order)`` for a host array of row numbers: the distinct rows, and for
    row u its positions ``order[starts[u]:starts[u + 1]]``, in increasing order. Distinct
    keys need neither: ``(keys, None, None)`` (row u is position u)."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    if distinct(keys):
        return keys, None, None
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[first], np.append(first, keys.size), order


# ---------------------------------------------------------------------------------------
# GatherNd, ScatterNd
def nd_depth(ctx, indices_shape, shape, what: str) -> int:
    """K, the depth of each index of N-d ``indices`` ([..., K]) into ``shape``, checked."""
    if not indices_shape:
        raise ctx.error(_E, "indices must be at least a vector, got a scalar")
    k = indices_shape[-1]
    if k > len(shape):
        raise ctx.error(_E, f"indices.shape[-1] = {k} must be <= the rank of the {what} {list(shape)} ({len(shape)})")
    return k


def nd_rows(ctx, indices, shape, what: str):
    """The host array ``indices`` ([..., K]) as a [N, K] int64 matrix, every row checked to
    index into ``shape``; and K."""
    k = nd_depth(ctx, indices.shape, shape, what)
    rows = indices.reshape(-1, k).astype(np.int64, copy=False)
    if rows.size:
        bounds = np.asarray(shape[:k], dtype=np.int64)
        bad = (rows < 0) | (rows >= bounds)
        if bad.any():
            r = int(np.flatnonzero(bad.any(axis=1))[0])
            d = int(np.flatnonzero(bad[r])[0])
            raise ctx.error(_E, f"indices{position(indices.shape[:-1], r)} = {rows[r].tolist()} does not index into "
                                f"{what} {list(shape)}: {int(rows[r, d])} is not in [0, {shape[d]}) "
                                f"(dimension {d})")
    return rows, k


def scatter_nd_shape(ctx, indices_shape, updates_shape, shape) -> list[int]:
    """ScatterNd's output shape (the host vector ``shape``), checked with the shapes of its
    indices and updates (the indices' values are ``nd_rows``' concern)."""
    dims = int_list(ctx, np.asarray(shape), "shape")
    if any(d < 0 for d in dims):
        raise ctx.error(_E, f"shape {dims} must be >= 0")
    if not indices_shape:
        raise ctx.error(_E, "indices must be at least a vector, got a scalar")
    k = indices_shape[-1]
    lead = list(indices_shape[:-1])
    if k <= len(dims) and tuple(updates_shape) != tuple(lead + dims[k:]):
        raise ctx.error(_E, f"updates.shape {list(updates_shape)} must be indices.shape[:-1] + "
                            f"shape[indices.shape[-1]:] = {lead + dims[k:]} (indices.shape {list(indices_shape)}, "
                            f"shape {dims})")
    return dims


# ---------------------------------------------------------------------------------------
# segment reductions
def unsorted_segments(ctx, data_shape, ids_shape, num_segments) -> int:
    """The number of segments of an UnsortedSegment* op (``num_segments`` a host scalar),
    checked with the shapes of its data and ids."""
    check_scalar(ctx, num_segments, "num_segments")
    n = int(num_segments)
    if n < 0:
        raise ctx.error(_E, f"num_segments must be >= 0, got {n}")
    if tuple(data_shape[:len(ids_shape)]) != tuple(ids_shape):
        raise ctx.error(_E, f"segment_ids of shape {tuple(ids_shape)} must be a prefix of the shape of data "
                            f"{tuple(data_shape)}")
    return n


def sorted_segments(ctx, data_shape, ids) -> int:
    """The number of segments of a Segment* op, after checking its ids (a host vector, one
    per row of data) are sorted and >= 0."""
    if not data_shape:
        raise ctx.error(_E, "data must be at least a vector, got a scalar")
    if ids.ndim != 1 or ids.shape[0] != data_shape[0]:
        raise ctx.error(_E, f"segment_ids of shape {ids.shape} must be a vector with one element per row of data "
                            f"{tuple(data_shape)}")
    if not ids.size:
        return 0
    if ids[0] < 0:
        raise ctx.error(_E, f"segment_ids[0] = {int(ids[0])} is not in [0, inf): segment ids must be >= 0")
    down = np.flatnonzero(ids[1:] < ids[:-1])
    if down.size:
        p = int(down[0])
        raise ctx.error(_E, f"segment ids are not sorted: segment_ids[{p + 1}] = {int(ids[p + 1])} follows "
                            f"segment_ids[{p}] = {int(ids[p])}")
    return int(ids[-1]) + 1


def segment_runs(seg):
    """For sorted segment ids ``seg``: the starts of its runs of equal ids with the end
    appended, and the id of each run."""
    seg = np.asarray(seg)
    first = np.flatnonzero(np.concatenate(([True], seg[1:] != seg[:-1]))) if seg.size else np.zeros(0, np.int64)
    return np.append(first, seg.size), seg[first]


def _index_vector(ctx, x, what: str):
    x = np.asarray(x)
    if x.ndim != 1:
        raise ctx.error(_E, f"{what} must be a vector, got shape {list(x.shape)}")
    return x.astype(np.int64, copy=False)


def _sparse_segments(ctx, indices, segment_ids, n_rows):
    """The SparseSegment* ops' indices and segment ids, checked: both vectors of one length,
    the ids >= 0 and non-decreasing, and (``n_rows`` not None) every index a row in
    ``[0, n_rows)``. With ``n_rows`` None the indices are a device tensor (only its shape is
    read). Returns (indices, segment ids as an int64 vector, number of segments)."""
    if n_rows is None:
        if len(indices.shape) != 1:
            raise ctx.error(_E, f"indices must be a vector, got shape {list(indices.shape)}")
        idx = indices
    else:
        idx = _index_vector(ctx, indices, "indices")
    seg = _index_vector(ctx, segment_ids, "segment_ids")
    if tuple(idx.shape) != seg.shape:
        raise ctx.error(_E, f"indices ({idx.shape[0]}) and segment_ids ({seg.size}) must have the same length")
    if n_rows is not None:
        check_range(ctx, idx, n_rows, "indices")
    if not seg.size:
        return idx, seg, 0
    if seg[0] < 0:
        raise ctx.error(_E, f"segment_ids[0] = {int(seg[0])} is negative")
    steps = np.diff(seg)
    if steps.size and steps.min() < 0:
        pos = int(np.flatnonzero(steps < 0)[0]) + 1
        raise ctx.error(_E, f"segment ids are not increasing: segment_ids[{pos}] = {int(seg[pos])} after "
                            f"{int(seg[pos - 1])}")
    return idx, seg, int(seg[-1]) + 1


def sparse_segments(ctx, data_shape, indices, segment_ids, check_indices: bool = True):
    """SparseSegmentSum/Mean/SqrtN's (indices, segment ids, number of segments), checked
    against data's shape. ``check_indices=False``: the indices stay on the device (a tensor,
    whose values are not checked: the device reads zeros for an index out of range)."""
    if not data_shape:
        raise ctx.error(_E, "data must have rank >= 1, got a scalar")
    return _sparse_segments(ctx, indices, segment_ids, data_shape[0] if check_indices else None)


def sparse_segments_grad(ctx, grad_shape, indices, segment_ids, output_dim0):
    """SparseSegmentMeanGrad/SqrtNGrad's (output rows, indices, segment ids, number of
    segments), checked: the indices are rows of the output, the segments rows of grad."""
    n_rows = int(output_dim0)
    if n_rows < 0:
        raise ctx.error(_E, f"output_dim0 must be >= 0, got {n_rows}")
    if not grad_shape:
        raise ctx.error(_E, "grad must have rank >= 1, got a scalar")
    idx, seg, num = _sparse_segments(ctx, indices, segment_ids, n_rows)
    if num > grad_shape[0]:
        raise ctx.error(_E, f"segment id {num - 1} is not a row of grad (it has {grad_shape[0]})")
    return n_rows, idx, seg, num


def segment_divisors(seg, kind: str, dtype) -> np.ndarray:
    """For sorted ids ``seg``, each position's divisor in a SparseSegmentMean/SqrtN gradient,
    in ``dtype``: its segment's count (``mean``) or the count's square root (``sqrtn``)."""
    starts, _ = segment_runs(seg)
    counts = np.diff(starts).astype(dtype)
    return np.repeat(counts if kind == "mean" else np.sqrt(counts), np.diff(starts))


def embedding_ids(ctx, ids, num_ids) -> None:
    """EmbeddingIdsCheck: raise for the first of the host array ``ids`` that is not a row of
    the sharded table (``[0, num_ids)``)."""
    n = int(num_ids)
    flat = ids.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        pos = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
        raise ctx.error(_E, f"ids[{pos}] = {int(flat[pos])} is not in [0, {n}) (the rows of the sharded table)")


# ---------------------------------------------------------------------------------------
# DynamicPartition, DynamicStitch, Unique
def partition_rows(ctx, data_shape, partitions, num: int) -> list[np.ndarray]:
    """DynamicPartition: for each of the ``num`` partitions, the positions (rows of data
    flattened to ``partitions.size`` rows) that go to it, in their order; ``partitions`` a
    host array checked to be a prefix of data's shape with values in ``[0, num)``."""
    if tuple(data_shape[:partitions.ndim]) != partitions.shape:
        raise ctx.error(_E, f"partitions of shape {partitions.shape} must be a prefix of the shape of data "
                            f"{tuple(data_shape)}")
    p = partitions.reshape(-1)
    if p.size and (p.min() < 0 or p.max() >= num):
        pos = int(np.flatnonzero((p < 0) | (p >= num))[0])
        raise ctx.error(_E, f"partitions{position(partitions.shape, pos)} = {p[pos]} is not in [0, {num})")
    order = np.argsort(p, kind="stable")  # keeps each partition's rows in their order
    ends = np.cumsum(np.bincount(p, minlength=num))
    return np.split(order, ends[:-1])


def stitch_rows(ctx, indices, data_shapes):
    """DynamicStitch: ``(size, rest, moves, complete)`` for host index arrays ``indices`` and
    the shapes of the data tensors: the output is ``[size] + rest``; ``moves[i]`` is
    ``(dst, src)``, the output rows that data[i]'s rows ``src`` (data[i] as ``[n_i] + rest``)
    go to; of repeated indices the last one in list order wins; ``complete``: every output
    row is written (otherwise the others are zeros)."""
    rest = None
    for i, (ix, shape) in enumerate(zip(indices, data_shapes, strict=True)):
        shape = tuple(shape)
        if shape[:ix.ndim] != ix.shape:
            raise ctx.error(_E, f"data[{i}].shape = {list(shape)} does not start with indices[{i}].shape = "
                                f"{list(ix.shape)}")
        r = shape[ix.ndim:]
        if rest is None:
            rest = r
        elif r != rest:
            raise ctx.error(_E, f"data[{i}].shape = {list(shape)} must be indices[{i}].shape + {list(rest)} "
                                "(the slice shape of data[0])")
    flat = [ix.reshape(-1).astype(np.int64, copy=False) for ix in indices]
    ids = np.concatenate(flat)
    size = int(ids.max()) + 1 if ids.size else 0
    for i, f in enumerate(flat):
        if f.size and f.min() < 0:
            pos = int(np.flatnonzero(f < 0)[0])
            raise ctx.error(_E, f"indices[{i}]{position(indices[i].shape, pos)} = {f[pos]} is not in [0, {size})")
    # Each output row's last writer: its position in the concatenation of the indices.
    last = np.full(size, -1, dtype=np.int64)
    np.maximum.at(last, ids, np.arange(ids.size))
    moves, start = [], 0
    for f in flat:
        wins = last[f] == np.arange(start, start + f.size)
        moves.append((f[wins], np.flatnonzero(wins)))
        start += f.size
    return size, rest, moves, bool((last >= 0).all())


def unique(ctx, x, to_host, idx_dtype):
    """Unique/UniqueWithCounts of the vector tensor ``x`` (its values ``to_host(x)``):
    ``(y, idx, counts)`` as host arrays, ``y`` its distinct values in order of first
    occurrence, ``x == y[idx]``, ``counts[j]`` the occurrences of ``y[j]``. NaNs are distinct,
    as in TensorFlow."""
    if len(x.shape) != 1:
        raise ctx.error(_E, f"x must be a vector, got shape {x.shape}")
    h = np.asarray(to_host(x))
    if not h.size:
        empty = np.zeros(0, dtype=idx_dtype)
        return h, empty, empty
    kw = {"equal_nan": False} if h.dtype.kind in "fc" else {}
    _, first, inverse, counts = np.unique(h, return_index=True, return_inverse=True, return_counts=True, **kw)
    order = np.argsort(first, kind="stable")  # distinct values in order of first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return h[first[order]], rank[inverse.reshape(-1)].astype(idx_dtype), counts[order].astype(idx_dtype)


# ---------------------------------------------------------------------------------------
# SparseToDense, ReverseV2, pads, TopKV2
def sparse_to_dense(ctx, indices, output_shape, values_shape, default, validate: bool):
    """SparseToDense's ``(dims, idx, flat)``: the output shape, the indices as a [N, R]
    int64 matrix (a scalar is one index of a vector, a vector N indices of a vector) and
    their row-major numbers, all checked (``indices`` and ``output_shape`` host arrays; of
    the values and the default only the shapes are read)."""
    dims = int_list(ctx, np.asarray(output_shape), "output_shape")
    if any(d < 0 for d in dims):
        raise ctx.error(_E, f"output_shape {dims} must be >= 0")
    check_scalar(ctx, default, "default_value")
    if indices.ndim > 2:
        raise ctx.error(_E, f"sparse_indices must have rank 0, 1 or 2, got shape {indices.shape}")
    idx = indices if indices.ndim == 2 else indices.reshape(-1, 1)
    n, r = idx.shape
    if r != len(dims):
        raise ctx.error(_E, f"sparse_indices hold indices of rank {r}, but output_shape {dims} has rank {len(dims)}")
    if len(values_shape) > 1 or (len(values_shape) == 1 and values_shape[0] != n):
        raise ctx.error(_E, f"sparse_values must be a scalar or a vector of the {n} values of sparse_indices, "
                            f"got shape {tuple(values_shape)}")
    idx = idx.astype(np.int64, copy=False)
    if n:
        bad = (idx < 0) | (idx >= np.asarray(dims, dtype=np.int64))
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            d = int(np.flatnonzero(bad[row])[0])
            raise ctx.error(_E, f"sparse_indices[{row}] = {idx[row].tolist()} is out of bounds for output_shape "
                                f"{dims}: {int(idx[row, d])} is not in [0, {dims[d]}) (dimension {d})")
    flat = flat_index(idx, dims)
    if validate and n > 1 and r:
        step = np.diff(flat)
        if (step <= 0).any():
            p = int(np.flatnonzero(step <= 0)[0]) + 1
            what = "is repeated" if step[p - 1] == 0 else "is out of order"
            raise ctx.error(_E, f"sparse_indices[{p}] = {idx[p].tolist()} {what}: with validate_indices the "
                                "indices must be sorted in row-major order without repeats")
    return dims, idx, flat


def reverse_axes(ctx, axis, ndim: int) -> list[int]:
    """ReverseV2's axes (the host vector ``axis``), normalised and checked for an input of
    rank ``ndim``."""
    axes = int_list(ctx, np.asarray(axis), "axis")
    try:
        return check_axes(axes, ndim)
    except errors.InvalidArgumentError as e:
        raise ctx.error(_E, e.message) from None


def paddings(ctx, shape, paddings, mode=None, grad: bool = False) -> list[tuple[int, int]]:
    """The (before, after) pairs of the host matrix ``paddings`` for an input of ``shape``,
    checked (``mode``: REFLECT or SYMMETRIC for MirrorPad; ``grad``: MirrorPadGrad, whose
    input is the padded one)."""
    paddings = np.asarray(paddings)
    if paddings.shape != (len(shape), 2):
        raise ctx.error(_E, f"paddings must be a matrix with 2 columns and one row per dimension of the input "
                            f"{list(shape)}, got shape {list(paddings.shape)}")
    pads = [(int(b), int(a)) for b, a in paddings.tolist()]
    try:
        check_paddings(pads, list(shape), mode, grad)
    except errors.InvalidArgumentError as e:
        raise ctx.error(_E, e.message) from None
    return pads


def pad_args(ctx, shape, pads, constant_values=None, mode=None):
    """Pad/PadV2/MirrorPad: ``(pads, padded shape)``, checked (``constant_values``: PadV2's
    scalar tensor)."""
    pads = paddings(ctx, shape, pads, mode)
    if constant_values is not None:
        check_scalar(ctx, constant_values, "constant_values")
    return pads, tuple(d + b + a for d, (b, a) in zip(shape, pads, strict=True))


def top_k(ctx, shape, k) -> int:
    """TopKV2's k (a host scalar), checked against the input's ``shape``."""
    check_scalar(ctx, k, "k")
    k = int(k)
    if k < 0:
        raise ctx.error(_E, f"k must be non-negative, got {k}")
    if not shape:
        raise ctx.error(_E, "input must be at least a vector, got a scalar")
    if shape[-1] < k:
        raise ctx.error(_E, f"input must have at least k = {k} columns, its shape is {list(shape)}")
    return k


# ---------------------------------------------------------------------------------------
# SparseTensor operands
def sparse_operand(ctx, indices, values, shape, what: str = "a", in_bounds: bool = True) -> None:
    """Check a SparseTensor operand: ``indices`` [nnz, rank], ``values`` [nnz], ``shape``
    (a host vector) [rank]; with ``in_bounds`` (``indices`` a host array) every index inside
    the dense shape. Of ``values`` (and of ``indices`` without ``in_bounds``) only the shape
    is read."""
    i_shape, v_shape = tuple(indices.shape), tuple(values.shape)
    if len(i_shape) != 2:
        raise ctx.error(_E, f"{what}_indices must be a matrix [nnz, rank], got shape {i_shape}")
    if len(v_shape) != 1 or v_shape[0] != i_shape[0]:
        raise ctx.error(_E, f"{what}_values must be a vector of the {i_shape[0]} entries of {what}_indices, "
                            f"got shape {v_shape}")
    if shape.ndim != 1 or shape.shape[0] != i_shape[1]:
        raise ctx.error(_E, f"{what}_shape must be a vector with one element per column of {what}_indices "
                            f"({i_shape[1]}), got {shape.tolist()}")
    if in_bounds and indices.size:
        bad = (indices < 0) | (indices >= shape)
        if bad.any():
            entry, dim = np.argwhere(bad)[0]
            raise ctx.error(_E, f"index {indices[entry].tolist()} of {what} (entry {entry}) is out of bounds for "
                                f"dense shape {shape.tolist()}: dimension {dim} must be in [0, {shape[dim]})")


def sparse_dense_matmul(ctx, a_indices, a_values, a_shape, b_shape, adj_a: bool, adj_b: bool,
                        in_bounds: bool = True) -> tuple[int, int, int]:
    """SparseTensorDenseMatMul's checks (``sparse_operand`` for A, B a matrix, the inner
    dimensions equal): ``(m, k, n)``, the product is [m, n]."""
    sparse_operand(ctx, a_indices, a_values, a_shape, in_bounds=in_bounds)
    if a_shape.shape[0] != 2:
        raise ctx.error(_E, f"a must be a matrix (a_shape of 2 elements), got a_shape {a_shape.tolist()}")
    if len(b_shape) != 2:
        raise ctx.error(_E, f"b must be a matrix, got shape {tuple(b_shape)}")
    m, k = int(a_shape[0]), int(a_shape[1])
    if adj_a:
        m, k = k, m
    bk, n = (b_shape[1], b_shape[0]) if adj_b else b_shape
    if bk != k:
        raise ctx.error(_E, f"cannot multiply A of shape {a_shape.tolist()} (adjoint_a={adj_a}) and B of shape "
                            f"{list(b_shape)} (adjoint_b={adj_b}): inner dimensions {k} and {bk} differ")
    return m, k, n


def sparse_dense_add(ctx, a_indices, a_values, a_shape, b_shape) -> None:
    """SparseTensorDenseAdd's checks: ``sparse_operand`` for A, of B's shape."""
    sparse_operand(ctx, a_indices, a_values, a_shape)
    if a_shape.tolist() != list(b_shape):
        raise ctx.error(_E, f"the sparse operand's dense shape {a_shape.tolist()} differs from the dense "
                            f"operand's shape {list(b_shape)}")
