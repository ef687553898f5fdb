"""The optimizers' sparse paths (IndexedSlices gradients of a table read through tw.gather):
each against a NumPy reference of TensorFlow's sparse update and against its dense path,
repeated indices summed, a step touching only the looked-up rows (their bytes, the table's
buffer, an allocator peak independent of the vocabulary), the sparse training ops' bad input."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.ops import training_ops

V, D = 12, 3
INIT = np.random.RandomState(0).uniform(-1, 1, (V, D))
W = np.random.RandomState(1).uniform(-1, 1, (5, D))
STEPS = [[1, 4, 1, 7], [2, 4, 9, 9, 9], [0, 1, 1], [11, 4]]


def _loss(rows, w):
    """sum(w * rows + rows^2): the gradient of a row is w + 2 * row."""
    return tw.reduce_sum(w * rows + rows * rows)


def _grad_rows(table, ids):
    return W[:len(ids)] + 2 * table[ids]


def _dedup(ids, rows):
    u, inv = np.unique(ids, return_inverse=True)
    summed = np.zeros((u.size, D))
    np.add.at(summed, inv, rows)
    return u, summed


# NumPy references of TensorFlow's sparse updates: (slots at the start, update(var, slots, rows, g, t)).
def _sgd(var, s, u, g, t):
    var[u] -= 0.1 * g


def _momentum(nesterov):
    def update(var, s, u, g, t):
        s["a"][u] = s["a"][u] * 0.9 + g
        var[u] -= 0.1 * g + 0.1 * 0.9 * s["a"][u] if nesterov else 0.1 * s["a"][u]
    return update


def _adagrad(var, s, u, g, t):
    s["acc"][u] += g * g
    var[u] -= 0.1 * g / np.sqrt(s["acc"][u])


def _rmsprop(var, s, u, g, t):
    s["ms"][u] += (g * g - s["ms"][u]) * (1 - 0.9)
    s["mom"][u] = s["mom"][u] * 0.5 + 0.1 * g / np.sqrt(s["ms"][u] + 1e-10)
    var[u] -= s["mom"][u]


def _ftrl(var, s, u, g, t):
    l1, l2, lr = 0.05, 0.1, 0.1
    acc, lin = s["acc"][u], s["lin"][u]
    new_acc = acc + g * g
    lin = lin + g - (np.sqrt(new_acc) - np.sqrt(acc)) / lr * var[u]
    quad = np.sqrt(new_acc) / lr + 2 * l2
    var[u] = np.where(np.abs(lin) > l1, (np.sign(lin) * l1 - lin) / quad, 0.0)
    s["acc"][u], s["lin"][u] = new_acc, lin


def _adam(lazy):
    def update(var, s, u, g, t):
        lr = 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        if lazy:
            s["m"][u] = 0.9 * s["m"][u] + 0.1 * g
            s["v"][u] = 0.999 * s["v"][u] + 0.001 * g * g
            var[u] -= lr * s["m"][u] / (np.sqrt(s["v"][u]) + 1e-8)
            return
        s["m"] *= 0.9
        s["m"][u] += 0.1 * g
        s["v"] *= 0.999
        s["v"][u] += 0.001 * g * g
        var -= lr * s["m"] / (np.sqrt(s["v"]) + 1e-8)
    return update


def _zeros():
    return np.zeros((V, D))


OPTIMIZERS = {
    "sgd": (lambda: tw.train.GradientDescentOptimizer(0.1), {}, _sgd, None),
    "momentum": (lambda: tw.train.MomentumOptimizer(0.1, 0.9), {"a": _zeros}, _momentum(False), "momentum"),
    "nesterov": (lambda: tw.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True), {"a": _zeros}, _momentum(True),
                 "momentum"),
    "adagrad": (lambda: tw.train.AdagradOptimizer(0.1), {"acc": lambda: np.full((V, D), 0.1)}, _adagrad,
                "accumulator"),
    "rmsprop": (lambda: tw.train.RMSPropOptimizer(0.1, decay=0.9, momentum=0.5),
                {"ms": lambda: np.ones((V, D)), "mom": _zeros}, _rmsprop, "rms"),
    "ftrl": (lambda: tw.train.FtrlOptimizer(0.1, l1_regularization_strength=0.05, l2_regularization_strength=0.1),
             {"acc": lambda: np.full((V, D), 0.1), "lin": _zeros}, _ftrl, "accum"),
    "adam": (lambda: tw.train.AdamOptimizer(0.1), {"m": _zeros, "v": _zeros}, _adam(False), "m"),
    "lazy_adam": (lambda: tw.contrib.opt.LazyAdamOptimizer(0.1), {"m": _zeros, "v": _zeros}, _adam(True), "m"),
}


def _build(make_opt, dense=False, dtype=tw.float64, table=INIT):
    v = tw.Variable(table.astype(dtype.np_dtype), name="table")
    ids = tw.placeholder(tw.int32, [None], name="ids")
    source = v * tw.constant(1.0, dtype) if dense else v  # through a Mul the gradient is dense
    rows = tw.gather(source, ids)
    loss = _loss(rows, tw.constant(W.astype(dtype.np_dtype))[:tw.shape(ids)[0]])
    opt = make_opt()
    grads = opt.compute_gradients(loss, [v])
    assert isinstance(grads[0][0], tw.Tensor if dense else tw.IndexedSlices)
    return v, ids, opt, opt.apply_gradients(grads)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_sparse_step_against_numpy(sess, name):
    make_opt, slots, update, _ = OPTIMIZERS[name]
    v, ids, _, step = _build(make_opt)
    sess.run(tw.global_variables_initializer())
    var = INIT.copy()
    state = {k: f() for k, f in slots.items()}
    for t, batch in enumerate(STEPS, start=1):
        u, g = _dedup(batch, _grad_rows(var, batch))
        update(var, state, u, g, t)
        sess.run(step, {ids: batch})
        np.testing.assert_allclose(sess.run(v), var, rtol=1e-10, atol=1e-12, err_msg=f"step {t}")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_sparse_and_dense_paths_agree_on_the_touched_rows(name):
    make_opt = OPTIMIZERS[name][0]
    batch = [3, 5, 3, 10]  # the same rows every step: the dense path moves no other row differently
    finals = []
    for dense in (False, True):
        with tw.Graph().as_default():
            v, ids, _, step = _build(make_opt, dense=dense)
            with tw.Session() as sess:
                sess.run(tw.global_variables_initializer())
                for _ in range(3):
                    sess.run(step, {ids: batch})
                finals.append(sess.run(v))
    np.testing.assert_allclose(finals[0][[3, 5, 10]], finals[1][[3, 5, 10]], rtol=1e-10, atol=1e-12)
    if name == "adam":  # TensorFlow's sparse Adam is the dense update
        np.testing.assert_allclose(finals[0], finals[1], rtol=1e-10, atol=1e-12)


def test_lazy_adam_leaves_other_rows_alone_and_adam_does_not():
    results = {}
    for name in ("adam", "lazy_adam"):
        with tw.Graph().as_default():
            v, ids, _, step = _build(OPTIMIZERS[name][0])
            with tw.Session() as s:
                s.run(tw.global_variables_initializer())
                s.run(step, {ids: [2]})
                s.run(step, {ids: [6]})
                results[name] = s.run(v)
    assert not np.allclose(results["adam"][2], results["lazy_adam"][2])  # Adam moved row 2 again at step 2
    untouched = [r for r in range(V) if r not in (2, 6)]
    np.testing.assert_array_equal(results["lazy_adam"][untouched], INIT[untouched])


def test_repeated_indices_are_summed_before_the_update(sess):
    # momentum's kernel applied to a repeated row twice would square the momentum in; the
    # optimizer sums the two slices first, as TensorFlow's does
    v = tw.Variable(np.zeros((4, 1)))
    g = tw.IndexedSlices(tw.constant([[1.0], [2.0]], tw.float64), tw.constant([2, 2]), tw.constant([4, 1]))
    step = tw.train.MomentumOptimizer(1.0, 0.5).apply_gradients([(g, v)])
    assert "Unique" in [op.type for op in tw.get_default_graph()._nodes]
    sess.run(tw.global_variables_initializer())
    sess.run(step)
    np.testing.assert_array_equal(sess.run(v), [[0], [0], [-3], [0]])


def test_sparse_op_applies_repeated_rows_in_order(sess):
    v = tw.Variable(np.zeros((3, 1)))
    acc = tw.Variable(np.zeros((3, 1)))
    out = training_ops.sparse_apply_momentum(v, acc, tw.constant(1.0, tw.float64),
                                             tw.constant([[1.0], [2.0]], tw.float64), tw.constant([1, 1]),
                                             tw.constant(0.5, tw.float64))
    sess.run(tw.global_variables_initializer())
    # first: acc = 1, v = -1; then acc = 0.5 + 2 = 2.5, v = -3.5 (TensorFlow's kernel)
    np.testing.assert_array_equal(sess.run(out)[:, 0], [0, -3.5, 0])
    np.testing.assert_array_equal(sess.run(acc)[:, 0], [0, 2.5, 0])


def test_an_optimizer_without_a_sparse_path_gets_a_dense_gradient(sess):
    class Halving(tw.train.Optimizer):
        def __init__(self):
            super().__init__(False, "Halving")

        def _apply_dense(self, grad, var):
            assert isinstance(grad, tw.Tensor)
            return tw.assign_sub(var, grad * 0.5)

    v = tw.Variable(np.zeros((3, 2)))
    step = Halving().minimize(tw.reduce_sum(tw.gather(v, [1, 1])))
    sess.run(tw.global_variables_initializer())
    sess.run(step)
    np.testing.assert_array_equal(sess.run(v)[:, 0], [0, -1, 0])


def test_gate_graph_with_indexed_slices(sess):
    v = tw.Variable(np.ones((3, 2)))
    opt = tw.train.GradientDescentOptimizer(1.0)
    grads = opt.compute_gradients(tw.reduce_sum(tw.gather(v, [0])), [v], gate_gradients=opt.GATE_GRAPH)
    assert isinstance(grads[0][0], tw.IndexedSlices)
    sess.run(tw.global_variables_initializer())
    sess.run(opt.apply_gradients(grads))
    np.testing.assert_array_equal(sess.run(v)[:, 0], [0, 1, 1])


def test_apply_gradients_checks_a_sparse_gradient():
    v = tw.Variable(np.zeros((3, 2)))
    bad = tw.IndexedSlices(tw.constant([[1.0, 1.0]], tw.float32), tw.constant([0]), tw.constant([3, 2]))
    with pytest.raises(errors.InvalidArgumentError, match="dtype float32"):
        tw.train.GradientDescentOptimizer(0.1).apply_gradients([(bad, v)])
    wide = tw.IndexedSlices(tw.constant([[1.0, 1.0, 1.0]], tw.float64), tw.constant([0]), tw.constant([3, 3]))
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        tw.train.GradientDescentOptimizer(0.1).apply_gradients([(wide, v)])


# ---------------------------------------------------------------------------------------
# a sparse step touches only the looked-up rows
TOUCHING = ["sgd", "momentum", "adagrad", "rmsprop", "ftrl", "lazy_adam"]


def _address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("name", TOUCHING)
def test_a_sparse_step_touches_only_the_looked_up_rows(sess, name):
    make_opt, _, _, slot = OPTIMIZERS[name]
    vocab = 20000
    table = np.random.RandomState(2).uniform(-1, 1, (vocab, D))
    v, ids, opt, step = _build(make_opt, table=table)
    tensors = [v] + ([opt.get_slot(v, slot)] if slot else [])
    sess.run(tw.global_variables_initializer())
    sess.run(step, {ids: [0]})  # the first update copies the initial value once (the init op's)
    before = [sess.run(t) for t in tensors]
    where = [_address(b) for b in before]
    snapshot = [b.copy() for b in before]
    del before
    batch = [17, 4242, 17, 19999]
    for _ in range(3):
        sess.run(step, {ids: batch})
        now = [sess.run(t) for t in tensors]
        assert [_address(n) for n in now] == where, "the table (or a slot) was rewritten, not updated in place"
        del now
    others = np.setdiff1d(np.arange(vocab), batch)
    for t, old in zip(tensors, snapshot):
        new = sess.run(t)
        assert new[others].tobytes() == old[others].tobytes()
        assert not np.array_equal(new[17], old[17]) or name == "ftrl"


def _step_peak(make_opt, vocab, batch=256, dim=128):
    """Bytes a training step allocates beyond what was in use before it (the CPU allocator
    counts outputs of 64 KiB and more: a [batch, dim] float32 block is 128 KiB)."""
    with tw.Graph().as_default():
        v = tw.Variable(tw.random_uniform([vocab, dim]), name="emb")
        ids = tw.placeholder(tw.int32, [batch])
        loss = tw.reduce_sum(tw.square(tw.gather(v, ids)))
        step = make_opt().minimize(loss)
        rng = np.random.RandomState(3)  # the same ids at every vocabulary size: the same work
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            sess.run(step, {ids: rng.randint(0, 1000, batch)})  # warm: plans built, copy-on-write done
            alloc = sess.devices[0].allocator
            start = alloc.bytes_in_use
            alloc.reset_peak()
            meta = tw.RunMetadata()
            sess.run(step, {ids: rng.randint(0, 1000, batch)}, run_metadata=meta)
            peak = meta.allocator_stats[sess.devices[0].name]["peak_bytes_in_use"]
            return peak - start, vocab * dim * 4


@pytest.mark.parametrize("name", ["sgd", "momentum", "lazy_adam"])
def test_allocator_peak_does_not_grow_with_the_vocabulary(name):
    make_opt = OPTIMIZERS[name][0]
    small, _ = _step_peak(make_opt, 1000)
    large, table_bytes = _step_peak(make_opt, 100_000)
    assert 0 < small and large <= small + 4096, f"a step allocated {large} bytes at vocab 1e5 but {small} at 1e3"
    assert large < table_bytes // 20


# ---------------------------------------------------------------------------------------
# bad input to the sparse training ops
def test_sparse_training_op_out_of_range_leaves_everything_unchanged(sess):
    v = tw.Variable(np.ones((4, 2)))
    acc = tw.Variable(np.full((4, 2), 0.1))
    idx = tw.placeholder(tw.int64, [None])
    out = training_ops.sparse_apply_adagrad(v, acc, tw.constant(0.1, tw.float64), tw.ones([2, 2], tw.float64), idx,
                                            name="sparse_adagrad")
    sess.run(tw.global_variables_initializer())
    with pytest.raises(errors.InvalidArgumentError, match=r"SparseApplyAdagrad node 'sparse_adagrad'.*indices\[1\] "
                                                          r"= 4 is not in \[0, 4\)"):
        sess.run(out, {idx: [0, 4]})
    np.testing.assert_array_equal(sess.run(v), np.ones((4, 2)))
    np.testing.assert_array_equal(sess.run(acc), np.full((4, 2), 0.1))
    sess.run(out, {idx: [0, 3]})
    assert sess.run(v)[[1, 2]].tolist() == [[1, 1], [1, 1]] and sess.run(v)[0, 0] < 1


def test_sparse_training_op_shape_errors(sess):
    v = tw.Variable(np.ones((4, 2)))
    acc = tw.Variable(np.zeros((4, 2)))
    lr, mom = tw.constant(0.1, tw.float64), tw.constant(0.9, tw.float64)
    with pytest.raises(errors.InvalidArgumentError, match=r"need \(2, 2\)"):
        training_ops.sparse_apply_momentum(v, acc, lr, tw.ones([3, 2], tw.float64), tw.constant([0, 1]), mom)
    with pytest.raises(errors.InvalidArgumentError, match="must be a vector"):
        training_ops.sparse_apply_momentum(v, acc, lr, tw.ones([1, 2], tw.float64), tw.constant([[0]]), mom)
    with pytest.raises(errors.InvalidArgumentError, match="must match"):
        training_ops.sparse_apply_momentum(v, tw.Variable(np.zeros((4, 3))), lr, tw.ones([1, 2], tw.float64),
                                           tw.constant([0]), mom)
    grad = tw.placeholder(tw.float64, None)
    out = training_ops.sparse_apply_momentum(v, acc, lr, grad, tw.constant([0, 1]), mom)
    sess.run(tw.global_variables_initializer())
    with pytest.raises(errors.InvalidArgumentError, match="the variable is unchanged"):
        sess.run(out, {grad: np.ones((2, 3))})
    np.testing.assert_array_equal(sess.run(v), np.ones((4, 2)))
