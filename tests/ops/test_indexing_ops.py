"""The indexing ops (ops/indexing_ops.py and the CPU kernels): values against NumPy reference
computations, static shapes, and bad input (out-of-range indices, mismatched shapes, unsorted
segment ids, bad paddings and modes, bad k) at graph construction where it is known and at run
time where it is not."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op


def rng(seed=0):
    return np.random.default_rng(seed)


def run(t, feed=None):
    with tw.Session() as sess:
        return sess.run(t, feed)


def fails_at_run(t, feed, *parts):
    """Running ``t`` raises InvalidArgumentError whose message holds every one of ``parts``."""
    with pytest.raises(errors.InvalidArgumentError) as e:
        run(t, feed)
    for p in parts:
        assert p in str(e.value), str(e.value)
    return str(e.value)


# ---------------------------------------------------------------------------------------
# GatherNd
def gather_nd_ref(params, indices):
    idx = np.asarray(indices)
    k = idx.shape[-1]
    rows = idx.reshape(-1, k)
    out = np.stack([params[tuple(r)] for r in rows]) if rows.size or k else np.zeros((0,) + params.shape[k:])
    return out.reshape(idx.shape[:-1] + params.shape[k:])


@pytest.mark.parametrize("indices", [
    [[0, 1], [2, 3], [0, 1]],          # elements, one repeated
    [[1], [0]],                        # rows
    [[[2, 1, 0]], [[0, 0, 1]]],        # full indices in a batch of batches
    [1, 2],                            # a single index of a matrix
])
def test_gather_nd_matches_numpy(indices):
    p = rng().standard_normal((3, 4, 2))
    t = tw.gather_nd(tw.constant(p), tw.constant(np.array(indices, np.int64)))
    want = gather_nd_ref(p, indices)
    assert t.shape.as_list() == list(want.shape)
    np.testing.assert_array_equal(run(t), want)


def test_gather_nd_strings_and_unknown_shapes():
    words = np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object)
    assert run(tw.gather_nd(tw.constant(words), [[1, 0], [0, 1]])).tolist() == [b"c", b"b"]
    p = tw.placeholder(tw.float32, [None, 3])
    i = tw.placeholder(tw.int32, [None, 1])
    t = tw.gather_nd(p, i)
    assert t.shape.as_list() == [None, 3]
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(run(t, {p: v, i: [[3], [3], [0]]}), v[[3, 3, 0]])


def test_gather_nd_bad_indices():
    p = tw.placeholder(tw.float32, [3, 4])
    i = tw.placeholder(tw.int32, [None, 2])
    v = np.zeros((3, 4), np.float32)
    msg = fails_at_run(tw.gather_nd(p, i), {p: v, i: [[0, 0], [2, 4]]}, "GatherNd", "indices[1] = [2, 4]",
                       "not in [0, 4)")
    assert "dimension 1" in msg
    fails_at_run(tw.gather_nd(p, i), {p: v, i: [[-1, 0]]}, "GatherNd", "-1 is not in [0, 3)")
    with pytest.raises(ValueError, match="must be <= the rank of params"):
        tw.gather_nd(p, [[0, 0, 0]])
    with pytest.raises(errors.InvalidArgumentError, match="at least a vector"):
        tw.gather_nd(p, 1)


# ---------------------------------------------------------------------------------------
# ScatterNd
def test_scatter_nd_sums_duplicates_like_numpy():
    r = rng(1)
    idx = np.array([[1], [3], [1], [0]], np.int32)
    upd = r.standard_normal((4, 2, 3))
    want = np.zeros((5, 2, 3))
    np.add.at(want, idx[:, 0], upd)
    t = tw.scatter_nd(idx, upd, [5, 2, 3])
    assert t.shape.as_list() == [5, 2, 3] and t.dtype == tw.float64
    np.testing.assert_allclose(run(t), want)
    # element indices, int64, and the TF docs' example
    e = tw.scatter_nd(tw.constant([[4], [3], [1], [7]], tw.int64), [9, 10, 11, 12], tw.constant([8], tw.int64))
    np.testing.assert_array_equal(run(e), [0, 11, 0, 10, 9, 0, 0, 12])
    pairs = tw.scatter_nd([[0, 1], [2, 0], [0, 1]], [1.0, 2.0, 3.0], [3, 2])
    np.testing.assert_array_equal(run(pairs), [[0, 4], [0, 0], [2, 0]])


def test_scatter_nd_shape_errors_at_build_and_run():
    with pytest.raises(ValueError, match="outer 1 dimensions"):
        tw.scatter_nd([[0], [1]], [1.0, 2.0, 3.0], [4])
    with pytest.raises(errors.InvalidArgumentError, match="inner 1 dimensions"):
        tw.scatter_nd([[0], [1]], np.zeros((2, 3)), [4, 2])
    with pytest.raises(errors.InvalidArgumentError, match="must be <= the rank"):
        tw.scatter_nd([[0, 0, 0]], [1.0], [4, 2])
    i = tw.placeholder(tw.int32, None)
    u = tw.placeholder(tw.float32, None)
    t = tw.scatter_nd(i, u, [4, 2])
    fails_at_run(t, {i: [[0], [1]], u: np.zeros((2, 3), np.float32)}, "ScatterNd", "updates.shape [2, 3]")
    fails_at_run(t, {i: [[0], [4]], u: np.zeros((2, 2), np.float32)}, "ScatterNd", "indices[1] = [4]",
                 "not in [0, 4)")


# ---------------------------------------------------------------------------------------
# segment reductions
def segment_ref(data, ids, n, ufunc, init):
    out = np.full((n,) + data.shape[np.ndim(ids):], init, dtype=data.dtype)
    for i, s in np.ndenumerate(np.asarray(ids)):
        if s >= 0:
            out[s] = ufunc(out[s], data[i])
    return out


def test_unsorted_segment_max_and_min():
    r = rng(2)
    data = r.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([2, 0, 2, -1, 0, 2], np.int32)
    lo, hi = np.finfo(np.float32).min, np.finfo(np.float32).max
    mx = tw.unsorted_segment_max(data, ids, 4)
    mn = tw.unsorted_segment_min(data, tw.constant(ids, tw.int64), tw.constant(4, tw.int64))
    assert mx.shape.as_list() == [4, 3]
    np.testing.assert_array_equal(run(mx), segment_ref(data, ids, 4, np.maximum, lo))
    np.testing.assert_array_equal(run(mn), segment_ref(data, ids, 4, np.minimum, hi))
    assert (run(mx)[[1, 3]] == lo).all()  # empty segments: the lowest value, as TF
    ints = tw.unsorted_segment_max(tw.constant([[1, 5], [7, 2]]), [[0, 1], [1, 1]], 3)
    np.testing.assert_array_equal(run(ints), [1, 7, np.iinfo(np.int32).min])


def test_unsorted_segment_max_out_of_range():
    ids = tw.placeholder(tw.int32, [3])
    fails_at_run(tw.unsorted_segment_max(tw.constant([1.0, 2.0, 3.0]), ids, 2), {ids: [0, 2, 1]},
                 "UnsortedSegmentMax", "segment_ids[1] = 2", "[0, 2)")


def test_sorted_segment_ops():
    r = rng(3)
    data = r.standard_normal((5, 2))
    ids = np.array([0, 0, 1, 3, 3])
    want_sum = np.zeros((4, 2))
    np.add.at(want_sum, ids, data)
    counts = np.maximum(np.bincount(ids, minlength=4), 1)[:, None]
    lo, hi = np.finfo(np.float64).min, np.finfo(np.float64).max
    want_max = segment_ref(data, ids, 4, np.maximum, lo)
    want_min = segment_ref(data, ids, 4, np.minimum, hi)
    want_max[2] = want_min[2] = 0  # an empty sorted segment is 0, as TF
    outs = [tw.segment_sum(data, ids), tw.segment_mean(data, ids), tw.segment_max(data, ids),
            tw.segment_min(data, ids)]
    assert all(o.shape.as_list() == [4, 2] for o in outs)
    got = run(outs)
    np.testing.assert_allclose(got[0], want_sum)
    np.testing.assert_allclose(got[1], want_sum / counts)
    np.testing.assert_array_equal(got[2], want_max)
    np.testing.assert_array_equal(got[3], want_min)
    # integer means divide as C++ does (toward zero)
    np.testing.assert_array_equal(run(tw.segment_mean([-7, 0, 7, 2, 3], [0, 0, 1, 1, 1])), [-3, 4])


def test_sorted_segment_ids_must_be_sorted_and_non_negative():
    with pytest.raises(errors.InvalidArgumentError, match=r"not sorted: segment_ids\[2\] = 0"):
        tw.segment_sum([1.0, 2.0, 3.0], [0, 1, 0])
    with pytest.raises(errors.InvalidArgumentError, match="must be >= 0"):
        tw.segment_mean([1.0, 2.0], [-1, 0])
    with pytest.raises(errors.InvalidArgumentError, match="one element per row"):
        tw.segment_sum([1.0, 2.0], [0, 0, 1])
    ids = tw.placeholder(tw.int32, [None])
    t = tw.segment_sum([1.0, 2.0, 3.0], ids)
    assert t.shape.as_list() == [None]
    fails_at_run(t, {ids: [0, 2, 1]}, "SegmentSum", "not sorted", "segment_ids[2] = 1")
    fails_at_run(t, {ids: [-2, 0, 1]}, "SegmentSum", "segment_ids[0] = -2")
    fails_at_run(t, {ids: [0, 1]}, "SegmentSum", "one element per row")


# ---------------------------------------------------------------------------------------
# DynamicPartition / DynamicStitch
def test_dynamic_partition_matches_numpy():
    data = np.arange(12.0).reshape(2, 3, 2)
    parts = np.array([[2, 0, 2], [0, 3, 2]], np.int32)
    outs = tw.dynamic_partition(data, parts, 4)
    assert isinstance(outs, list) and len(outs) == 4
    assert [o.shape.as_list() for o in outs] == [[2, 2], [0, 2], [3, 2], [1, 2]]  # constant partitions
    for p, got in enumerate(run(outs)):
        np.testing.assert_array_equal(got, data[parts == p])
    one = tw.dynamic_partition([10, 20, 30], [0, 0, 0], 1)
    assert len(one) == 1
    np.testing.assert_array_equal(run(one[0]), [10, 20, 30])


def test_dynamic_partition_out_of_range_and_shapes():
    p = tw.placeholder(tw.int32, [None])
    outs = tw.dynamic_partition(tw.constant([1.0, 2.0, 3.0]), p, 2)
    assert outs[0].shape.as_list() == [None]
    fails_at_run(outs, {p: [0, 1, 2]}, "DynamicPartition", "partitions[2] = 2", "[0, 2)")
    fails_at_run(outs, {p: [0, -1, 1]}, "DynamicPartition", "partitions[1] = -1")
    with pytest.raises(errors.InvalidArgumentError, match="prefix of the shape of data"):
        tw.dynamic_partition(tw.constant([1.0, 2.0]), tw.constant([0, 1, 0]), 2)
    with pytest.raises(errors.InvalidArgumentError, match=r"not in \[0, 2\)"):
        tw.dynamic_partition(tw.constant([1.0, 2.0]), tw.constant([0, 5]), 2)


def test_dynamic_stitch_tf_example_and_last_writer_wins():
    indices = [tw.constant(6), tw.constant([4, 1]), tw.constant([[5, 2], [0, 3]])]
    data = [tw.constant([61.0, 62.0]), tw.constant([[41.0, 42.0], [11.0, 12.0]]),
            tw.constant([[[51.0, 52.0], [21.0, 22.0]], [[1.0, 2.0], [31.0, 32.0]]])]
    merged = tw.dynamic_stitch(indices, data)
    assert merged.shape.as_list() == [7, 2]
    np.testing.assert_array_equal(run(merged), [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]])
    dup = tw.dynamic_stitch([[0, 1, 0], [1, 3]], [[1.0, 2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_array_equal(run(dup), [3.0, 4.0, 0.0, 5.0])  # row 2: nobody writes it: zero
    alias = tw.parallel_dynamic_stitch([[2, 0], [1]], [[7, 8], [9]])
    np.testing.assert_array_equal(run(alias), [8, 9, 7])


def test_dynamic_partition_then_stitch_restores_the_order():
    # The pattern of embedding lookups over shards: partition ids, look up, stitch back.
    ids = np.array([5, 2, 9, 2, 0, 7], np.int32)
    shard = ids % 3
    pos = tw.dynamic_partition(tw.range(6), shard, 3)
    vals = tw.dynamic_partition(tw.constant(ids.astype(np.float32) * 10), shard, 3)
    np.testing.assert_array_equal(run(tw.dynamic_stitch(pos, vals)), ids * 10.0)


def test_dynamic_stitch_bad_input():
    i = tw.placeholder(tw.int32, [None])
    t = tw.dynamic_stitch([i, tw.constant([0])], [tw.constant([1.0, 2.0]), tw.constant([3.0])])
    fails_at_run(t, {i: [1, -3]}, "DynamicStitch", "indices[0][1] = -3", "not in [0, 2)")
    with pytest.raises(errors.InvalidArgumentError, match="prefix of the shape of data"):
        tw.dynamic_stitch([[0, 1]], [[1.0, 2.0, 3.0]])
    with pytest.raises(errors.InvalidArgumentError, match="does not fit the others"):
        tw.dynamic_stitch([[0], [1]], [[[1.0, 2.0]], [[1.0, 2.0, 3.0]]])
    with pytest.raises(errors.InvalidArgumentError, match="must be >= 0"):
        tw.dynamic_stitch([[0, -1]], [[1.0, 2.0]])
    with pytest.raises(errors.InvalidArgumentError, match="same length"):
        tw.dynamic_stitch([[0]], [[1.0], [2.0]])


def test_dynamic_stitch_survives_a_graph_def_round_trip():
    # Workers receive their partitions as GraphDefs: two list inputs must regroup by N.
    g = tw.Graph()
    with g.as_default():
        tw.dynamic_stitch([tw.constant([1, 0]), tw.constant([2])], [tw.constant([1.0, 2.0]), tw.constant([3.0])],
                          name="stitch")
    g2 = tw.Graph()
    with g2.as_default():
        tw.import_graph_def(g.as_graph_def(), name="")
        with tw.Session() as sess:
            np.testing.assert_array_equal(sess.run("stitch:0"), [2.0, 1.0, 3.0])


# ---------------------------------------------------------------------------------------
# Unique, SparseToDense, ReverseV2
def test_unique_in_order_of_first_occurrence():
    x = np.array([1, 1, 2, 4, 4, 4, 7, 8, 8])
    y, idx = run(tw.unique(x))
    np.testing.assert_array_equal(y, [1, 2, 4, 7, 8])
    np.testing.assert_array_equal(idx, [0, 0, 1, 2, 2, 2, 3, 4, 4])
    u = tw.unique(tw.constant([3.0, -1.0, 3.0, 0.5]), out_idx=tw.int64)
    assert u.idx.dtype == tw.int64 and u.y.shape.as_list() == [None] and u.idx.shape.as_list() == [4]
    y, idx = run(u)
    np.testing.assert_array_equal(y, [3.0, -1.0, 0.5])
    np.testing.assert_array_equal(y[idx], [3.0, -1.0, 3.0, 0.5])
    words = run(tw.unique(tw.constant([b"b", b"a", b"b"])))
    assert words.y.tolist() == [b"b", b"a"] and words.idx.tolist() == [0, 1, 0]
    y, idx, count = run(tw.unique_with_counts([4, 2, 4, 4, 9]))
    assert y.tolist() == [4, 2, 9] and idx.tolist() == [0, 1, 0, 0, 2] and count.tolist() == [3, 1, 1]
    with pytest.raises(errors.InvalidArgumentError, match="rank 1"):
        tw.unique([[1, 2]])


def test_sparse_to_dense_forms():
    t = tw.sparse_to_dense([[0, 1], [2, 0]], [3, 4], [5.0, 6.0], default_value=-1.0)
    assert t.shape.as_list() == [3, 4]
    want = np.full((3, 4), -1.0)
    want[0, 1], want[2, 0] = 5.0, 6.0
    np.testing.assert_array_equal(run(t), want)
    np.testing.assert_array_equal(run(tw.sparse_to_dense([1, 3], [5], 7)), [0, 7, 0, 7, 0])  # scalar value
    np.testing.assert_array_equal(run(tw.sparse_to_dense(2, [4], 1.5)), [0, 0, 1.5, 0])  # scalar index
    shape64 = tw.sparse_to_dense(tw.constant([[1, 1]], tw.int64), tw.constant([2, 2], tw.int32), [True], False)
    np.testing.assert_array_equal(run(shape64), [[False, False], [False, True]])
    # validate_indices=False accepts unsorted indices
    np.testing.assert_array_equal(run(tw.sparse_to_dense([3, 0], [4], [1, 2], validate_indices=False)), [2, 0, 0, 1])


def test_sparse_to_dense_bad_input():
    i = tw.placeholder(tw.int32, [None, 2])
    t = tw.sparse_to_dense(i, [3, 4], 1.0)
    fails_at_run(t, {i: [[0, 1], [0, 0]]}, "SparseToDense", "sparse_indices[1] = [0, 0] is out of order")
    fails_at_run(t, {i: [[0, 1], [0, 1]]}, "SparseToDense", "is repeated")
    fails_at_run(t, {i: [[0, 1], [1, 4]]}, "SparseToDense", "sparse_indices[1] = [1, 4]", "not in [0, 4)")
    unchecked = tw.sparse_to_dense(i, [3, 4], 1.0, validate_indices=False)
    fails_at_run(unchecked, {i: [[5, 0]]}, "SparseToDense", "not in [0, 3)")  # bounds: always
    with pytest.raises(errors.InvalidArgumentError, match="sparse_values has 3 elements"):
        tw.sparse_to_dense([[0, 1], [1, 1]], [3, 4], [1.0, 2.0, 3.0])
    with pytest.raises(errors.InvalidArgumentError, match="indices of rank 2"):
        tw.sparse_to_dense([[0, 1]], [3, 4, 5], [1.0])


def test_reverse():
    x = np.arange(24).reshape(2, 3, 4)
    for axes in ([0], [1, 2], [-1], [], [0, 1, 2]):
        np.testing.assert_array_equal(run(tw.reverse(x, axes)), np.flip(x, axes) if axes else x)
    np.testing.assert_array_equal(run(tw.reverse_v2(x, tw.constant([1], tw.int64))), x[:, ::-1])
    with pytest.raises(ValueError, match="more than once"):
        tw.reverse(x, [1, -2])
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        tw.reverse(x, [3])
    a = tw.placeholder(tw.int32, [None])
    fails_at_run(tw.reverse(x, a), {a: [0, 5]}, "ReverseV2", "axis 5 is out of range")


# ---------------------------------------------------------------------------------------
# Pad
@pytest.mark.parametrize("mode", ["CONSTANT", "reflect", "Symmetric"])
def test_pad_modes_match_numpy(mode):
    x = rng(4).standard_normal((3, 4))
    pads = [[1, 2], [3, 0]]
    got = run(tw.pad(x, pads, mode))
    np.testing.assert_array_equal(got, np.pad(x, pads, mode=mode.lower()))


def test_pad_constant_values_strings_and_int64_paddings():
    x = np.array([[1, 2], [3, 4]], np.int32)
    t = tw.pad(x, [[1, 0], [0, 2]], constant_values=9)
    assert t.shape.as_list() == [3, 4] and t.op.type == "PadV2"
    np.testing.assert_array_equal(run(t), np.pad(x, [[1, 0], [0, 2]], constant_values=9))
    assert tw.pad(x, [[1, 1], [1, 1]]).op.type == "Pad"
    p64 = tw.constant([[0, 1], [2, 0]], tw.int64)
    np.testing.assert_array_equal(run(tw.pad(x, p64, "SYMMETRIC")), np.pad(x, [[0, 1], [2, 0]], "symmetric"))
    s = run(tw.pad(tw.constant([[b"a"]]), [[1, 0], [0, 1]]))
    assert s.tolist() == [[b"", b""], [b"a", b""]]


def test_pad_bad_input():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="unknown padding mode 'WRAP'"):
        tw.pad(x, [[1, 1], [1, 1]], "WRAP")
    with pytest.raises(errors.InvalidArgumentError, match="one row per dimension"):
        tw.pad(x, [[1, 1]])
    with pytest.raises(errors.InvalidArgumentError, match="matrix with 2 columns"):
        tw.pad(x, [1, 1])
    with pytest.raises(errors.InvalidArgumentError, match="non-negative"):
        tw.pad(x, [[0, -1], [0, 0]])
    with pytest.raises(errors.InvalidArgumentError, match="REFLECT paddings must be less than"):
        tw.pad(x, [[2, 0], [0, 0]], "REFLECT")
    with pytest.raises(errors.InvalidArgumentError, match="SYMMETRIC paddings must be no greater than"):
        tw.pad(x, [[0, 0], [0, 4]], "SYMMETRIC")
    assert tw.pad(x, [[2, 2], [3, 3]], "SYMMETRIC").shape.as_list() == [6, 9]
    p = tw.placeholder(tw.int32, [2, 2])
    t = tw.pad(x, p, "REFLECT")
    assert t.shape.as_list() == [None, None]
    fails_at_run(t, {p: [[0, 0], [3, 0]]}, "MirrorPad", "REFLECT paddings must be less than", "size 3")
    q = tw.placeholder(tw.int32, None)
    fails_at_run(tw.pad(x, q), {q: [[1, 1], [1, 1], [0, 0]]}, "Pad", "got shape [3, 2]")


def test_mirror_pad_grad_folds_the_padding_back():
    r = rng(5)
    for mode in ("REFLECT", "SYMMETRIC"):
        g = r.standard_normal((7, 9))
        pads = [[2, 1], [3, 2]]
        got = run(apply_op("MirrorPadGrad", [g, np.array(pads, np.int32)], {"mode": mode}))
        # reference: the transposed Jacobian of np.pad, built one input element at a time
        want = np.zeros((4, 4))
        for i in np.ndindex(4, 4):
            e = np.zeros((4, 4))
            e[i] = 1
            want[i] = (np.pad(e, pads, mode=mode.lower()) * g).sum()
        np.testing.assert_allclose(got, want)


# ---------------------------------------------------------------------------------------
# boolean_mask
def test_boolean_mask_matches_numpy():
    r = rng(6)
    x = r.standard_normal((3, 4, 2))
    m1 = np.array([True, False, True])
    m2 = r.random((3, 4)) < 0.5
    m_axis = np.array([False, True, True, False])
    np.testing.assert_array_equal(run(tw.boolean_mask(x, m1)), x[m1])
    np.testing.assert_array_equal(run(tw.boolean_mask(x, m2)), x[m2])
    t = tw.boolean_mask(x, m_axis, axis=1)
    assert t.shape.as_list() == [3, None, 2]
    np.testing.assert_array_equal(run(t), x[:, m_axis])
    mp = tw.placeholder(tw.bool, [None])
    xp = tw.placeholder(tw.float64, [None, 2])
    np.testing.assert_array_equal(run(tw.boolean_mask(xp, mp), {xp: x[0], mp: [True, False, True, True]}),
                                  x[0][[0, 2, 3]])


def test_boolean_mask_bad_input():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="scalar"):
        tw.boolean_mask(x, True)
    with pytest.raises(ValueError, match="does not match"):
        tw.boolean_mask(x, [True, False])
    with pytest.raises(ValueError, match="must be known"):
        tw.boolean_mask(x, tw.placeholder(tw.bool, None))


# ---------------------------------------------------------------------------------------
# TopKV2
def top_k_ref(x, k):
    order = np.array([sorted(range(x.shape[-1]), key=lambda j, row=row: (-float(row[j]), j))[:k]
                      for row in x.reshape(-1, x.shape[-1])], dtype=np.int64).reshape(x.shape[:-1] + (k,))
    return np.take_along_axis(x, order, -1), order


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float64])
def test_top_k_matches_reference_with_ties(dtype):
    x = rng(7).integers(0, 5, (2, 3, 6)).astype(dtype)  # plenty of ties
    for k in (0, 1, 4, 6):
        res = tw.nn.top_k(x, k)
        assert res.values.shape.as_list() == [2, 3, k] and res.indices.dtype == tw.int32
        values, indices = run(res)
        want_v, want_i = top_k_ref(x, k)
        np.testing.assert_array_equal(values, want_v)
        np.testing.assert_array_equal(indices, want_i)
    assert run(tw.nn.top_k([1.0, 3.0, 3.0, 2.0], k=2, sorted=True)).indices.tolist() == [1, 2]


def test_top_k_bad_k():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="k must be non-negative"):
        tw.nn.top_k(x, -1)
    with pytest.raises(errors.InvalidArgumentError, match="at least k = 4 columns"):
        tw.nn.top_k(x, 4)
    with pytest.raises(errors.InvalidArgumentError, match="scalar"):
        tw.nn.top_k(1.0)
    k = tw.placeholder(tw.int32, [])
    t = tw.nn.top_k(x, k)
    assert t.values.shape.as_list() == [2, None]
    fails_at_run(t.values, {k: 4}, "TopKV2", "at least k = 4 columns")
    fails_at_run(t.values, {k: -2}, "TopKV2", "k must be non-negative")


# ---------------------------------------------------------------------------------------
# tw.where with one argument and OneHot, as TF
def test_where_coordinates_of_numbers_and_bools():
    x = np.array([[0, 3, 0], [-1, 0, 2]])
    t = tw.where(x)
    assert t.dtype == tw.int64 and t.shape.as_list() == [None, 2]
    np.testing.assert_array_equal(run(t), np.argwhere(x))
    np.testing.assert_array_equal(run(tw.where(tw.constant([0.0, 0.5, -2.0]))), [[1], [2]])
    assert run(tw.where(tw.constant(True))).shape == (1, 0)
    assert run(tw.where(tw.constant([[False, False]]))).shape == (0, 2)


def test_one_hot_as_tf():
    idx = np.array([[0, 2], [-1, 3]])
    want = np.array([[[1, 0, 0], [0, 0, 1]], [[0, 0, 0], [0, 0, 0]]], np.float32)  # -1 and 3: all off
    np.testing.assert_array_equal(run(tw.one_hot(idx, 3)), want)
    t = tw.one_hot(idx, 3, axis=0)
    assert t.shape.as_list() == [3, 2, 2]
    np.testing.assert_array_equal(run(t), np.moveaxis(run(tw.one_hot(idx, 3)), -1, 0))
    b = tw.one_hot(tw.constant([1, 0], tw.uint8), 2, dtype=tw.bool)
    assert b.dtype == tw.bool
    np.testing.assert_array_equal(run(b), [[False, True], [True, False]])
    v = tw.one_hot([1], 2, on_value=5, off_value=-1)
    assert v.dtype == tw.int32
    np.testing.assert_array_equal(run(v), [[-1, 5]])
    with pytest.raises(errors.InvalidArgumentError, match="axis"):
        tw.one_hot(idx, 3, axis=-2)
