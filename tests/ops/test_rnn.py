"""tw.nn.rnn_cell, static_rnn, dynamic_rnn and the bidirectional forms: values against NumPy
references, TF1 variable names, static vs dynamic (values and gradients), sequence_length
masking, gradients against float64 finite differences, bad input, and a small LSTM that
learns."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

rnn_cell = tw.nn.rnn_cell


# A control-flow bug shows up as a step that never finishes: fail loudly instead of hanging.
pytestmark = pytest.mark.usefixtures("bounded_time")


def rng(seed=0):
    return np.random.default_rng(seed)


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def init_and_run(fetches, feed=None):
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        return sess.run(fetches, feed)


# ----------------------------------------------------------------------------------------
# NumPy references
def np_basic_rnn(x, h, w):
    return np.tanh(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"])


def np_basic_lstm(x, c, h, w, forget_bias=1.0):
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"], 4, axis=1)
    c = c * sig(f + forget_bias) + sig(i) * np.tanh(j)
    return c, np.tanh(c) * sig(o)


def np_lstm(x, c, m, w, peep=False, cell_clip=None, proj=False, proj_clip=None):
    i, j, f, o = np.split(np.concatenate([x, m], 1) @ w["kernel"] + w["bias"], 4, axis=1)
    if peep:
        c = sig(f + 1.0 + w["w_f_diag"] * c) * c + sig(i + w["w_i_diag"] * c) * np.tanh(j)
    else:
        c = sig(f + 1.0) * c + sig(i) * np.tanh(j)
    if cell_clip is not None:
        c = np.clip(c, -cell_clip, cell_clip)
    m = (sig(o + w["w_o_diag"] * c) if peep else sig(o)) * np.tanh(c)
    if proj:
        m = m @ w["projection/kernel"]
        if proj_clip is not None:
            m = np.clip(m, -proj_clip, proj_clip)
    return c, m


def np_gru(x, h, w):
    r, u = np.split(sig(np.concatenate([x, h], 1) @ w["gates/kernel"] + w["gates/bias"]), 2, axis=1)
    c = np.tanh(np.concatenate([x, r * h], 1) @ w["candidate/kernel"] + w["candidate/bias"])
    return u * h + (1 - u) * c


def check_input_gradients(fn, x_values, rtol=1e-5, atol=1e-7, delta=1e-6):
    """tw.gradients of sum(w_i * y_i) (fixed random w) with respect to the inputs against
    central differences, in a session whose variables are initialised (gradient_checker's
    sessions initialise none)."""
    xs = [tw.placeholder(tw.float64, np.shape(v)) for v in x_values]
    ys = fn(*xs)
    r = rng(99)
    loss = sum(tw.reduce_sum(y * r.standard_normal(y.shape.as_list())) for y in ys)
    grads = tw.gradients(loss, xs)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        feed = {x: v for x, v in zip(xs, x_values)}
        theo = sess.run(grads, feed)
        for x, v, g in zip(xs, x_values, theo):
            num = np.zeros_like(v)
            for i in np.ndindex(v.shape):
                for sign in (1, -1):
                    vv = v.copy()
                    vv[i] += sign * delta
                    num[i] += sign * sess.run(loss, {**feed, x: vv}) / (2 * delta)
            np.testing.assert_allclose(g, num, rtol=rtol, atol=atol)


def weights(values, prefix):
    return {k[len(prefix) + 1:]: v for k, v in values.items() if k.startswith(prefix + "/")}


# ----------------------------------------------------------------------------------------
# cells against NumPy, names as TF1
def test_basic_rnn_cell_values_and_names():
    x = rng().standard_normal((3, 2))
    h = rng(1).standard_normal((3, 4))
    cell = rnn_cell.BasicRNNCell(4)
    assert cell.state_size == 4 and cell.output_size == 4
    with tw.variable_scope("rnn"):
        out, st = cell(tw.constant(x), tw.constant(h))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got, w = sess.run([out, {v.op.name: v for v in tw.global_variables()}])
    assert sorted(w) == ["rnn/basic_rnn_cell/bias", "rnn/basic_rnn_cell/kernel"]
    np.testing.assert_allclose(got, np_basic_rnn(x, h, weights(w, "rnn/basic_rnn_cell")), rtol=1e-6, atol=1e-7)


def test_basic_lstm_cell_tuple_and_concat_state():
    x = rng().standard_normal((3, 2))
    c, h = rng(1).standard_normal((3, 5)), rng(2).standard_normal((3, 5))
    cell = rnn_cell.BasicLSTMCell(5, forget_bias=0.5)
    assert cell.state_size == rnn_cell.LSTMStateTuple(5, 5)
    out, st = cell(tw.constant(x), rnn_cell.LSTMStateTuple(tw.constant(c), tw.constant(h)))
    assert isinstance(st, rnn_cell.LSTMStateTuple)
    cell2 = rnn_cell.BasicLSTMCell(5, forget_bias=0.5, state_is_tuple=False)
    out2, st2 = cell2(tw.constant(x), tw.constant(np.concatenate([c, h], 1)))
    assert sorted(v.op.name for v in tw.global_variables()) == [
        "basic_lstm_cell/bias", "basic_lstm_cell/kernel", "basic_lstm_cell_1/bias", "basic_lstm_cell_1/kernel"]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got = sess.run([out, st.c, out2, st2])
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    ec, eh = np_basic_lstm(x, c, h, weights(w, "basic_lstm_cell"), 0.5)
    np.testing.assert_allclose(got[0], eh, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], ec, rtol=1e-6, atol=1e-7)
    ec2, eh2 = np_basic_lstm(x, c, h, weights(w, "basic_lstm_cell_1"), 0.5)
    np.testing.assert_allclose(got[2], eh2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[3], np.concatenate([ec2, eh2], 1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("peep,cell_clip,num_proj,proj_clip", [(False, None, None, None), (True, 0.3, 3, 0.1)])
def test_lstm_cell(peep, cell_clip, num_proj, proj_clip):
    x = rng().standard_normal((2, 3))
    c = rng(1).standard_normal((2, 4))
    m = rng(2).standard_normal((2, num_proj or 4))
    cell = rnn_cell.LSTMCell(4, use_peepholes=peep, cell_clip=cell_clip, num_proj=num_proj, proj_clip=proj_clip,
                             initializer=tw.random_uniform_initializer(-0.5, 0.5, seed=1))
    assert cell.output_size == (num_proj or 4)
    with tw.variable_scope("rnn"):
        out, st = cell(tw.constant(x), (tw.constant(c), tw.constant(m)))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got = sess.run([out, st.c])
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    names = {"rnn/lstm_cell/kernel", "rnn/lstm_cell/bias"}
    if peep:
        names |= {"rnn/lstm_cell/w_f_diag", "rnn/lstm_cell/w_i_diag", "rnn/lstm_cell/w_o_diag",
                  "rnn/lstm_cell/projection/kernel"}
    assert set(w) == names
    ec, em = np_lstm(x, c, m, weights(w, "rnn/lstm_cell"), peep, cell_clip, num_proj is not None, proj_clip)
    np.testing.assert_allclose(got[0], em, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], ec, rtol=1e-6, atol=1e-7)


def test_gru_cell():
    x = rng().standard_normal((3, 2))
    h = rng(1).standard_normal((3, 4))
    cell = rnn_cell.GRUCell(4)
    with tw.variable_scope("rnn"):
        out, st = cell(tw.constant(x), tw.constant(h))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got = sess.run(out)
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    assert sorted(w) == ["rnn/gru_cell/candidate/bias", "rnn/gru_cell/candidate/kernel", "rnn/gru_cell/gates/bias",
                         "rnn/gru_cell/gates/kernel"]
    np.testing.assert_array_equal(w["rnn/gru_cell/gates/bias"], np.ones(8))
    np.testing.assert_allclose(got, np_gru(x, h, weights(w, "rnn/gru_cell")), rtol=1e-6, atol=1e-7)


def test_multi_rnn_cell_names_and_values():
    cells = rnn_cell.MultiRNNCell([rnn_cell.BasicLSTMCell(3), rnn_cell.GRUCell(2)])
    assert cells.output_size == 2
    x = rng().standard_normal((2, 4, 3))
    outs, st = tw.nn.dynamic_rnn(cells, tw.constant(x), dtype=tw.float64)
    assert isinstance(st, tuple) and isinstance(st[0], rnn_cell.LSTMStateTuple)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got = sess.run(outs)
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    assert sorted(w) == ["rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias",
                         "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel",
                         "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias",
                         "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel",
                         "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias",
                         "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel"]
    w0 = weights(w, "rnn/multi_rnn_cell/cell_0/basic_lstm_cell")
    w1 = weights(w, "rnn/multi_rnn_cell/cell_1/gru_cell")
    c = h = np.zeros((2, 3))
    g = np.zeros((2, 2))
    for t in range(4):
        c, h = np_basic_lstm(x[:, t], c, h, w0)
        g = np_gru(h, g, w1)
        np.testing.assert_allclose(got[:, t], g, rtol=1e-6, atol=1e-7)


def test_wrappers():
    x = tw.constant(rng().standard_normal((2, 3)))
    h = tw.constant(rng(1).standard_normal((2, 3)))
    base = rnn_cell.BasicRNNCell(3)
    out, _ = base(x, h)
    drop = rnn_cell.DropoutWrapper(base, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0)
    out_d, _ = drop(x, h)
    res = rnn_cell.ResidualWrapper(base)
    out_r, _ = res(x, h)
    dev = rnn_cell.DeviceWrapper(base, "/cpu:0")
    out_v, _ = dev(x, h)
    assert len(tw.global_variables()) == 2  # every wrapper used the same cell's variables
    a, d, r, v, xv = init_and_run([out, out_d, out_r, out_v, x])
    np.testing.assert_allclose(d, a)
    np.testing.assert_allclose(r, a + xv)
    np.testing.assert_allclose(v, a)
    # dropout with keep_prob < 1 zeros some outputs and scales the others
    with tw.Graph().as_default():
        cell = rnn_cell.DropoutWrapper(rnn_cell.BasicRNNCell(200), output_keep_prob=0.5, seed=3)
        o, _ = cell(tw.ones([4, 5]), tw.zeros([4, 200]))
        ov = init_and_run(o)
        assert 0.3 < np.mean(ov == 0) < 0.7


def test_zero_state():
    cell = rnn_cell.MultiRNNCell([rnn_cell.BasicLSTMCell(3), rnn_cell.BasicRNNCell(2)])
    z = cell.zero_state(4, tw.float32)
    assert z[0].c.shape.as_list() == [4, 3] and z[1].shape.as_list() == [4, 2]
    b = tw.placeholder(tw.int32, [])
    zb = rnn_cell.GRUCell(5).zero_state(b, tw.float64)
    with tw.Session() as sess:
        assert sess.run(zb, {b: 2}).shape == (2, 5)


# ----------------------------------------------------------------------------------------
# static vs dynamic, masking, bidirectional
def _loss(outputs, state):
    return tw.reduce_sum(tw.square(outputs)) + sum(tw.reduce_sum(tw.sin(s)) for s in rnn_cell.flatten(state))


@pytest.mark.parametrize("make", [lambda: rnn_cell.BasicLSTMCell(4),
                                  lambda: rnn_cell.LSTMCell(4, use_peepholes=True, num_proj=3),
                                  lambda: rnn_cell.GRUCell(4),
                                  lambda: rnn_cell.MultiRNNCell([rnn_cell.BasicRNNCell(3), rnn_cell.GRUCell(4)])],
                         ids=["basic_lstm", "lstm_peep_proj", "gru", "multi"])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_static_vs_dynamic_same_outputs_and_gradients(make, with_lengths):
    x = tw.placeholder(tw.float64, [3, 5, 2])
    lengths = [5, 2, 0] if with_lengths else None
    cell = make()
    outs_s, st_s = tw.nn.static_rnn(cell, tw.unstack(x, axis=1), dtype=tw.float64, sequence_length=lengths)
    outs_d, st_d = tw.nn.dynamic_rnn(cell, x, dtype=tw.float64, sequence_length=lengths)
    stacked = tw.stack(outs_s, 1)
    ls, ld = _loss(stacked, st_s), _loss(outs_d, st_d)
    xs = [x] + tw.trainable_variables()
    gs, gd = tw.gradients(ls, xs), tw.gradients(ld, xs)
    xv = rng().standard_normal((3, 5, 2))
    a, b, sa, sb, ga, gb = init_and_run([stacked, outs_d, rnn_cell.flatten(st_s), rnn_cell.flatten(st_d), gs, gd],
                                        {x: xv})
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    for p, q in zip(sa, sb):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-9)
    for p, q in zip(ga, gb):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-9)
    if with_lengths:
        assert np.all(b[1, 2:] == 0) and np.all(b[2] == 0)
        assert np.all(ga[0][1, 2:] == 0)  # inputs past a length get no gradient


def test_sequence_length_carries_state_through():
    x = rng().standard_normal((3, 6, 2))
    cell = rnn_cell.BasicRNNCell(4)
    outs, st = tw.nn.dynamic_rnn(cell, tw.constant(x), sequence_length=tw.constant([6, 3, 1]), dtype=tw.float64)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        o, s = sess.run([outs, st])
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    w = weights(w, "rnn/basic_rnn_cell")
    for b, n in enumerate([6, 3, 1]):
        h = np.zeros((1, 4))
        for t in range(n):
            h = np_basic_rnn(x[b:b + 1, t], h, w)
            np.testing.assert_allclose(o[b, t], h[0], rtol=1e-6)
        assert np.all(o[b, n:] == 0)
        np.testing.assert_allclose(s[b], h[0], rtol=1e-6)  # the state at the last valid step


def test_dynamic_rnn_time_major_initial_state_and_gradient_check():
    def fn(x, h0):
        cell = rnn_cell.GRUCell(3, kernel_initializer=tw.constant_initializer(0.3))
        outs, st = tw.nn.dynamic_rnn(cell, x, initial_state=h0, time_major=True, sequence_length=[4, 2])
        return [outs, st]
    check_input_gradients(fn, [rng().standard_normal((4, 2, 3)), rng(1).standard_normal((2, 3))])


def test_lstm_gradients_against_finite_differences():
    def fn(x):
        cell = rnn_cell.LSTMCell(3, use_peepholes=True, initializer=tw.constant_initializer(0.2))
        outs, st = tw.nn.dynamic_rnn(cell, x, dtype=tw.float64, parallel_iterations=4)
        return [outs, st.c]
    check_input_gradients(fn, [rng().standard_normal((2, 4, 3))])


def test_bidirectional_dynamic_and_static_agree_with_lengths():
    x = tw.placeholder(tw.float64, [2, 4, 3])
    fw, bw = rnn_cell.BasicRNNCell(2), rnn_cell.GRUCell(2)
    (ofw, obw), (sfw, sbw) = tw.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=[4, 3], dtype=tw.float64)
    outs, s2fw, s2bw = tw.nn.static_bidirectional_rnn(fw, bw, tw.unstack(x, axis=1), dtype=tw.float64,
                                                      sequence_length=[4, 3])
    names = sorted(v.op.name for v in tw.global_variables())
    assert names == ["bidirectional_rnn/bw/gru_cell/candidate/bias", "bidirectional_rnn/bw/gru_cell/candidate/kernel",
                     "bidirectional_rnn/bw/gru_cell/gates/bias", "bidirectional_rnn/bw/gru_cell/gates/kernel",
                     "bidirectional_rnn/fw/basic_rnn_cell/bias", "bidirectional_rnn/fw/basic_rnn_cell/kernel"]
    xv = rng().standard_normal((2, 4, 3))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        a_fw, a_bw, a_sbw, b, b_sbw = sess.run([ofw, obw, sbw, tw.stack(outs, 1), s2bw], {x: xv})
        w = {v.op.name: sess.run(v) for v in tw.global_variables()}
    np.testing.assert_allclose(b, np.concatenate([a_fw, a_bw], 2), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(a_sbw, b_sbw, rtol=1e-6, atol=1e-9)
    # the backward cell reads each sequence from its last valid step
    wb = weights(w, "bidirectional_rnn/bw/gru_cell")
    h = np.zeros((1, 2))
    for t in (2, 1, 0):
        h = np_gru(xv[1:2, t], h, wb)
        np.testing.assert_allclose(a_bw[1, t], h[0], rtol=1e-6)
    assert np.all(a_bw[1, 3] == 0)


# ----------------------------------------------------------------------------------------
# bad input
def test_bad_input():
    cell = rnn_cell.BasicLSTMCell(3)
    x = tw.placeholder(tw.float32, [2, 5, 4])
    with pytest.raises(errors.InvalidArgumentError, match=r"dynamic_rnn: initial_state must have the structure "
                                                          r"of the cell's state_size LSTMStateTuple\(3, 3\)"):
        tw.nn.dynamic_rnn(cell, x, initial_state=tw.zeros([2, 3]))
    with pytest.raises(errors.InvalidArgumentError, match=r"dynamic_rnn: inputs must have rank >= 3"):
        tw.nn.dynamic_rnn(cell, tw.zeros([2, 4]), dtype=tw.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"static_rnn: each input must have rank 2"):
        tw.nn.static_rnn(cell, [tw.zeros([2, 4, 1])], dtype=tw.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"without initial_state a dtype is required"):
        tw.nn.dynamic_rnn(cell, x)
    with pytest.raises(errors.InvalidArgumentError, match=r"sequence_length has a value 7 larger than the number "
                                                          r"of time steps 5"):
        tw.nn.dynamic_rnn(cell, x, sequence_length=[7, 2], dtype=tw.float32)
    with pytest.raises(errors.InvalidArgumentError, match="initial_state part .* has shape"):
        tw.nn.dynamic_rnn(rnn_cell.GRUCell(3), x, initial_state=tw.zeros([2, 4]))


def test_sequence_length_too_long_at_run_time():
    x = tw.placeholder(tw.float32, [2, None, 3])
    lengths = tw.placeholder(tw.int32, [2])
    outs, _ = tw.nn.dynamic_rnn(rnn_cell.BasicRNNCell(2), x, sequence_length=lengths, dtype=tw.float32)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        assert sess.run(outs, {x: np.ones((2, 4, 3)), lengths: [4, 1]}).shape == (2, 4, 2)
        with pytest.raises(errors.InvalidArgumentError, match="sequence_length has a value larger than the number "
                                                              "of time steps"):
            sess.run(outs, {x: np.ones((2, 4, 3)), lengths: [5, 1]})


# ----------------------------------------------------------------------------------------
# learning
def test_small_lstm_learns_to_count_ones():
    """Predict at each step whether the number of 1s seen so far is odd (parity)."""
    r = rng(7)
    data = r.integers(0, 2, size=(64, 6)).astype(np.float32)
    target = (np.cumsum(data, 1) % 2).astype(np.float32)
    x = tw.placeholder(tw.float32, [None, 6, 1])
    y = tw.placeholder(tw.float32, [None, 6])
    with tw.variable_scope("model", initializer=tw.random_uniform_initializer(-0.3, 0.3, seed=1)):
        outs, _ = tw.nn.dynamic_rnn(rnn_cell.BasicLSTMCell(16), x, dtype=tw.float32)
        w = tw.get_variable("w", [16, 1])
        b = tw.get_variable("b", [1], initializer=tw.zeros_initializer())
    logits = tw.reshape(tw.matmul(tw.reshape(outs, [-1, 16]), w) + b, [-1, 6])
    loss = tw.reduce_mean(tw.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
    train = tw.train.AdamOptimizer(0.03).minimize(loss)
    feed = {x: data[..., None], y: target}
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        first = sess.run(loss, feed)
        for _ in range(250):
            last, _ = sess.run([loss, train], feed)
        acc = np.mean((sess.run(logits, feed) > 0) == (target > 0.5))
    assert last < 0.3 * first and acc > 0.95, (first, last, acc)


def test_cells_made_with_reuse_true_share_the_first_models_variables():
    """The PTB tutorial's pattern: a training model, then an evaluation model whose cells are
    made with ``reuse=True`` under a reusing scope: the same variables, the same outputs."""
    x = tw.placeholder(tw.float32, [2, 5, 3])

    def model(reuse):
        cell = rnn_cell.MultiRNNCell([rnn_cell.BasicLSTMCell(4, reuse=reuse) for _ in range(2)])
        return tw.nn.dynamic_rnn(cell, x, dtype=tw.float32)[0]
    with tw.variable_scope("Model", reuse=None, initializer=tw.random_uniform_initializer(-0.5, 0.5, seed=3)):
        train_out = model(None)
    n_vars = len(tw.global_variables())
    with tw.variable_scope("Model", reuse=True):
        eval_out = model(True)
    assert len(tw.global_variables()) == n_vars == 4
    assert {v.name for v in tw.global_variables()} >= {"Model/rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel:0"}
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        a, b = sess.run([train_out, eval_out], {x: rng(1).normal(size=(2, 5, 3))})
    np.testing.assert_array_equal(a, b)
