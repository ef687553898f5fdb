"""Dense optimizer updates in place (kernels/training.py): the loops numba compiles give the
NumPy formulas' bits for every optimizer and float dtype, write into the variable's own
tensor when nothing else holds it (the executor drops the step's reads of it first), and
never into a tensor the user or a consumer still holds."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.ops import training_ops
from tensorweave_cpu import fusion, jit
from tensorweave_cpu.kernels import training

needs_numba = pytest.mark.skipif(not fusion.numba_available(), reason="numba is not installed (the fusion extra)")

OPTIMIZERS = {
    "sgd": lambda: tw.train.GradientDescentOptimizer(0.05),
    "momentum": lambda: tw.train.MomentumOptimizer(0.05, 0.9),
    "nesterov": lambda: tw.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    "adagrad": lambda: tw.train.AdagradOptimizer(0.1),
    "adam": lambda: tw.train.AdamOptimizer(0.01),
    "rmsprop": lambda: tw.train.RMSPropOptimizer(0.01),
    "rmsprop_momentum": lambda: tw.train.RMSPropOptimizer(0.01, momentum=0.5),
}
# [64, 80]: over GradientDescent's threshold for the compiled loop (4096 elements); [80]: under.
W_SHAPE, B_SHAPE = (64, 80), (80,)


def _train(name, dtype, steps=3):
    """Every variable's value (slots included) after ``steps`` training steps, by name."""
    opt = OPTIMIZERS[name]()
    rng = np.random.default_rng(5)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(dtype, [None, W_SHAPE[0]])
        w = tw.Variable(rng.standard_normal(W_SHAPE).astype(dtype), name="w")
        b = tw.Variable(rng.standard_normal(B_SHAPE).astype(dtype), name="b")
        loss = tw.reduce_sum(tw.square(tw.tanh(tw.matmul(x, w) + b)))
        train = opt.minimize(loss)
        init = tw.global_variables_initializer()
        variables = tw.global_variables()
    with tw.Session(graph=g) as sess:
        sess.run(init)
        xb = rng.standard_normal((7, W_SHAPE[0])).astype(dtype)
        for _ in range(steps):
            sess.run(train, {x: xb})
        return {v.op.name: sess.run(v) for v in variables}


def _both_paths(monkeypatch, run):
    """``run()`` by the NumPy formulas, then by the compiled loops (which must run)."""
    calls = []
    for name in ("_in_place", "_all_in_place"):  # (the latter: grouped GradientDescent updates)
        real = getattr(training, name)
        monkeypatch.setattr(training, name, lambda *a, real=real: calls.append(1) or real(*a))
    monkeypatch.setitem(jit._state, "on", False)
    by_numpy = run()
    assert not calls
    monkeypatch.setitem(jit._state, "on", True)
    compiled = run()
    assert calls, "the compiled loops did not run"
    return by_numpy, compiled


def _same_bits(by_numpy, compiled, dtype, what):
    assert by_numpy.keys() == compiled.keys()
    for k in by_numpy:
        assert by_numpy[k].dtype == compiled[k].dtype == dtype
        assert by_numpy[k].tobytes() == compiled[k].tobytes(), f"{what} {k}: not the same bits"


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_updates_give_the_formulas_bits(monkeypatch, name, dtype):
    by_numpy, compiled = _both_paths(monkeypatch, lambda: _train(name, dtype))
    _same_bits(by_numpy, compiled, dtype, name)


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_with_nesterov_gives_the_formulas_bits(monkeypatch, dtype):
    rng = np.random.default_rng(9)
    start = {k: rng.standard_normal(W_SHAPE).astype(dtype) for k in ("var", "m")}
    start["v"] = np.abs(rng.standard_normal(W_SHAPE)).astype(dtype)
    grad = rng.standard_normal(W_SHAPE).astype(dtype)

    def run():
        g = tw.Graph()
        with g.as_default():
            refs = {k: tw.Variable(v, name=k) for k, v in start.items()}
            scalars = [tw.constant(x, dtype) for x in (0.9 ** 3, 0.999 ** 3, 0.01, 0.9, 0.999, 1e-7)]
            step = training_ops.apply_adam(refs["var"], refs["m"], refs["v"], *scalars, tw.constant(grad),
                                           use_nesterov=True)
        with tw.Session(graph=g) as sess:
            sess.run(tw.global_variables_initializer())
            for _ in range(2):
                sess.run(step.op)
            return {k: sess.run(r) for k, r in refs.items()}

    by_numpy, compiled = _both_paths(monkeypatch, run)
    _same_bits(by_numpy, compiled, dtype, "adam nesterov")


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.filterwarnings("ignore:invalid value encountered", "ignore:divide by zero")
def test_a_division_by_zero_gives_the_formulas_inf_and_nan(monkeypatch, dtype):
    """Adagrad with a zero accumulator and zero gradients divides 0 by 0, RMSProp with no
    epsilon divides by sqrt(0): NaN and inf as NumPy gives them, never ZeroDivisionError
    (the loops compile with NumPy's error model)."""
    grad = np.zeros(W_SHAPE, dtype)
    grad[0, :3] = [1, -1, 0]

    def run():
        g = tw.Graph()
        with g.as_default():
            var = tw.Variable(np.ones(W_SHAPE, dtype), name="var")
            acc = tw.Variable(np.zeros(W_SHAPE, dtype), name="acc")
            ms = tw.Variable(np.zeros(W_SHAPE, dtype), name="ms")
            mom = tw.Variable(np.zeros(W_SHAPE, dtype), name="mom")
            var2 = tw.Variable(np.ones(W_SHAPE, dtype), name="var2")
            c = [tw.constant(v, dtype) for v in (0.1, 1.0, 0.0, 0.0)]  # rho 1: ms stays 0
            steps = [training_ops.apply_adagrad(var, acc, c[0], tw.constant(grad)),
                     training_ops.apply_rms_prop(var2, ms, mom, c[0], c[1], c[2], c[3], tw.constant(grad))]
        with tw.Session(graph=g) as sess:
            sess.run(tw.global_variables_initializer())
            sess.run([t.op for t in steps])
            return {k.op.name: sess.run(k) for k in (var, acc, var2, ms, mom)}

    by_numpy, compiled = _both_paths(monkeypatch, run)
    _same_bits(by_numpy, compiled, dtype, "division by zero")
    assert np.isnan(compiled["var"][0, 2]) and np.isnan(compiled["var2"][1, 0])
    assert np.isneginf(compiled["var2"][0, 0]) and np.isposinf(compiled["var2"][0, 1])


def _address(a):
    return a.__array_interface__["data"][0]


def _store(sess, name):
    return sess._resources.local.lookup("", name)


@needs_numba
@pytest.mark.parametrize("name", ["sgd", "rmsprop"])
def test_a_step_writes_into_the_variable_and_leaves_fetched_values_alone(monkeypatch, name):
    monkeypatch.setitem(jit._state, "on", True)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, W_SHAPE[0]])
        w = tw.Variable(np.full(W_SHAPE, 0.5, np.float32), name="w")
        loss = tw.reduce_sum(tw.square(tw.matmul(x, w)))  # w's read is used, then w updated
        train = OPTIMIZERS[name]().minimize(loss)
    xb = np.ones((3, W_SHAPE[0]), np.float32)
    with tw.Session(graph=g) as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(train, {x: xb})  # the first update copies the initializer's value once
        store = _store(sess, "w")
        where = _address(store.value)
        for _ in range(3):
            sess.run(train, {x: xb})
            assert _address(store.value) == where, "the variable's tensor was replaced, not updated in place"
        fetched = sess.run(w)
        kept = fetched.copy()
        sess.run(train, {x: xb})
        assert fetched.tobytes() == kept.tobytes(), "a value handed to the user changed"
        assert not np.array_equal(sess.run(w), kept)
        assert _address(store.value) != _address(fetched)  # the update copied, then wrote


@needs_numba
def test_a_value_fetched_in_the_same_step_is_the_value_before_the_update(monkeypatch):
    monkeypatch.setitem(jit._state, "on", True)
    g = tw.Graph()
    with g.as_default():
        w = tw.Variable(np.ones(W_SHAPE, np.float32), name="w")
        read = tw.identity(w)
        with tw.control_dependencies([read]):
            train = tw.train.GradientDescentOptimizer(1.0).apply_gradients(
                [(tw.ones(W_SHAPE, tw.float32), w)])
    with tw.Session(graph=g) as sess:
        sess.run(w.initializer)
        before, _ = sess.run([read, train])
        assert (before == 1).all()
        assert (sess.run(w) == 0).all()


@pytest.mark.parametrize("on", [True, False])
def test_a_gradient_of_another_shape_leaves_the_variable_unchanged(monkeypatch, on):
    if on and not fusion.numba_available():
        pytest.skip("numba is not installed (the fusion extra)")
    monkeypatch.setitem(jit._state, "on", on)
    g = tw.Graph()
    with g.as_default():
        w = tw.Variable(np.ones(W_SHAPE, np.float32), name="w")
        grad = tw.placeholder(tw.float32)
        train = tw.train.RMSPropOptimizer(0.1).apply_gradients([(grad, w)])
    with tw.Session(graph=g) as sess:
        sess.run(tw.global_variables_initializer())
        with pytest.raises(errors.InvalidArgumentError, match=r"gradient of shape \(80, 64\) does not match"):
            sess.run(train, {grad: np.ones(W_SHAPE[::-1], np.float32)})
        assert (sess.run(w) == 1).all()
        sess.run(train, {grad: np.ones(W_SHAPE, np.float32)})  # the session goes on
        assert (sess.run(w) < 1).all()
