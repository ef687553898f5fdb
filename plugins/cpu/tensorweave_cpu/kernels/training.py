"""Kernels of the fused optimizer updates (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad,
ApplyAdam, ApplyRMSProp), with TensorFlow's formulas.

Like Assign, an update never writes into the arrays it read: it stores new arrays, so values
already handed to consumers or to the user keep theirs. The locks of the variable and its
slots are held together while reading and storing (taken in a fixed order, so two updates
sharing variables cannot deadlock), whatever ``use_locking`` says: the cost is small and a
step then sees each variable either before or after an update, never half of one.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime.containers import StoreUpdate

CPU = "CPU"


def _gradient_descent(attrs, var, alpha, delta):
    return (var - alpha * delta,)


def _momentum(attrs, var, accum, lr, grad, momentum):
    accum = accum * momentum + grad
    if attrs["use_nesterov"]:
        var = var - (grad * lr + accum * momentum * lr)
    else:
        var = var - accum * lr
    return var, accum


def _adagrad(attrs, var, accum, lr, grad):
    accum = accum + grad * grad
    return var - grad * lr / np.sqrt(accum), accum


def _adam(attrs, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    one = np.ones((), dtype=var.dtype)
    alpha = lr * np.sqrt(one - beta2_power) / (one - beta1_power)
    m = m + (grad - m) * (one - beta1)
    v = v + (grad * grad - v) * (one - beta2)
    if attrs["use_nesterov"]:
        var = var - ((grad * (one - beta1) + beta1 * m) * alpha) / (np.sqrt(v) + epsilon)
    else:
        var = var - (m * alpha) / (np.sqrt(v) + epsilon)
    return var, m, v


def _rms_prop(attrs, var, ms, mom, lr, rho, momentum, epsilon, grad):
    one = np.ones((), dtype=var.dtype)
    ms = ms + (grad * grad - ms) * (one - rho)
    mom = mom * momentum + lr * grad / np.sqrt(ms + epsilon)
    return var - mom, ms, mom


# op -> (number of ref inputs, index of the gradient among the other inputs, the formula).
# Formulas take the stores' values, then the other inputs, in the op's input order.
_KERNELS = {
    "ApplyGradientDescent": (1, 1, _gradient_descent),
    "ApplyMomentum": (2, 1, _momentum),
    "ApplyAdagrad": (2, 1, _adagrad),
    "ApplyAdam": (3, 6, _adam),
    "ApplyRMSProp": (3, 4, _rms_prop),
}


def _factory(op_type):
    n_refs, grad_index, formula = _KERNELS[op_type]

    def factory(ctx):
        attrs = ctx.attrs
        stores = [ctx.ref_input(i) for i in range(n_refs)]
        guard = StoreUpdate(ctx, stores)
        arg_names = [t.name for t in ctx.op.inputs[n_refs:]]

        def update(*args):
            grad = args[grad_index]
            for i, (name, a) in enumerate(zip(arg_names, args)):
                if i != grad_index and np.ndim(a) != 0:
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"'{name}' must be a scalar, got a value of shape {np.shape(a)}")
            with guard:
                current = [s.read() for s in stores]
                guard.check_shapes(current, grad)
                new = formula(attrs, *current, *args)
                new = [np.asarray(x, dtype=current[0].dtype) for x in new]
                for s, x in zip(stores, new):
                    s.value = x
            return new[0]
        return update
    return factory


def register(reg):
    for op_type in _KERNELS:
        reg.register(op_type, CPU, factory=_factory(op_type))
