"""The fused update ops (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam,
ApplyRMSProp): TensorFlow's formulas, construction-time and run-time checks."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.ops import training_ops

VAR = np.array([[1.0, -2.0], [0.5, 3.0]])
GRAD = np.array([[0.1, -0.3], [2.0, 0.0]])


def _vars(*values, dtype=tw.float64):
    return [tw.Variable(np.asarray(v, dtype=dtype.np_dtype), name=f"v{i}") for i, v in enumerate(values)]


def _run(update, variables):
    with tw.Session() as s:
        s.run(tw.variables_initializer(variables))
        out = s.run(update)
        return out, s.run(variables)


def test_apply_gradient_descent():
    (var,) = _vars(VAR)
    out, (new,) = _run(training_ops.apply_gradient_descent(var, np.float64(0.5), GRAD), [var])
    np.testing.assert_allclose(new, VAR - 0.5 * GRAD, rtol=1e-15)
    np.testing.assert_allclose(out, new)


@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_momentum(nesterov):
    accum0 = np.full_like(VAR, 0.25)
    var, accum = _vars(VAR, accum0)
    up = training_ops.apply_momentum(var, accum, np.float64(0.1), GRAD, np.float64(0.9), use_nesterov=nesterov)
    out, (new_var, new_acc) = _run(up, [var, accum])
    acc = accum0 * 0.9 + GRAD
    want = VAR - (GRAD * 0.1 + acc * 0.9 * 0.1) if nesterov else VAR - 0.1 * acc
    np.testing.assert_allclose(new_acc, acc, rtol=1e-15)
    np.testing.assert_allclose(new_var, want, rtol=1e-15)
    np.testing.assert_allclose(out, want, rtol=1e-15)


def test_apply_adagrad():
    var, accum = _vars(VAR, np.full_like(VAR, 0.1))
    _, (new_var, new_acc) = _run(training_ops.apply_adagrad(var, accum, np.float64(0.2), GRAD), [var, accum])
    acc = 0.1 + GRAD * GRAD
    np.testing.assert_allclose(new_acc, acc, rtol=1e-15)
    np.testing.assert_allclose(new_var, VAR - 0.2 * GRAD / np.sqrt(acc), rtol=1e-15)


@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_adam(nesterov):
    m0, v0 = np.full_like(VAR, 0.01), np.full_like(VAR, 0.02)
    var, m, v = _vars(VAR, m0, v0)
    b1p, b2p, lr, b1, b2, eps = 0.9**2, 0.999**2, 0.01, 0.9, 0.999, 1e-8
    up = training_ops.apply_adam(var, m, v, *[np.float64(x) for x in (b1p, b2p, lr, b1, b2, eps)], GRAD,
                                 use_nesterov=nesterov)
    _, (nv, nm, nvv) = _run(up, [var, m, v])
    alpha = lr * np.sqrt(1 - b2p) / (1 - b1p)
    em = m0 + (GRAD - m0) * (1 - b1)
    ev = v0 + (GRAD**2 - v0) * (1 - b2)
    if nesterov:
        want = VAR - (GRAD * (1 - b1) + b1 * em) * alpha / (np.sqrt(ev) + eps)
    else:
        want = VAR - em * alpha / (np.sqrt(ev) + eps)
    np.testing.assert_allclose(nm, em, rtol=1e-14)
    np.testing.assert_allclose(nvv, ev, rtol=1e-14)
    np.testing.assert_allclose(nv, want, rtol=1e-14)


def test_apply_rms_prop():
    ms0, mom0 = np.ones_like(VAR), np.full_like(VAR, 0.3)
    var, ms, mom = _vars(VAR, ms0, mom0)
    lr, rho, momentum, eps = 0.01, 0.9, 0.5, 1e-10
    up = training_ops.apply_rms_prop(var, ms, mom, *[np.float64(x) for x in (lr, rho, momentum, eps)], GRAD)
    _, (nv, nms, nmom) = _run(up, [var, ms, mom])
    ems = ms0 + (GRAD**2 - ms0) * (1 - rho)
    emom = mom0 * momentum + lr * GRAD / np.sqrt(ems + eps)
    np.testing.assert_allclose(nms, ems, rtol=1e-15)
    np.testing.assert_allclose(nmom, emom, rtol=1e-15)
    np.testing.assert_allclose(nv, VAR - emom, rtol=1e-15)


def test_float32_update_keeps_dtype():
    (var,) = _vars(VAR, dtype=tw.float32)
    up = training_ops.apply_gradient_descent(var, np.float32(0.5), GRAD.astype(np.float32))
    assert up.dtype is tw.float32 and up.shape.as_list() == [2, 2]
    out, (new,) = _run(up, [var])
    assert new.dtype == np.float32
    np.testing.assert_allclose(new, (VAR - 0.5 * GRAD).astype(np.float32), rtol=1e-6)


def test_update_does_not_change_arrays_already_read():
    (var,) = _vars(VAR)
    up = training_ops.apply_gradient_descent(var, np.float64(1.0), GRAD)
    with tw.Session() as s:
        s.run(var.initializer)
        before = s.run(var)
        s.run(up)
        np.testing.assert_array_equal(before, VAR)


def test_ops_are_stateful_with_ref_inputs():
    op_def = tw.plugins.registry().ops.get("ApplyAdam")
    assert op_def.stateful
    assert [a.is_ref for a in op_def.inputs[:3]] == [True, True, True]
    assert not any(a.is_ref for a in op_def.inputs[3:])


def test_gradient_shape_mismatch_fails_at_construction():
    (var,) = _vars(VAR)
    with pytest.raises(errors.InvalidArgumentError, match=r"delta .* has shape \(3,\).*variable 'v0:0'"):
        training_ops.apply_gradient_descent(var, np.float64(0.1), np.ones(3))
    n = len(tw.get_default_graph().get_operations())
    with pytest.raises(errors.InvalidArgumentError, match="accum .* must match"):
        training_ops.apply_adagrad(var, tw.Variable(np.zeros(2), name="acc"), np.float64(0.1), GRAD)
    assert len(tw.get_default_graph().get_operations()) > n  # the variable, not a half-built update


def test_hyperparameter_must_be_scalar():
    (var,) = _vars(VAR)
    with pytest.raises(errors.InvalidArgumentError, match="alpha must be a scalar"):
        training_ops.apply_gradient_descent(var, np.array([0.1, 0.2]), GRAD)


def test_var_must_be_a_variable():
    with pytest.raises(errors.InvalidArgumentError, match="must be a variable"):
        training_ops.apply_gradient_descent(tw.constant(VAR), np.float64(0.1), GRAD)


def test_dtype_mismatch_fails_at_construction():
    (var,) = _vars(VAR)
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        training_ops.apply_gradient_descent(var, tw.constant(0.1, tw.float32), tw.constant(GRAD, tw.float32))


def test_gradient_shape_checked_at_run_time():
    (var,) = _vars(VAR)
    g = tw.placeholder(tw.float64, shape=None)
    up = training_ops.apply_gradient_descent(var, np.float64(0.1), g)
    with tw.Session() as s:
        s.run(var.initializer)
        with pytest.raises(errors.InvalidArgumentError, match="gradient of shape"):
            s.run(up, {g: np.ones(3)})
        np.testing.assert_array_equal(s.run(var), VAR)  # untouched


def test_uninitialized_slot_is_reported():
    var, accum = _vars(VAR, np.zeros_like(VAR))
    up = training_ops.apply_adagrad(var, accum, np.float64(0.1), GRAD)
    with tw.Session() as s:
        s.run(var.initializer)
        with pytest.raises(errors.FailedPreconditionError, match="v1"):
            s.run(up)
