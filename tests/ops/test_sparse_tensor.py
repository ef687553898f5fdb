"""SparseTensor: construction, feeding and fetching through Session.run, and the sparse ops
(sparse_tensor_dense_matmul, sparse_tensor_to_dense, sparse_reorder, sparse_add) against
NumPy, their gradients against float64 finite differences, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op
from tensorweave.testing.gradient_checker import check_gradients


def run(fetches, feed_dict=None):
    with tw.Session() as s:
        return s.run(fetches, feed_dict)


def dense_of(indices, values, shape):
    out = np.zeros(shape, np.asarray(values).dtype)
    np.add.at(out, tuple(np.asarray(indices).T), values)
    return out


IDX = np.array([[0, 1], [1, 0], [1, 3], [2, 2]], np.int64)
VALS = np.array([1.5, -2.0, 3.0, 0.5])
SHAPE = [3, 4]


# ---------------------------------------------------------------------------------------
# the SparseTensor class, feeds and fetches
def test_sparse_tensor_components_and_static_shape():
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    assert sp.indices.dtype == tw.int64 and sp.dense_shape.dtype == tw.int64
    assert sp.dtype == tw.float64 and sp.values.shape.as_list() == [4]
    assert sp.shape.as_list() == [3, 4] and sp.get_shape().as_list() == [3, 4]
    assert isinstance(sp, tw.SparseTensor) and sp.graph is tw.get_default_graph()


def test_fetch_is_a_sparse_tensor_value():
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    v, (w, n) = run([sp, (sp, sp.values)])
    assert isinstance(v, tw.SparseTensorValue)
    np.testing.assert_array_equal(v.indices, IDX)
    np.testing.assert_array_equal(v.values, VALS)
    np.testing.assert_array_equal(v.dense_shape, SHAPE)
    assert isinstance(w, tw.SparseTensorValue) and n.shape == (4,)
    with tw.Session() as s, s.as_default():
        assert isinstance(sp.eval(), tw.SparseTensorValue)


def test_from_value_and_dict_fetch():
    sp = tw.SparseTensor.from_value(tw.SparseTensorValue(IDX, VALS.astype(np.float32), SHAPE))
    out = run({"sp": sp})
    assert out["sp"].values.dtype == np.float32


@pytest.mark.parametrize("shape", [None, [3, None], [3, 4]])
def test_sparse_placeholder_takes_a_value_or_a_tuple(shape):
    sp = tw.sparse_placeholder(tw.float32, shape=shape, name="sp")
    assert sp.indices.op.name == "sp/indices" and sp.values.op.name == "sp/values"
    if shape is None:
        assert sp.shape.ndims is None
    else:
        assert sp.shape.as_list() == shape
    dense = tw.sparse_tensor_to_dense(sp)
    with tw.Session() as s:
        for fed in (tw.SparseTensorValue(IDX, VALS, SHAPE), (IDX, VALS, SHAPE)):
            d, v = s.run([dense, sp], {sp: fed})
            np.testing.assert_array_equal(d, dense_of(IDX, VALS.astype(np.float32), SHAPE))
            assert isinstance(v, tw.SparseTensorValue) and v.values.dtype == np.float32


def test_sparse_placeholder_checks_the_fed_dense_shape():
    sp = tw.sparse_placeholder(tw.float32, shape=[3, None])
    d = tw.sparse_tensor_to_dense(sp)
    with tw.Session() as s:
        np.testing.assert_array_equal(s.run(d, {sp: (IDX, VALS, [3, 7])}).shape, (3, 7))
        with pytest.raises(errors.InvalidArgumentError, match=r"dense_shape fed .* \[4, 4\]"):
            s.run(d, {sp: (IDX, VALS, [4, 4])})
        with pytest.raises(errors.InvalidArgumentError, match="SparseTensorValue"):
            s.run(d, {sp: np.zeros((3, 4))})


def test_sparse_placeholder_fed_in_parts_and_make_callable():
    sp = tw.sparse_placeholder(tw.float64)
    y = tw.sparse_tensor_dense_matmul(sp, tw.constant(np.eye(4)))
    with tw.Session() as s:
        out = s.run(y, {sp.indices: IDX, sp.values: VALS, sp.dense_shape: SHAPE})
        np.testing.assert_allclose(out, dense_of(IDX, VALS, SHAPE))
        f = s.make_callable(y, [sp])
        np.testing.assert_allclose(f(tw.SparseTensorValue(IDX, 2 * VALS, SHAPE)), 2 * dense_of(IDX, VALS, SHAPE))


def test_sparse_tensor_construction_errors():
    with pytest.raises(errors.InvalidArgumentError, match="same number of entries"):
        tw.SparseTensor(IDX, VALS[:3], SHAPE)
    with pytest.raises(errors.InvalidArgumentError, match="columns"):
        tw.SparseTensor(IDX, VALS, [3, 4, 5])
    with pytest.raises(errors.InvalidArgumentError, match="rank 2"):
        tw.SparseTensor([0, 1], [1.0, 2.0], [3])
    with pytest.raises(errors.InvalidArgumentError, match="int64"):
        tw.SparseTensor(tw.constant(IDX.astype(np.int32)), VALS, SHAPE)
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    with pytest.raises(errors.InvalidArgumentError, match="sparse_tensor_to_dense"):
        tw.matmul(sp, tw.constant(np.eye(4)))


# ---------------------------------------------------------------------------------------
# sparse_tensor_dense_matmul
@pytest.mark.parametrize("adjoint_a", [False, True])
@pytest.mark.parametrize("adjoint_b", [False, True])
def test_sparse_dense_matmul_matches_numpy(adjoint_a, adjoint_b):
    rng = np.random.default_rng(0)
    a = dense_of(IDX, VALS, SHAPE)
    a_op = a.T if adjoint_a else a
    b = rng.normal(size=(a_op.shape[1], 5))
    b_in = b.T if adjoint_b else b
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    y = tw.sparse_tensor_dense_matmul(sp, b_in, adjoint_a=adjoint_a, adjoint_b=adjoint_b)
    assert y.shape.as_list() == [a_op.shape[0], 5]
    np.testing.assert_allclose(run(y), a_op @ b, rtol=1e-12)


def test_sparse_dense_matmul_unsorted_repeated_int32_indices_and_empty():
    idx = np.array([[2, 0], [0, 1], [2, 0], [1, 1]], np.int32)
    vals = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = apply_op("SparseTensorDenseMatMul", [tw.constant(idx), vals, np.array([3, 2], np.int64), b])
    np.testing.assert_allclose(run(y), dense_of(idx, vals, [3, 2]) @ b)
    empty = tw.SparseTensor(np.zeros((0, 2), np.int64), np.zeros(0, np.float32), [3, 2])
    np.testing.assert_array_equal(run(tw.sparse_tensor_dense_matmul(empty, b)), np.zeros((3, 3)))


def test_sparse_dense_matmul_fed_shapes():
    sp = tw.sparse_placeholder(tw.float64)
    b = tw.placeholder(tw.float64, [None, None])
    y = tw.sparse_tensor_dense_matmul(sp, b, adjoint_a=True)
    bv = np.random.default_rng(1).normal(size=(3, 2))
    np.testing.assert_allclose(run(y, {sp: (IDX, VALS, SHAPE), b: bv}), dense_of(IDX, VALS, SHAPE).T @ bv)


@pytest.mark.parametrize("adjoint_a", [False, True])
@pytest.mark.parametrize("adjoint_b", [False, True])
def test_sparse_dense_matmul_gradients(adjoint_a, adjoint_b):
    rng = np.random.default_rng(2)
    rows, inner = (4, 3) if adjoint_a else (3, 4)
    b = rng.normal(size=(2, inner) if adjoint_b else (inner, 2))

    def f(values, bt):
        sp = tw.SparseTensor(IDX, values, SHAPE)
        return tw.sparse_tensor_dense_matmul(sp, bt, adjoint_a=adjoint_a, adjoint_b=adjoint_b)

    check_gradients(f, [VALS, b])


def test_sparse_dense_matmul_out_of_bounds_index():
    sp = tw.sparse_placeholder(tw.float32)
    y = tw.sparse_tensor_dense_matmul(sp, np.ones((4, 2), np.float32))
    bad = np.array([[0, 1], [1, 4]], np.int64)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"SparseTensorDenseMatMul.*index \[1, 4\].*out of bounds.*\[3, 4\].*\[0, 4\)"):
        run(y, {sp: (bad, np.ones(2, np.float32), [3, 4])})
    with pytest.raises(errors.InvalidArgumentError, match=r"SparseTensorDenseMatMul.*out of bounds"):
        run(y, {sp: (np.array([[-1, 0]]), np.ones(1, np.float32), [3, 4])})


def test_sparse_dense_matmul_shape_errors():
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    with pytest.raises(errors.InvalidArgumentError, match=r"SparseTensorDenseMatMul.*inner dimensions 4 and 5"):
        tw.sparse_tensor_dense_matmul(sp, np.ones((5, 2)))
    with pytest.raises(errors.InvalidArgumentError, match="b must be a matrix"):
        tw.sparse_tensor_dense_matmul(sp, np.ones(4))
    with pytest.raises(errors.InvalidArgumentError, match="float32"):
        tw.sparse_tensor_dense_matmul(sp, tw.ones([4, 2]))
    with pytest.raises(errors.InvalidArgumentError, match="SparseTensor"):
        tw.sparse_tensor_dense_matmul(np.eye(3), np.eye(3))
    # a run-time mismatch (shapes known only when fed)
    ph = tw.sparse_placeholder(tw.float64)
    y = tw.sparse_tensor_dense_matmul(ph, tw.placeholder(tw.float64))
    with pytest.raises(errors.InvalidArgumentError, match=r"SparseTensorDenseMatMul.*inner dimensions"):
        run(y, {ph: (IDX, VALS, SHAPE), y.op.inputs[3]: np.ones((3, 2))})


# ---------------------------------------------------------------------------------------
# sparse_tensor_to_dense, sparse_reorder, sparse_add
def test_sparse_tensor_to_dense_with_default():
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    d = tw.sparse_tensor_to_dense(sp, default_value=-1.0)
    assert d.shape.as_list() == SHAPE
    expect = np.full(SHAPE, -1.0)
    expect[tuple(IDX.T)] = VALS
    np.testing.assert_array_equal(run(d), expect)


def test_sparse_tensor_to_dense_out_of_bounds():
    sp = tw.sparse_placeholder(tw.float64)
    d = tw.sparse_tensor_to_dense(sp)
    with pytest.raises(errors.InvalidArgumentError, match="SparseToDense"):
        run(d, {sp: (np.array([[0, 0], [5, 1]]), np.ones(2), [3, 4])})


def test_sparse_tensor_to_dense_gradient_wrt_values():
    check_gradients(lambda v: tw.sparse_tensor_to_dense(tw.SparseTensor(IDX, v, SHAPE)), [VALS])


def test_sparse_reorder_sorts_and_its_gradient_follows():
    perm = np.array([3, 0, 2, 1])
    sp = tw.SparseTensor(IDX[perm], VALS[perm], SHAPE)
    r = tw.sparse_reorder(sp)
    assert r.shape.as_list() == SHAPE
    v = run(r)
    np.testing.assert_array_equal(v.indices, IDX)
    np.testing.assert_array_equal(v.values, VALS)
    np.testing.assert_array_equal(v.dense_shape, SHAPE)
    weights = np.arange(1.0, 5.0)
    check_gradients(lambda x: tw.sparse_reorder(tw.SparseTensor(IDX[perm], x, SHAPE)).values * weights,
                    [VALS[perm]])


def test_sparse_add_sparse_and_sparse():
    a = tw.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [2, 3])
    b = tw.SparseTensor([[0, 1], [1, 2]], [5.0, -2.0], [2, 3])
    s = run(tw.sparse_add(a, b))
    np.testing.assert_array_equal(s.indices, [[0, 0], [0, 1], [1, 2]])
    np.testing.assert_array_equal(s.values, [1.0, 5.0, 0.0])  # a zero sum is kept (thresh 0)
    t = run(tw.sparse_add(a, b, thresh=0.5))
    np.testing.assert_array_equal(t.indices, [[0, 0], [0, 1]])
    with pytest.raises(errors.InvalidArgumentError, match="dense shapes differ"):
        tw.sparse_add(a, tw.SparseTensor([[0, 0]], [1.0], [3, 3]))
    with pytest.raises(errors.InvalidArgumentError, match="at least one"):
        tw.sparse_add(tw.ones([2]), tw.ones([2]))


def test_sparse_add_sparse_and_dense():
    dense = np.arange(12.0).reshape(3, 4)
    sp = tw.SparseTensor(IDX, VALS, SHAPE)
    np.testing.assert_allclose(run(tw.sparse_add(dense, sp)), dense + dense_of(IDX, VALS, SHAPE))
    np.testing.assert_allclose(run(tw.sparse_add(sp, dense)), dense + dense_of(IDX, VALS, SHAPE))


def test_sparse_add_gradients():
    a_idx = np.array([[0, 0], [1, 2], [2, 1]], np.int64)
    b_idx = np.array([[0, 1], [1, 2]], np.int64)

    def f(av, bv):
        s = tw.sparse_add(tw.SparseTensor(a_idx, av, [3, 3]), tw.SparseTensor(b_idx, bv, [3, 3]))
        return s.values * np.array([1.0, 2.0, 3.0, 4.0])

    check_gradients(f, [np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0])])
    check_gradients(lambda v, d: tw.sparse_add(tw.SparseTensor(IDX, v, SHAPE), d),
                    [VALS, np.arange(12.0).reshape(3, 4)])


@pytest.mark.serial  # starts a cluster's servers (conftest.py)
def test_feed_and_fetch_through_a_cluster_session():
    from tensorweave.distributed.server import Server

    server = Server({"worker": ["inproc-host:53901"]}, "worker", 0, transport="inproc")
    try:
        sp = tw.sparse_placeholder(tw.float64, shape=[3, 4])
        with tw.device("/job:worker/task:0"):
            y = tw.sparse_tensor_dense_matmul(sp, np.eye(4))
        with tw.Session(server.target) as s:
            out, back = s.run([y, sp], {sp: tw.SparseTensorValue(IDX, VALS, SHAPE)})
        np.testing.assert_allclose(out, dense_of(IDX, VALS, SHAPE))
        assert isinstance(back, tw.SparseTensorValue)
        np.testing.assert_array_equal(back.indices, IDX)
    finally:
        server.stop()
