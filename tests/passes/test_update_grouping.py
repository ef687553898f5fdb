"""Update grouping (passes/update_grouping.py): a step's ApplyGradientDescent nodes on one
device become one _GroupedApplyGradientDescent node, with the values the separate updates give."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.training_ops import apply_gradient_descent as agd

PARTS = tw.RunOptions(output_partition_graphs=True)
GROUPED = "_GroupedApplyGradientDescent"


def _config(grouping):
    return tw.ConfigProto(graph_options=tw.GraphOptions(enable_update_grouping=grouping))


def _types(sess, fetches, feed=None):
    md = tw.RunMetadata()
    sess.run(fetches, feed, options=PARTS, run_metadata=md)
    return sorted(n["op"] for gd in md.partition_graphs for n in gd["node"])


def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    x = tw.placeholder(tw.float32, [None, 4], name="x")
    y = tw.placeholder(tw.int32, [None], name="y")
    w1 = tw.Variable(rng.standard_normal((4, 8)).astype(np.float32), name="w1")
    b1 = tw.Variable(np.zeros(8, np.float32), name="b1")
    w2 = tw.Variable(rng.standard_normal((8, 3)).astype(np.float32), name="w2")
    b2 = tw.Variable(np.zeros(3, np.float32), name="b2")
    logits = tw.matmul(tw.nn.relu(tw.matmul(x, w1) + b1), w2) + b2
    loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    feed = {x: rng.standard_normal((5, 4)).astype(np.float32), y: np.array([0, 1, 2, 1, 0], np.int32)}
    return loss, [w1, b1, w2, b2], feed


def _train(grouping, steps=4):
    g = tw.Graph()
    with g.as_default():
        loss, variables, feed = _mlp()
        train = tw.train.GradientDescentOptimizer(0.3).minimize(loss)
        with tw.Session(config=_config(grouping)) as s:
            s.run(tw.global_variables_initializer())
            types = _types(s, train, feed)
            for _ in range(steps - 1):
                s.run(train, feed)
            return types, s.run(variables)


def test_the_four_updates_of_a_step_become_one_node_with_the_same_values():
    types, grouped = _train(True)
    assert types.count(GROUPED) == 1 and "ApplyGradientDescent" not in types
    types, separate = _train(False)
    assert GROUPED not in types and types.count("ApplyGradientDescent") == 4
    for a, b in zip(grouped, separate):
        np.testing.assert_array_equal(a, b)


def test_the_environment_variable_overrides_the_config(monkeypatch):
    monkeypatch.setenv("TENSORWEAVE_UPDATE_GROUPING", "0")
    types, _ = _train(True, steps=1)
    assert GROUPED not in types


def test_what_is_not_grouped():
    a = tw.Variable(np.ones(3, np.float32), name="a")
    b = tw.Variable(np.ones(3, np.float32), name="b")
    c = tw.Variable(np.ones(3, np.float32), name="c")
    d = tw.Variable(np.ones(3, np.float32), name="d")
    lr1, lr2 = tw.constant(0.1), tw.constant(0.2)
    g = tw.constant(np.full(3, 2.0, np.float32))
    ua = agd(a, lr1, g)
    ub = agd(b, lr1, g)
    uc = agd(c, lr2, g)                      # another learning rate: its own group
    with tw.control_dependencies([ub]):
        dd = tw.identity(g)
    ud = agd(d, lr1, dd)                     # depends on ub: stays alone (no cycle)
    ua2 = agd(a, lr1, g)                     # the same variable again: stays alone
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        types = _types(s, tw.group(ua, ub, uc, ud, ua2))
        assert types.count(GROUPED) == 1 and types.count("ApplyGradientDescent") == 3
        values = s.run([a, b, c, d])
    np.testing.assert_allclose(values[0], 1 - 2 * 0.1 * 2)  # both updates of a applied
    np.testing.assert_allclose(values[1], 1 - 0.1 * 2)
    np.testing.assert_allclose(values[2], 1 - 0.2 * 2)
    np.testing.assert_allclose(values[3], 1 - 0.1 * 2)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        # a fetched update's value is the user's: not grouped
        types = _types(s, [ua, ub])
        assert GROUPED not in types


def test_a_bad_gradient_shape_names_the_variable():
    a = tw.Variable(np.ones(3, np.float32), name="a")
    b = tw.Variable(np.ones(2, np.float32), name="b")
    x = tw.placeholder(tw.float32, None, name="x")
    train = tw.group(agd(a, 0.1, tw.ones(3)), agd(b, 0.1, x))
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        with pytest.raises(tw.errors.InvalidArgumentError, match="update 'ApplyGradientDescent_1'.*variable 'b:0'"):
            s.run(train, {x: np.ones(3, np.float32)})
        np.testing.assert_array_equal(s.run(a), np.ones(3))  # nothing written
