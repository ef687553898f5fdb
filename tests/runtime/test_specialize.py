"""Plans specialised to the shapes fed (passes/specialize.py, Plan.specialized_for): a
`None`-batch graph runs a plan whose shapes are the fed ones (Shape/BroadcastGradientArgs
chains folded, matmuls sized), gives the results of the static-shape graph, builds one
plan per batch size up to a bound and none after it."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.client.plan import MAX_SPECIALIZED


def _mlp(batch):
    g = tw.Graph()
    rng = np.random.default_rng(0)
    with g.as_default():
        x = tw.placeholder(tw.float32, [batch, 8], name="x")
        y = tw.placeholder(tw.int32, [batch], name="y")
        w1 = tw.Variable(rng.standard_normal((8, 16)).astype(np.float32), name="w1")
        b1 = tw.Variable(np.zeros(16, np.float32), name="b1")
        w2 = tw.Variable(rng.standard_normal((16, 4)).astype(np.float32), name="w2")
        logits = tw.matmul(tw.nn.relu(tw.matmul(x, w1) + b1), w2)
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tw.global_variables_initializer()
    return g, x, y, loss, train, init, (w1, b1, w2)


def _data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8)).astype(np.float32), rng.integers(0, 4, n).astype(np.int32)


def test_none_batch_plans_match_static_plans_for_several_batch_sizes():
    for n in (1, 5, 64):
        xs, ys = _data(n, n)
        results = []
        for batch in (None, n):
            g, x, y, loss, train, init, ws = _mlp(batch)
            with tw.Session(graph=g) as sess:
                sess.run(init)
                losses = [sess.run([loss, train], {x: xs, y: ys})[0] for _ in range(3)]
                results.append((losses, sess.run(list(ws))))
        (l_none, w_none), (l_static, w_static) = results
        assert l_none == l_static  # same kernels on the same shapes: bit-identical
        for a, b in zip(w_none, w_static):
            np.testing.assert_array_equal(a, b)


def test_the_specialised_plan_folds_the_shape_computations():
    g, x, y, loss, train, init, _ = _mlp(None)
    xs, ys = _data(32, 0)
    with tw.Session(graph=g) as sess:
        sess.run(init)
        sess.run(train, {x: xs, y: ys})
        (generic,) = [p for p in sess._plans.values() if p._specialized]
        (special,) = generic._specialized.values()
        types = lambda plan: {op.type for op in plan.nodes}  # noqa: E731
        assert "Shape" in types(generic)  # the batch size is computed at run time there
        assert not {"Shape", "BroadcastGradientArgs", "Prod"} & types(special)
        assert len(special.nodes) < len(generic.nodes)
        mm = [op for op in special.nodes if op.type == "MatMul"]
        assert mm and all(op.outputs[0].shape.is_fully_defined() for op in mm)
        assert not special.dynamic  # small matmuls run inline, not through the thread pool


def test_new_batch_sizes_stop_building_plans_after_the_bound():
    g, x, y, loss, train, init, _ = _mlp(None)
    with tw.Session(graph=g) as sess:
        sess.run(init)
        before = sess._plan_builds
        sess.run(loss, {x: _data(4, 0)[0], y: _data(4, 0)[1]})
        builds = sess._plan_builds
        assert builds == before + 2  # the generic plan and one for batch 4
        sess.run(loss, {x: _data(4, 1)[0], y: _data(4, 1)[1]})
        assert sess._plan_builds == builds  # same shapes: no build
        sizes = range(5, 5 + 3 * MAX_SPECIALIZED)  # a batch that changes every step
        for n in sizes:
            xs, ys = _data(n, n)
            got = sess.run(loss, {x: xs, y: ys})
            assert np.isfinite(got)
        (generic,) = [p for p in sess._plans.values() if p._specialized]
        assert len(generic._specialized) == MAX_SPECIALIZED  # bounded
        assert sess._plan_builds == before + 1 + MAX_SPECIALIZED
        # an unspecialised step gives what a specialised one does
        xs, ys = _data(4, 7)
        special = sess.run(loss, {x: xs, y: ys})
        assert special == pytest.approx(sess.run(loss, {x: np.concatenate([xs, xs]), y: np.concatenate([ys, ys])}))


@pytest.mark.parametrize("shape", [(3, 7), (3,), (3, 8, 1), (8,)])
def test_a_feed_of_the_wrong_shape_is_still_refused_by_name(shape):
    g, x, y, loss, *_ = _mlp(None)
    with g.as_default():
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as sess:
        sess.run(init)
        with pytest.raises(tw.errors.InvalidArgumentError,
                           match=rf"cannot feed value of shape \({shape[0]},.*'x:0', which has shape \(\?, 8\)"):
            sess.run(loss, {x: np.zeros(shape, np.float32), y: np.zeros(3, np.int32)})
        assert np.isfinite(sess.run(loss, {x: np.zeros((3, 8), np.float32), y: np.zeros(3, np.int32)}))


# ----------------------------------------------------------------------------------------
# plans with loops: shapes found around the back edge (a fixed point)
def _rnn(batch):
    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(4)
        x = tw.placeholder(tw.float32, [batch, 6, 3], name="x")
        cell = tw.nn.rnn_cell.MultiRNNCell([tw.nn.rnn_cell.BasicLSTMCell(5), tw.nn.rnn_cell.GRUCell(4)])
        out, state = tw.nn.dynamic_rnn(cell, x, dtype=tw.float32)
        loss = tw.reduce_sum(out * out) + tw.reduce_sum(state[1])
        grads = tw.gradients(loss, [x, *tw.trainable_variables()])
        init = tw.global_variables_initializer()
    return g, x, [out, *grads], init


def _loop_op_types(plan):
    types = set()
    for part in plan.partitions or [plan.partition]:
        for n in (part.frame_info.nodes if part.frame_info else ()):
            if n.op.type == "_FastLoop":
                types |= {s[5].op.type for s in n.loop.steps if s[5] is not None and not isinstance(s[5], tuple)}
    return types


def test_a_none_batch_rnn_plan_folds_the_shape_work_inside_its_loops():
    """dynamic_rnn and its gradient loop: with the batch fed, every shape in the loops is
    known (the loop variables' through the fixed point, the gradient's stack pops through
    their pushes), the shape chains fold and the reductions/reshapes they drove go: the
    loops run the static-shape graph's kernels, with its results."""
    xs = np.random.default_rng(1).standard_normal((7, 6, 3)).astype(np.float32)
    results = {}
    for batch in (None, 7):
        g, x, fetches, init = _rnn(batch)
        with tw.Session(graph=g) as sess:
            sess.run(init)
            results[batch] = sess.run(fetches, {x: xs})
            if batch is None:
                (generic,) = [p for p in sess._plans.values() if p._specialized]
                (special,) = generic._specialized.values()
                assert {"Shape", "BroadcastGradientArgs"} <= _loop_op_types(generic)
                assert not {"Shape", "BroadcastGradientArgs", "Sum", "Reshape"} & _loop_op_types(special)
    for a, b in zip(results[None], results[7]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_loop_variable_that_changes_shape_keeps_its_shape_computed():
    """A vector that grows every iteration: the first pass's guess (its entry shape [2])
    fails around the back edge, the fixed point says [None], and its Shape stays a node."""
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None], name="x")
        _, v, n = tw.while_loop(lambda i, v, n: i < 3,
                                lambda i, v, n: (i + 1, tw.concat([v, v[:1] * 2.0], 0), n + tw.size(v)),
                                [0, x, 0], shape_invariants=[tw.TensorShape([]), tw.TensorShape([None]),
                                                              tw.TensorShape([])])
    with tw.Session(graph=g) as sess:
        for _ in range(2):
            got_v, got_n = sess.run([v, n], {x: np.array([1.0, 3.0], np.float32)})
        (generic,) = [p for p in sess._plans.values() if p._specialized]
        (special,) = generic._specialized.values()
    np.testing.assert_array_equal(got_v, [1.0, 3.0, 2.0, 2.0, 2.0])
    assert got_n == 2 + 3 + 4
    assert "Size" in _loop_op_types(special)
