"""The Scatter ops on ref variables (tw.scatter_update, scatter_add, ..., scatter_nd_add): values
against NumPy with repeated indices, in-place updates that never change a value already
handed out, use_locking, and bad input (out-of-range ids, mismatched shapes) that leaves the
variable unchanged."""

import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.testing.fake_device import register_fake_devices

INIT = np.arange(1.0, 13.0).reshape(6, 2)
IDS = [4, 1, 4, 0]
UPD = np.array([[2.0, 3.0], [5.0, 7.0], [4.0, 0.5], [-1.0, 2.0]])


def _reference(kind, init, ids, upd):
    out = init.copy()
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum,
          "max": np.maximum}
    if kind == "update":
        out[ids] = upd
    else:
        fn[kind].at(out, ids, upd)
    return out


SCATTERS = {"update": tw.scatter_update, "add": tw.scatter_add, "sub": tw.scatter_sub, "mul": tw.scatter_mul,
            "div": tw.scatter_div, "min": tw.scatter_min, "max": tw.scatter_max}


@pytest.mark.parametrize("kind", sorted(SCATTERS))
def test_scatter_against_numpy_with_repeated_indices(sess, kind):
    v = tw.Variable(INIT)
    ids = tw.placeholder(tw.int64, [None])
    upd = tw.placeholder(tw.float64, [None, 2])
    out = SCATTERS[kind](v, ids, upd)
    assert out.shape.as_list() == [6, 2]
    sess.run(tw.global_variables_initializer())
    if kind == "update":  # one of the repeated updates wins (unspecified which): use distinct ones
        ids_v, upd_v = [4, 1, 0], UPD[:3]
    else:
        ids_v, upd_v = IDS, UPD
    want = _reference(kind, INIT, ids_v, upd_v)
    np.testing.assert_allclose(sess.run(out, {ids: ids_v, upd: upd_v}), want)
    np.testing.assert_allclose(sess.run(v), want)


def test_add_and_sub_sum_every_repeated_update(sess):
    v = tw.Variable(np.zeros((3, 1)))
    add = tw.scatter_add(v, [2, 2, 2, 0], [[1.0], [2.0], [3.0], [4.0]])
    sub = tw.scatter_sub(v, [2, 2], [[1.0], [1.0]])
    sess.run(tw.global_variables_initializer())
    sess.run(add.op)
    np.testing.assert_array_equal(sess.run(sub), [[4], [0], [4]])


def test_update_with_repeated_indices_takes_one_of_them(sess):
    v = tw.Variable(np.zeros((3, 2)))
    out = tw.scatter_update(v, [1, 1], [[1.0, 1.0], [2.0, 2.0]])
    sess.run(tw.global_variables_initializer())
    row = sess.run(out)[1]
    assert row.tolist() in ([1.0, 1.0], [2.0, 2.0])


def test_scalar_updates_and_integer_tables(sess):
    v = tw.Variable(np.array([[7, -7], [9, 4], [1, 1]], np.int32))
    div = tw.scatter_div(v, [0, 0, 1], tw.constant(2, tw.int32))
    sess.run(tw.global_variables_initializer())
    # integer division truncates toward zero, repeated indices divide twice
    np.testing.assert_array_equal(sess.run(div), [[1, -1], [4, 2], [1, 1]])
    mx = tw.scatter_max(v, [2], tw.constant([[0, 5]], tw.int32))
    mn = tw.scatter_min(v, [2, 2], tw.constant([[3, 3], [0, 9]], tw.int32))
    np.testing.assert_array_equal(sess.run(mx)[2], [1, 5])
    np.testing.assert_array_equal(sess.run(mn)[2], [0, 3])
    s = tw.scatter_update(v, tw.constant([1], tw.int64), tw.constant(0, tw.int32))
    np.testing.assert_array_equal(sess.run(s)[1], [0, 0])


def test_scatter_on_a_vector_and_on_a_3d_table(sess):
    vec = tw.Variable(np.zeros(5, np.float32))
    cube = tw.Variable(np.zeros((3, 2, 2), np.float32))
    a = tw.scatter_add(vec, [[1, 1], [4, 0]], tw.constant([[1.0, 2.0], [3.0, 4.0]]))
    b = tw.scatter_add(cube, [2], tw.ones([1, 2, 2]))
    sess.run(tw.global_variables_initializer())
    np.testing.assert_array_equal(sess.run(a), [4, 3, 0, 0, 3])
    assert sess.run(b)[2].sum() == 4 and sess.run(cube)[:2].sum() == 0


def test_scatter_nd(sess):
    v = tw.Variable(np.zeros((3, 4)))
    upd = tw.scatter_nd_update(v, [[0, 1], [2, 3]], tw.constant([5.0, 6.0], tw.float64))
    add = tw.scatter_nd_add(v, [[0, 1], [0, 1], [1, 0]], tw.constant([1.0, 2.0, 3.0], tw.float64))
    rows = tw.scatter_nd_add(v, [[1], [1]], tw.ones([2, 4], tw.float64))
    sess.run(tw.global_variables_initializer())
    sess.run(upd.op)
    out = sess.run(add)
    assert out[0, 1] == 8.0 and out[2, 3] == 6.0 and out[1, 0] == 3.0
    np.testing.assert_array_equal(sess.run(rows)[1], [5, 2, 2, 2])


def test_use_locking_defaults_are_tensorflows():
    v = tw.Variable(np.zeros((2, 1)))
    assert tw.scatter_update(v, [0], [[1.0]]).op.get_attr("use_locking") is True
    assert tw.scatter_add(v, [0], [[1.0]]).op.get_attr("use_locking") is False
    assert tw.scatter_add(v, [0], [[1.0]], use_locking=True).op.get_attr("use_locking") is True


def test_concurrent_locked_updates_all_apply(sess):
    v = tw.Variable(np.zeros((50, 8)))
    ids = tw.placeholder(tw.int32, [None])
    add = tw.scatter_add(v, ids, tw.ones([tw.shape(ids)[0], 8], tw.float64), use_locking=True)
    sess.run(tw.global_variables_initializer())
    rng = np.random.RandomState(0)
    batches = [rng.randint(0, 50, size=20) for _ in range(40)]

    def worker(part):
        for b in part:
            sess.run(add.op, {ids: b})

    threads = [threading.Thread(target=worker, args=(batches[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = np.zeros(50)
    for b in batches:
        np.add.at(want, b, 1)
    np.testing.assert_array_equal(sess.run(v)[:, 0], want)


# ---------------------------------------------------------------------------------------
# in place, copy-on-write
def _address(a):
    return a.__array_interface__["data"][0]


def test_updates_write_in_place_when_nothing_else_holds_the_table(sess):
    v = tw.Variable(tw.random_uniform([10000, 16]))
    ids = tw.placeholder(tw.int32, [None])
    add = tw.scatter_add(v, ids, tw.ones([tw.shape(ids)[0], 16]))
    sess.run(tw.global_variables_initializer())
    sess.run(add.op, {ids: [0]})
    a = sess.run(v)
    where, before = _address(a), a.copy()
    del a
    for _ in range(3):
        sess.run(add.op, {ids: [7, 7, 9000]})
        a = sess.run(v)
        assert _address(a) == where  # the same buffer: the table was not rewritten
        del a
    after = sess.run(v)
    np.testing.assert_allclose(after[7], before[7] + 6, rtol=1e-6)
    np.testing.assert_allclose(after[9000], before[9000] + 3, rtol=1e-6)
    others = np.delete(np.arange(10000), [7, 9000])
    assert after[others].tobytes() == before[others].tobytes()


def test_a_fetched_value_keeps_its_values(sess):
    v = tw.Variable(np.zeros((4, 2)))
    add = tw.scatter_add(v, [1], [[1.0, 1.0]])
    sess.run(tw.global_variables_initializer())
    held = sess.run(v)
    sess.run(add.op)
    assert held.sum() == 0  # the update copied the table: the fetched array is unchanged
    assert sess.run(v).sum() == 2
    fetched_update = sess.run(add)  # the op's own output, fetched: the next update copies again
    sess.run(add.op)
    assert fetched_update.sum() == 4 and sess.run(v).sum() == 6


def test_a_read_in_the_same_step_keeps_the_old_value(sess):
    v = tw.Variable(np.ones((3, 2)))
    read = tw.identity(v)
    with tw.control_dependencies([read]):
        add = tw.scatter_add(v, [0], [[5.0, 5.0]])
    sess.run(tw.global_variables_initializer())
    r, a = sess.run([read, add])
    assert r.sum() == 6 and a.sum() == 16


def test_a_fed_and_assigned_array_is_not_written(sess):
    v = tw.Variable(np.zeros((3, 2)), validate_shape=True)
    p = tw.placeholder(tw.float64, [3, 2])
    assign = tw.assign(v, p)
    add = tw.scatter_add(v, [2], [[1.0, 1.0]])
    mine = np.zeros((3, 2))
    sess.run(assign, {p: mine})
    sess.run(add.op)
    assert mine.sum() == 0 and sess.run(v).sum() == 2


@pytest.fixture
def fake_device():
    register_fake_devices(count=1)
    yield
    plugins._reset_for_tests()  # later tests' sessions must not see (and place on) FAKE


def test_scatter_on_another_device_goes_through_the_host(fake_device):
    with tw.device("/device:FAKE:0"):
        v = tw.Variable(np.zeros((5, 2)))
        add = tw.scatter_add(v, [3, 3], tw.constant([[1.0, 2.0], [3.0, 4.0]], tw.float64))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert "FAKE" in sess.placement(add)[add.op.name]
        np.testing.assert_array_equal(sess.run(add)[3], [4, 6])


# ---------------------------------------------------------------------------------------
# bad input
def test_out_of_range_ids_name_the_op_the_id_and_the_range(sess):
    v = tw.Variable(INIT)
    ids = tw.placeholder(tw.int32, [None])
    add = tw.scatter_add(v, ids, tw.ones([tw.shape(ids)[0], 2], tw.float64), name="bad_add")
    nd = tw.scatter_nd_update(v, tw.placeholder_with_default(tw.constant([[0, 1]]), [None, 2]),
                              tw.constant([1.0], tw.float64), name="bad_nd")
    sess.run(tw.global_variables_initializer())
    with pytest.raises(errors.InvalidArgumentError, match=r"ScatterAdd node 'bad_add'.*indices\[2\] = 6 is not "
                                                          r"in \[0, 6\)"):
        sess.run(add, {ids: [0, 1, 6]})
    with pytest.raises(errors.InvalidArgumentError, match=r"indices\[0\] = -1 is not in \[0, 6\)"):
        sess.run(add, {ids: [-1]})
    with pytest.raises(errors.InvalidArgumentError, match=r"ScatterNdUpdate node 'bad_nd'.*indices\[0\] = \[0, 2\]"):
        sess.run(nd, {nd.op.inputs[1]: [[0, 2]]})
    np.testing.assert_array_equal(sess.run(v), INIT)


def test_gather_out_of_range_is_an_error(sess):
    with pytest.raises(errors.InvalidArgumentError, match=r"GatherV2 node .*indices\[1\] = 5 is not in \[0, 2\)"):
        sess.run(tw.gather(tw.constant([[1.0], [2.0]]), [0, 5]))


def test_mismatched_shapes(sess):
    v = tw.Variable(INIT)
    with pytest.raises(errors.InvalidArgumentError, match=r"need updates of shape \(2, 2\)"):
        tw.scatter_add(v, [0, 1], tw.ones([3, 2], tw.float64))
    with pytest.raises(errors.InvalidArgumentError, match=r"need updates of shape \(1, 2\)"):
        tw.scatter_nd_add(v, [[0]], tw.ones([2], tw.float64))
    with pytest.raises(errors.InvalidArgumentError, match="index 3 dimensions"):
        tw.scatter_nd_add(v, [[0, 0, 0]], tw.ones([1], tw.float64))
    with pytest.raises(errors.InvalidArgumentError, match="scalar variable"):
        tw.scatter_add(tw.Variable(1.0), [0], [1.0])
    upd = tw.placeholder(tw.float64, None)
    add = tw.scatter_add(v, [0, 1], upd)
    sess.run(tw.global_variables_initializer())
    with pytest.raises(errors.InvalidArgumentError, match=r"updates of shape \(3, 2\) do not match indices of shape "
                                                          r"\(2,\).*the variable is unchanged"):
        sess.run(add, {upd: np.ones((3, 2))})
    np.testing.assert_array_equal(sess.run(v), INIT)


def test_uninitialized_variable(sess):
    v = tw.Variable(INIT)
    with pytest.raises(errors.FailedPreconditionError, match="uninitialized"):
        sess.run(tw.scatter_add(v, [0], [[1.0, 1.0]]))
