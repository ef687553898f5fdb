"""``lstm``: one training step of the PTB tutorial's word-level LSTM language model
(``examples/lstm_lm.py``): 2 layers of ``BasicLSTMCell(200)`` (forget bias 0) run by
``dynamic_rnn`` over 35 words, batch 32, an embedding table and a full softmax over a
vocabulary of 10^4 words, the cost summed over the steps and averaged over the batch,
gradients clipped by global norm 5, plain SGD. The LSTM state is fed in and the final state
fetched with the loss, as truncated BPTT does every step.

Written as TF1 users write it: ``[None, 35]`` id placeholders (the batch size comes from
the feed, the zero state from ``tw.shape``); the variant with every shape static
(``[32, 35]``) is kept beside it. TensorFlow runs the same graph through ``tf.compat.v1``
(``nn.dynamic_rnn``; its ``nn.rnn_cell.BasicLSTMCell`` is gone with Keras 3, so the cell is
the same math written out with ``tf.compat.v1`` ops), JAX a ``jax.jit`` of the step with
``lax.scan`` over time, when installed. All start from the same weights and data, and the
check compares the first loss and final state with TensorFlow's.

There is no hand-written NumPy step (backpropagation through time by hand would measure
that code, not NumPy): the ratios are to TensorFlow. Most of the floating-point work is the
softmax's: about 13.4 of the step's 17.7 GFLOP (the LSTM's matrix products 4.3).
"""

from __future__ import annotations

import collections

import numpy as np

from workloads import peers
from workloads.base import Workload

NAME = "lstm"
BATCH, STEPS, HIDDEN, LAYERS, VOCAB = 32, 35, 200, 2, 10_000
LR, MAX_GRAD_NORM, INIT_SCALE = 1.0, 5.0, 0.1
LSTMStateTuple = collections.namedtuple("LSTMStateTuple", ("c", "h"))  # TF's own went with its Keras 2 cells


def _init():
    """Initial weights (the tutorial's uniform(-0.1, 0.1), biases zero) and one batch."""
    rng = np.random.default_rng(0)

    def u(*shape):
        return rng.uniform(-INIT_SCALE, INIT_SCALE, shape).astype(np.float32)
    p = {"embedding": u(VOCAB, HIDDEN), "softmax_w": u(HIDDEN, VOCAB), "softmax_b": np.zeros(VOCAB, np.float32)}
    for i in range(LAYERS):
        p[f"kernel_{i}"] = u(2 * HIDDEN, 4 * HIDDEN)   # [input + h, gates i, j, f, o]
        p[f"bias_{i}"] = np.zeros(4 * HIDDEN, np.float32)
    ids = rng.integers(0, VOCAB, (BATCH, STEPS + 1)).astype(np.int32)
    state = [(np.zeros((BATCH, HIDDEN), np.float32), np.zeros((BATCH, HIDDEN), np.float32))] * LAYERS
    return p, ids[:, :-1], ids[:, 1:], state


def _tw_step(p0, x_v, y_v, state_v, batch):
    """A session and its step: the example's model, built with TF1's names."""
    import tensorweave as tw

    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.int32, [batch, STEPS], name="inputs")
        y = tw.placeholder(tw.int32, [batch, STEPS], name="targets")
        with tw.variable_scope("model", initializer=tw.random_uniform_initializer(-INIT_SCALE, INIT_SCALE)):
            embedding = tw.get_variable("embedding", [VOCAB, HIDDEN])
            cell = tw.nn.rnn_cell.MultiRNNCell(
                [tw.nn.rnn_cell.BasicLSTMCell(HIDDEN, forget_bias=0.0) for _ in range(LAYERS)])
            initial_state = cell.zero_state(batch if batch is not None else tw.shape(x)[0], tw.float32)
            outputs, final_state = tw.nn.dynamic_rnn(cell, tw.nn.embedding_lookup(embedding, x),
                                                     initial_state=initial_state)
            softmax_w = tw.get_variable("softmax_w", [HIDDEN, VOCAB])
            softmax_b = tw.get_variable("softmax_b", [VOCAB], initializer=tw.zeros_initializer())
            logits = tw.matmul(tw.reshape(outputs, [-1, HIDDEN]), softmax_w) + softmax_b
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tw.reshape(y, [-1]), logits=logits))
            tvars = tw.trainable_variables()
            grads, _ = tw.clip_by_global_norm(tw.gradients(loss * STEPS, tvars), MAX_GRAD_NORM)
            train = tw.train.GradientDescentOptimizer(LR).apply_gradients(zip(grads, tvars))
        init = tw.global_variables_initializer()
    sess = tw.Session(graph=g, config=tw.ConfigProto(device_count={"OPENCL": 0}))
    sess.run(init)
    names = {"model/embedding": "embedding", "model/softmax_w": "softmax_w", "model/softmax_b": "softmax_b"}
    for i in range(LAYERS):
        names[f"model/rnn/multi_rnn_cell/cell_{i}/basic_lstm_cell/kernel"] = f"kernel_{i}"
        names[f"model/rnn/multi_rnn_cell/cell_{i}/basic_lstm_cell/bias"] = f"bias_{i}"
    for v in tvars:
        v.load(p0[names[v.op.name]], sess)
    feed = {x: x_v, y: y_v}
    for (c, h), (c_v, h_v) in zip(initial_state, state_v):
        feed[c], feed[h] = c_v, h_v
    fetches = [loss, final_state, train]
    return sess, (lambda: sess.run(fetches, feed)), (lambda: sess.run([loss, final_state], feed))


class _TFLSTMCell:
    """``BasicLSTMCell(HIDDEN, forget_bias=0)`` for ``tf.compat.v1.nn.dynamic_rnn``: the same
    gates (i, j, f, o from one matmul of [inputs, h]) with the weights given."""

    def __init__(self, v1, kernel, bias):
        self.v1, self.kernel, self.bias = v1, kernel, bias

    state_size = LSTMStateTuple(HIDDEN, HIDDEN)
    output_size = HIDDEN

    def zero_state(self, batch_size, dtype):
        z = self.v1.zeros(self.v1.stack([batch_size, HIDDEN]), dtype)
        return LSTMStateTuple(z, z)

    def __call__(self, inputs, state, scope=None):
        v1 = self.v1
        c, h = state
        i, j, f, o = v1.split(v1.nn.bias_add(v1.matmul(v1.concat([inputs, h], 1), self.kernel), self.bias), 4, axis=1)
        new_c = c * v1.sigmoid(f) + v1.sigmoid(i) * v1.tanh(j)
        new_h = v1.tanh(new_c) * v1.sigmoid(o)
        return new_h, LSTMStateTuple(new_c, new_h)


class _TFMultiCell:
    """``MultiRNNCell`` of ``_TFLSTMCell``s."""

    def __init__(self, cells):
        self.cells = cells

    state_size = property(lambda self: tuple(c.state_size for c in self.cells))
    output_size = HIDDEN

    def zero_state(self, batch_size, dtype):
        return tuple(c.zero_state(batch_size, dtype) for c in self.cells)

    def __call__(self, inputs, state, scope=None):
        out, new = inputs, []
        for cell, s in zip(self.cells, state):
            out, s = cell(out, s)
            new.append(s)
        return out, tuple(new)


def _tf_step(v1, p0, x_v, y_v, state_v):
    def graph():
        x = v1.placeholder(v1.int32, [None, STEPS])
        y = v1.placeholder(v1.int32, [None, STEPS])
        var = {k: v1.get_variable(k, initializer=v) for k, v in p0.items()}
        cell = _TFMultiCell([_TFLSTMCell(v1, var[f"kernel_{i}"], var[f"bias_{i}"]) for i in range(LAYERS)])
        initial_state = cell.zero_state(v1.shape(x)[0], v1.float32)
        outputs, final_state = v1.nn.dynamic_rnn(cell, v1.nn.embedding_lookup(var["embedding"], x),
                                                 initial_state=initial_state)
        logits = v1.matmul(v1.reshape(outputs, [-1, HIDDEN]), var["softmax_w"]) + var["softmax_b"]
        loss = v1.reduce_mean(v1.nn.sparse_softmax_cross_entropy_with_logits(labels=v1.reshape(y, [-1]),
                                                                              logits=logits))
        tvars = list(var.values())
        grads, _ = v1.clip_by_global_norm(v1.gradients(loss * STEPS, tvars), MAX_GRAD_NORM)
        train = v1.train.GradientDescentOptimizer(LR).apply_gradients(zip(grads, tvars))
        return x, y, initial_state, final_state, loss, train
    sess, (x, y, initial_state, final_state, loss, train) = peers.tf_session(v1, graph)
    feed = {x: x_v, y: y_v}
    for (c, h), (c_v, h_v) in zip(initial_state, state_v):
        feed[c], feed[h] = c_v, h_v
    fetches = [loss, final_state, train]
    return sess, (lambda: sess.run(fetches, feed)), (lambda: sess.run([loss, final_state], feed))


def _jax_step(jax, jnp, p0, x_v, y_v, state_v):
    def forward(p, x, y, state):
        def step(carry, xt):
            new, inp = [], xt
            for i, (c, h) in enumerate(carry):
                gates = jnp.concatenate([inp, h], 1) @ p[f"kernel_{i}"] + p[f"bias_{i}"]
                gi, gj, gf, go = jnp.split(gates, 4, axis=1)
                c = c * jax.nn.sigmoid(gf) + jax.nn.sigmoid(gi) * jnp.tanh(gj)
                h = jnp.tanh(c) * jax.nn.sigmoid(go)
                new.append((c, h))
                inp = h
            return tuple(new), inp
        final, outs = jax.lax.scan(step, state, jnp.swapaxes(p["embedding"][x], 0, 1))  # time major
        logits = jnp.swapaxes(outs, 0, 1).reshape(-1, HIDDEN) @ p["softmax_w"] + p["softmax_b"]
        logp = jax.nn.log_softmax(logits)
        loss = -jnp.mean(jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1))
        return loss * STEPS, (loss, final)

    @jax.jit
    def sgd(p, x, y, state):
        grads, (loss, final) = jax.grad(forward, has_aux=True)(p, x, y, state)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        scale = MAX_GRAD_NORM / jnp.maximum(norm, MAX_GRAD_NORM)
        return jax.tree_util.tree_map(lambda v, g: v - LR * scale * g, p, grads), loss, final

    s = {"p": {k: jnp.asarray(v) for k, v in p0.items()}}
    jx, jy = jnp.asarray(x_v), jnp.asarray(y_v)
    jstate = tuple((jnp.asarray(c), jnp.asarray(h)) for c, h in state_v)

    def step():
        s["p"], loss, _ = sgd(s["p"], jx, jy, jstate)
        loss.block_until_ready()
    return step


def build() -> Workload:
    p0, x_v, y_v, state_v = _init()
    sess, tw_step, tw_first = _tw_step(p0, x_v, y_v, state_v, None)
    static_sess, static_step, _ = _tw_step(p0, x_v, y_v, state_v, BATCH)
    others = {"tensorweave (static shapes)": static_step}
    closers = [sess.close, static_sess.close]
    check = None
    v1 = peers.tf_v1()
    if v1 is not None:
        tsess, tf_step, tf_first = _tf_step(v1, p0, x_v, y_v, state_v)
        others[peers.TF_LABEL] = tf_step
        closers.append(tsess.close)

        def check():  # same weights, same batch: the same loss and final state before any step
            (loss, state), (t_loss, t_state) = tw_first(), tf_first()
            np.testing.assert_allclose(loss, t_loss, rtol=1e-4)
            for a, b in zip(_flat(state), _flat(t_state)):
                np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    jx = peers.jax()
    if jx is not None:
        others[peers.JAX_LABEL] = _jax_step(*jx, p0, x_v, y_v, state_v)
    return Workload(NAME, "2-layer LSTM(200) language model, 35 steps x batch 32, full softmax over 10^4 words, "
                          "clipped SGD; [None, 35] placeholders",
                    tw_step, None, others, check, close=lambda: [c() for c in closers])


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _flat(v)]
    return [x]

