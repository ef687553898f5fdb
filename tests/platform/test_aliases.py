"""TF1's deprecated top-level names, optimizers given any iterable of variables, and the
keyword-only cross-entropies."""

import numpy as np
import pytest

import tensorweave as tw


def test_deprecated_names_compute_what_their_new_names_do(sess):
    x = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], np.float32)
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    b = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    t = tw.constant(x)
    out = sess.run({
        "arg_max": tw.arg_max(t, 1), "arg_min": tw.arg_min(t, 1), "to_double": tw.to_double(t),
        "to_float": tw.to_float(tw.constant([1, 2])), "to_int32": tw.to_int32(t), "to_int64": tw.to_int64(t),
        "mul": tw.mul(t, 2.0), "sub": tw.sub(t, 1.0), "neg": tw.neg(t), "div": tw.div(t, 2.0),
        "pack": tw.pack([t, t]), "unpack": tw.unpack(t), "concat_v2": tw.concat_v2([t, t], 1),
        "batch_matmul": tw.batch_matmul(a, b), "batch_matmul_adj": tw.batch_matmul(b, b, adj_x=True),
    })
    np.testing.assert_array_equal(out["arg_max"], [0, 1])
    np.testing.assert_array_equal(out["arg_min"], [1, 0])
    assert out["arg_max"].dtype == np.int64 and out["to_double"].dtype == np.float64
    assert out["to_float"].dtype == np.float32 and out["to_int32"].dtype == np.int32
    assert out["to_int64"].dtype == np.int64
    np.testing.assert_allclose(out["mul"], x * 2)
    np.testing.assert_allclose(out["sub"], x - 1)
    np.testing.assert_allclose(out["neg"], -x)
    np.testing.assert_allclose(out["div"], x / 2)
    assert out["pack"].shape == (2, 2, 3) and len(out["unpack"]) == 2
    assert out["concat_v2"].shape == (2, 6)
    np.testing.assert_allclose(out["batch_matmul"], a @ b)
    np.testing.assert_allclose(out["batch_matmul_adj"], np.transpose(b, (0, 2, 1)) @ b)


def test_deprecated_variable_initializers(sess):
    v = tw.Variable(1.0)
    loc = tw.Variable(2.0, collections=[tw.GraphKeys.LOCAL_VARIABLES])
    assert tw.all_variables() == [v]
    sess.run([tw.initialize_all_variables(), tw.initialize_local_variables()])
    assert sess.run([v, loc]) == [1.0, 2.0]
    w = tw.Variable(3.0)
    sess.run(tw.initialize_variables([w]))
    assert sess.run(w) == 3.0


def test_deprecated_summary_names_build_the_summary_ops():
    x = tw.constant(1.5)
    s1 = tw.scalar_summary("loss", x)
    s2 = tw.histogram_summary("w", tw.constant([1.0, 2.0]))
    assert s1.op.type == "ScalarSummary" and s2.op.type == "HistogramSummary"
    assert tw.get_collection(tw.GraphKeys.SUMMARIES) == [s1, s2]
    assert tw.merge_all_summaries().op.type == "MergeSummary"
    assert tw.merge_summary([s1, s2]).op.type == "MergeSummary"
    assert tw.SummaryWriter is tw.summary.FileWriter


def _model():
    x = tw.constant(np.array([[1.0, 2.0]], np.float32))
    params = {"w": tw.Variable(np.ones((2, 1), np.float32), name="w"), "b": tw.Variable(np.zeros(1, np.float32),
                                                                                          name="b")}
    loss = tw.reduce_sum(tw.square(tw.matmul(x, params["w"]) + params["b"] - 10.0))
    return params, loss


@pytest.mark.parametrize("make", [
    lambda p: p.values(),                       # dict_values, as many TF1 programs pass
    lambda p: (v for v in p.values()),          # a generator
    lambda p: set(p.values()),                  # a set (ordered by name)
    lambda p: p,                                # a dict: its values
    lambda p: [[p["w"]], (p["b"],)],            # nested lists and tuples
])
def test_optimizers_take_any_iterable_of_variables(make, sess):
    params, loss = _model()
    grads = tw.train.GradientDescentOptimizer(0.01).compute_gradients(loss, var_list=make(params))
    assert sorted(v.op.name for _, v in grads) == ["b", "w"] and all(g is not None for g, _ in grads)
    step = tw.train.GradientDescentOptimizer(0.01).minimize(loss, var_list=make(params))
    sess.run(tw.global_variables_initializer())
    before = sess.run(loss)
    sess.run(step)
    assert sess.run(loss) < before


def test_var_list_with_something_else_names_it():
    params, loss = _model()
    with pytest.raises(tw.errors.InvalidArgumentError, match="is not a tw.Variable"):
        tw.train.AdamOptimizer().minimize(loss, var_list=[params["w"], tw.constant(1.0)])


def test_cross_entropies_refuse_positional_arguments_as_tf1():
    logits, labels = tw.constant([[1.0, 2.0]]), tw.constant([[0.0, 1.0]])
    for fn, lab in ((tw.nn.softmax_cross_entropy_with_logits, labels),
                    (tw.nn.sparse_softmax_cross_entropy_with_logits, tw.constant([1])),
                    (tw.nn.sigmoid_cross_entropy_with_logits, labels)):
        with pytest.raises(tw.errors.InvalidArgumentError, match="only call it with named arguments"):
            fn(logits, lab)  # the pre-1.0 (logits, labels) order would silently swap them
        assert fn(labels=lab, logits=logits).dtype == tw.float32

