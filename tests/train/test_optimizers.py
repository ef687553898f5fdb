"""tw.train optimizers: updates equal NumPy implementations of TensorFlow's formulas, slots,
global step, var_list, learning-rate tensors and bad input."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors

X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.25]])
Y = np.array([[1.0], [-2.0], [0.5]])
W0 = np.array([[0.3], [-0.7]])
B0 = np.array([0.2])


def _model(dtype=tw.float64):
    """loss = sum((X w + b - Y)^2) with float64 variables w, b."""
    w = tw.Variable(W0.astype(dtype.np_dtype), name="w")
    b = tw.Variable(B0.astype(dtype.np_dtype), name="b")
    pred = tw.matmul(tw.constant(X.astype(dtype.np_dtype)), w) + b
    loss = tw.reduce_sum(tw.square(pred - tw.constant(Y.astype(dtype.np_dtype))))
    return w, b, loss


def _np_grads(p):
    r = X @ p["w"] + p["b"] - Y
    return {"w": 2 * X.T @ r, "b": 2 * r.sum(axis=0)}


def _np_loss(p):
    return float(np.sum((X @ p["w"] + p["b"] - Y) ** 2))


# NumPy references of TensorFlow's update formulas: (init_state(var), update(var, g, state, t)).
def _gd(lr):
    return lambda v: {}, lambda v, g, s, t: v - lr * g


def _momentum(lr, mu, nesterov=False):
    def update(v, g, s, t):
        s["a"] = s["a"] * mu + g
        return v - (g * lr + s["a"] * mu * lr) if nesterov else v - lr * s["a"]
    return lambda v: {"a": np.zeros_like(v)}, update


def _adagrad(lr, init):
    def update(v, g, s, t):
        s["a"] = s["a"] + g * g
        return v - lr * g / np.sqrt(s["a"])
    return lambda v: {"a": np.full_like(v, init)}, update


def _adam(lr, b1, b2, eps):
    def update(v, g, s, t):
        lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        s["m"] = s["m"] + (g - s["m"]) * (1 - b1)
        s["v"] = s["v"] + (g * g - s["v"]) * (1 - b2)
        return v - s["m"] * lr_t / (np.sqrt(s["v"]) + eps)
    return lambda v: {"m": np.zeros_like(v), "v": np.zeros_like(v)}, update


def _rmsprop(lr, rho, mu, eps):
    def update(v, g, s, t):
        s["ms"] = s["ms"] + (g * g - s["ms"]) * (1 - rho)
        s["mom"] = s["mom"] * mu + lr * g / np.sqrt(s["ms"] + eps)
        return v - s["mom"]
    return lambda v: {"ms": np.ones_like(v), "mom": np.zeros_like(v)}, update


CASES = {
    "gd": (lambda: tw.train.GradientDescentOptimizer(0.05), _gd(0.05)),
    "momentum": (lambda: tw.train.MomentumOptimizer(0.02, 0.9), _momentum(0.02, 0.9)),
    "nesterov": (lambda: tw.train.MomentumOptimizer(0.02, 0.9, use_nesterov=True), _momentum(0.02, 0.9, True)),
    "adagrad": (lambda: tw.train.AdagradOptimizer(0.3), _adagrad(0.3, 0.1)),
    "adagrad_init": (lambda: tw.train.AdagradOptimizer(0.3, initial_accumulator_value=2.0), _adagrad(0.3, 2.0)),
    "adam": (lambda: tw.train.AdamOptimizer(0.1), _adam(0.1, 0.9, 0.999, 1e-8)),
    "adam_params": (lambda: tw.train.AdamOptimizer(0.05, beta1=0.8, beta2=0.99, epsilon=1e-3),
                    _adam(0.05, 0.8, 0.99, 1e-3)),
    "rmsprop": (lambda: tw.train.RMSPropOptimizer(0.01), _rmsprop(0.01, 0.9, 0.0, 1e-10)),
    "rmsprop_momentum": (lambda: tw.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.5, epsilon=1e-6),
                         _rmsprop(0.01, 0.8, 0.5, 1e-6)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_match_numpy_reference(case):
    make_opt, (init_state, update) = CASES[case]
    w, b, loss = _model()
    train = make_opt().minimize(loss)
    params = {"w": W0.copy(), "b": B0.copy()}
    state = {k: init_state(v) for k, v in params.items()}
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        for t in range(1, 4):
            assert s.run(loss) == pytest.approx(_np_loss(params), rel=1e-12)
            grads = _np_grads(params)
            params = {k: update(params[k], grads[k], state[k], t) for k in params}
            s.run(train)
            got_w, got_b = s.run([w, b])
            np.testing.assert_allclose(got_w, params["w"], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got_b, params["b"], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", sorted(CASES))
def test_zero_learning_rate_changes_nothing(case):
    """Whitepaper section 6, lesson 3: with learning rate 0 neither the variables nor the
    loss may change from step to step."""
    w, b, loss = _model()
    lr = tw.placeholder(tw.float64, [], name="lr")
    make = {
        "gd": lambda: tw.train.GradientDescentOptimizer(lr),
        "momentum": lambda: tw.train.MomentumOptimizer(lr, 0.9),
        "nesterov": lambda: tw.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
        "adagrad": lambda: tw.train.AdagradOptimizer(lr),
        "adagrad_init": lambda: tw.train.AdagradOptimizer(lr, initial_accumulator_value=2.0),
        "adam": lambda: tw.train.AdamOptimizer(lr),
        "adam_params": lambda: tw.train.AdamOptimizer(lr, beta1=0.8, beta2=0.99, epsilon=1e-3),
        "rmsprop": lambda: tw.train.RMSPropOptimizer(lr),
        "rmsprop_momentum": lambda: tw.train.RMSPropOptimizer(lr, momentum=0.5),
    }[case]
    train = make().minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        first = s.run(loss)
        for _ in range(3):
            s.run(train, {lr: 0.0})
            assert s.run(loss) == first
            np.testing.assert_array_equal(s.run(w), W0)
            np.testing.assert_array_equal(s.run(b), B0)
        s.run(train, {lr: 0.01})
        assert s.run(loss) != first  # the same op does train with a nonzero rate


def test_gradient_descent_converges_on_a_quadratic():
    target = np.array([3.0, -1.0, 0.5], np.float32)
    v = tw.Variable(np.zeros(3, np.float32), name="v")
    loss = tw.reduce_sum(tw.square(v - target))
    train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        losses = []
        for _ in range(100):
            _, l_ = s.run([train, loss])
            losses.append(l_)
        np.testing.assert_allclose(s.run(v), target, atol=1e-5)
        assert s.run(loss) < 1e-9
        assert all(b <= a for a, b in zip(losses, losses[1:]))


def test_float32_model_trains_with_float_hyperparameters():
    w, b, loss = _model(tw.float32)
    train = tw.train.AdamOptimizer(0.05).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        start = s.run(loss)
        for _ in range(50):
            s.run(train)
        assert s.run(w).dtype == np.float32
        assert s.run(loss) < 0.5 * start


def test_global_step_increments_once_per_step():
    w, b, loss = _model()
    step = tw.train.get_or_create_global_step()
    assert step.name == "global_step:0" and step.dtype is tw.int64 and not step.trainable
    train = tw.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
    assert isinstance(train, tw.Operation) and train.name == "Momentum"
    assert train in tw.get_collection(tw.GraphKeys.TRAIN_OP)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        assert s.run(step) == 0
        for i in range(1, 4):
            s.run(train)
            assert s.run(step) == i
            assert tw.train.global_step(s, step) == i


def test_global_step_runs_after_the_updates():
    """The increment depends on the update group, so a step that fails in an update does not
    count."""
    v = tw.Variable(np.zeros(2), name="v")
    g = tw.placeholder(tw.float64, None, name="g")
    step = tw.train.get_or_create_global_step()
    train = tw.train.GradientDescentOptimizer(0.1).apply_gradients([(g, v)], global_step=step)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        with pytest.raises(errors.InvalidArgumentError):
            s.run(train, {g: np.ones(5)})
        assert s.run(step) == 0
        s.run(train, {g: np.ones(2)})
        assert s.run(step) == 1


def test_global_step_helpers():
    assert tw.train.get_global_step() is None
    step = tw.train.create_global_step()
    assert tw.train.get_global_step() is step
    assert tw.train.get_or_create_global_step() is step
    assert tw.get_collection(tw.GraphKeys.GLOBAL_STEP) == [step]
    assert step in tw.global_variables() and step not in tw.trainable_variables()
    with pytest.raises(errors.InvalidArgumentError, match="already exists"):
        tw.train.create_global_step()
    g = tw.Graph()
    with g.as_default():
        assert tw.train.get_global_step() is None
    other = tw.train.get_or_create_global_step(g)
    assert other.graph is g and tw.train.get_global_step(g) is other


def test_global_step_created_inside_scopes_is_still_global_step():
    with tw.variable_scope("model"), tw.name_scope("inner"):
        step = tw.train.get_or_create_global_step()
    assert step.name == "global_step:0"


def test_bad_global_step():
    w, b, loss = _model()
    with pytest.raises(errors.InvalidArgumentError, match="integer"):
        tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tw.Variable(0.0, name="fstep"))
    with pytest.raises(errors.InvalidArgumentError, match="must be a variable"):
        tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tw.constant(0, tw.int64))


def test_var_list_restricts_the_update():
    w, b, loss = _model()
    train = tw.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[w])
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train)
        assert not np.array_equal(s.run(w), W0)
        np.testing.assert_array_equal(s.run(b), B0)


def test_non_trainable_variables_are_left_alone_by_default():
    w = tw.Variable(np.ones(2), name="w")
    frozen = tw.Variable(np.ones(2), name="frozen", trainable=False)
    loss = tw.reduce_sum(tw.square(w * frozen))
    opt = tw.train.GradientDescentOptimizer(0.1)
    gv = opt.compute_gradients(loss)
    assert [v for _, v in gv] == [w]
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(opt.apply_gradients(gv))
        np.testing.assert_allclose(s.run(w), [0.8, 0.8])
        np.testing.assert_array_equal(s.run(frozen), [1.0, 1.0])


def test_compute_gradients_returns_none_for_unconnected_and_apply_skips_it():
    w, b, loss = _model()
    unused = tw.Variable(np.ones(3), name="unused")
    opt = tw.train.MomentumOptimizer(0.01, 0.9)
    gv = opt.compute_gradients(loss)
    assert [v.name for _, v in gv] == ["w:0", "b:0", "unused:0"]
    assert gv[2][0] is None and gv[0][0] is not None
    train = opt.apply_gradients(gv)
    assert opt.get_slot(unused, "momentum") is None  # no slot for a variable without gradient
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train)
        np.testing.assert_array_equal(s.run(unused), np.ones(3))


def test_apply_gradients_with_all_none_names_the_variables():
    w, b, loss = _model()
    opt = tw.train.GradientDescentOptimizer(0.1)
    with pytest.raises(errors.InvalidArgumentError, match=r"No gradients provided for any variable.*'w:0', 'b:0'"):
        opt.apply_gradients([(None, w), (None, b)])
    other = tw.Variable(1.0, name="other")
    with pytest.raises(errors.InvalidArgumentError, match=r"No gradients provided.*other:0.*loss"):
        opt.minimize(loss, var_list=[other])


def test_non_variable_in_var_list_is_named():
    w, b, loss = _model()
    t = tw.identity(w, name="not_a_var")
    with pytest.raises(errors.InvalidArgumentError, match="not_a_var.*not a tw.Variable"):
        tw.train.AdamOptimizer().minimize(loss, var_list=[w, t])
    with pytest.raises(errors.InvalidArgumentError, match="not_a_var.*not a tw.Variable"):
        tw.train.GradientDescentOptimizer(0.1).apply_gradients([(tw.ones([2, 1], tw.float64), t)])
    with pytest.raises(errors.InvalidArgumentError, match="'hello'"):
        tw.train.GradientDescentOptimizer(0.1).compute_gradients(loss, var_list=["hello"])


def test_non_float_loss_is_a_clear_error():
    v = tw.Variable(np.ones(2), name="v")
    int_loss = tw.cast(tw.reduce_sum(v), tw.int32)
    with pytest.raises(errors.InvalidArgumentError, match="loss .* int32.*floating-point"):
        tw.train.GradientDescentOptimizer(0.1).minimize(int_loss)


def test_no_variables_to_optimize():
    loss = tw.reduce_sum(tw.square(tw.constant([1.0, 2.0])))
    with pytest.raises(errors.InvalidArgumentError, match="no variables to optimize"):
        tw.train.GradientDescentOptimizer(0.1).minimize(loss)


def test_gradient_dtype_and_shape_mismatch_in_apply_gradients():
    v = tw.Variable(np.ones(2), name="v")
    opt = tw.train.GradientDescentOptimizer(0.1)
    with pytest.raises(errors.InvalidArgumentError, match="dtype float32 but variable 'v:0' has dtype float64"):
        opt.apply_gradients([(tw.constant([1.0, 2.0], tw.float32), v)])
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        opt.apply_gradients([(tw.constant([1.0, 2.0, 3.0], tw.float64), v)])


def test_bad_gate_gradients_and_bad_hyperparameters():
    w, b, loss = _model()
    with pytest.raises(errors.InvalidArgumentError, match="gate_gradients"):
        tw.train.GradientDescentOptimizer(0.1).minimize(loss, gate_gradients=7)
    with pytest.raises(errors.InvalidArgumentError, match="initial_accumulator_value must be positive"):
        tw.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0)
    with pytest.raises(errors.InvalidArgumentError, match="learning_rate must be a scalar"):
        tw.train.GradientDescentOptimizer(tw.constant([0.1, 0.2])).minimize(loss)


@pytest.mark.parametrize("gate", [tw.train.Optimizer.GATE_NONE, tw.train.Optimizer.GATE_OP,
                                  tw.train.Optimizer.GATE_GRAPH])
def test_gate_gradients_modes_give_the_same_result(gate):
    w, b, loss = _model()
    train = tw.train.GradientDescentOptimizer(0.05).minimize(loss, gate_gradients=gate)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train)
        p = {"w": W0, "b": B0}
        g = _np_grads(p)
        np.testing.assert_allclose(s.run(w), W0 - 0.05 * g["w"], rtol=1e-12)


def test_learning_rate_placeholder_of_another_dtype_is_cast():
    w, b, loss = _model()
    lr = tw.placeholder(tw.float32, [], name="lr")
    train = tw.train.GradientDescentOptimizer(lr).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train, {lr: 0.5})
        g = _np_grads({"w": W0, "b": B0})
        np.testing.assert_allclose(s.run(w), W0 - 0.5 * g["w"], rtol=1e-12)


def test_callable_learning_rate():
    w, b, loss = _model()
    train = tw.train.GradientDescentOptimizer(lambda: 0.25).minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train)
        g = _np_grads({"w": W0, "b": B0})
        np.testing.assert_allclose(s.run(w), W0 - 0.25 * g["w"], rtol=1e-12)


def test_grad_loss_scales_the_gradient():
    w, b, loss = _model()
    train = tw.train.GradientDescentOptimizer(0.05).minimize(loss, grad_loss=tw.constant(2.0, tw.float64))
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        s.run(train)
        g = _np_grads({"w": W0, "b": B0})
        np.testing.assert_allclose(s.run(w), W0 - 0.1 * g["w"], rtol=1e-12)


# ------------------------------------------------------------------------------------
# slots
def test_slot_names_and_variables():
    w, b, loss = _model()
    cases = [
        (tw.train.MomentumOptimizer(0.1, 0.9), {"momentum": "Momentum"}),
        (tw.train.AdagradOptimizer(0.1), {"accumulator": "Adagrad"}),
        (tw.train.AdamOptimizer(), {"m": "Adam", "v": "Adam_1"}),
        (tw.train.RMSPropOptimizer(0.1), {"rms": "RMSProp", "momentum": "RMSProp_1"}),
    ]
    for opt, names in cases:
        opt.minimize(loss)
        assert opt.get_slot_names() == sorted(names)
        for slot, suffix in names.items():
            for var in (w, b):
                sv = opt.get_slot(var, slot)
                assert sv.name == f"{var.op.name}/{suffix}:0"
                assert sv.shape == var.shape and sv.dtype is var.dtype
                assert not sv.trainable and sv in tw.global_variables()
        assert opt.get_slot(w, "nonexistent") is None
    assert tw.train.GradientDescentOptimizer(0.1).get_slot_names() == []
    assert sorted(v.name for v in tw.trainable_variables()) == ["b:0", "w:0"]


def test_slot_initial_values():
    w, b, loss = _model()
    mom, ada, adam, rms = (tw.train.MomentumOptimizer(0.1, 0.9), tw.train.AdagradOptimizer(0.1, 0.3),
                           tw.train.AdamOptimizer(beta1=0.8, beta2=0.95), tw.train.RMSPropOptimizer(0.1))
    for opt in (mom, ada, adam, rms):
        opt.minimize(loss)
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        np.testing.assert_array_equal(s.run(mom.get_slot(w, "momentum")), np.zeros((2, 1)))
        np.testing.assert_array_equal(s.run(ada.get_slot(w, "accumulator")), np.full((2, 1), 0.3))
        np.testing.assert_array_equal(s.run(adam.get_slot(b, "m")), np.zeros(1))
        np.testing.assert_array_equal(s.run(adam.get_slot(b, "v")), np.zeros(1))
        np.testing.assert_array_equal(s.run(rms.get_slot(w, "rms")), np.ones((2, 1)))
        np.testing.assert_array_equal(s.run(rms.get_slot(w, "momentum")), np.zeros((2, 1)))
        b1p, b2p = adam._get_beta_accumulators()
        assert (b1p.name, b2p.name) == ("beta1_power:0", "beta2_power:0")
        assert s.run([b1p, b2p]) == [pytest.approx(0.8), pytest.approx(0.95)]


def test_adam_beta_powers_advance_once_per_step():
    w, b, loss = _model()
    opt = tw.train.AdamOptimizer(0.01)
    train = opt.minimize(loss)
    assert [v.name for v in opt.variables()] == ["b/Adam:0", "b/Adam_1:0", "beta1_power:0", "beta2_power:0",
                                                  "w/Adam:0", "w/Adam_1:0"]
    b1p, b2p = opt._get_beta_accumulators()
    assert b1p.dtype is tw.float64 and not b1p.trainable
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        for t in range(1, 4):
            s.run(train)
            np.testing.assert_allclose(s.run([b1p, b2p]), [0.9 ** (t + 1), 0.999 ** (t + 1)], rtol=1e-14)


def test_minimize_twice_reuses_slots_and_names_ops_uniquely():
    w, b, loss = _model()
    opt = tw.train.MomentumOptimizer(0.1, 0.9)
    t1 = opt.minimize(loss)
    slot = opt.get_slot(w, "momentum")
    t2 = opt.minimize(loss)
    assert opt.get_slot(w, "momentum") is slot
    assert (t1.name, t2.name) == ("Momentum", "Momentum_1")


def test_two_optimizers_get_distinct_slots():
    w, b, loss = _model()
    a1, a2 = tw.train.AdamOptimizer(), tw.train.AdamOptimizer()
    a1.minimize(loss)
    a2.minimize(loss)
    names = {a1.get_slot(w, "m").name, a1.get_slot(w, "v").name, a2.get_slot(w, "m").name, a2.get_slot(w, "v").name}
    assert names == {"w/Adam:0", "w/Adam_1:0", "w/Adam_2:0", "w/Adam_3:0"}


def test_slots_ignore_the_callers_scopes():
    w, b, loss = _model()
    with tw.name_scope("training"), tw.control_dependencies([tw.no_op(name="gate")]):
        opt = tw.train.MomentumOptimizer(0.1, 0.9)
        train = opt.minimize(loss, name="step")
    assert train.name == "training/step"
    slot = opt.get_slot(w, "momentum")
    assert slot.name == "w/Momentum:0" and not slot.initializer.control_inputs


def test_optimizer_name_is_required():
    with pytest.raises(errors.InvalidArgumentError, match="name"):
        tw.train.GradientDescentOptimizer(0.1, name="")
    assert tw.train.AdamOptimizer(name="MyAdam").get_name() == "MyAdam"


def test_training_a_variable_from_get_variable_in_a_scope():
    with tw.variable_scope("layer"):
        w = tw.get_variable("w", [3], dtype=tw.float64, initializer=tw.zeros_initializer())
    loss = tw.reduce_sum(tw.square(w - tw.constant([1.0, 2.0, 3.0], tw.float64)))
    opt = tw.train.AdamOptimizer(0.1)
    train = opt.minimize(loss)
    assert opt.get_slot(w, "m").name == "layer/w/Adam:0"
    with tw.Session() as s:
        s.run(tw.global_variables_initializer())
        for _ in range(200):
            s.run(train)
        np.testing.assert_allclose(s.run(w), [1.0, 2.0, 3.0], atol=0.05)
