"""Kernels of the fused optimizer updates (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad,
ApplyAdam, ApplyRMSProp) and of their sparse forms (SparseApplyMomentum, SparseApplyAdagrad,
SparseApplyRMSProp, SparseApplyFtrl), with TensorFlow's formulas.

Like Assign, a dense update never writes into the arrays it read: it stores new arrays, so
values already handed to consumers or to the user keep theirs. A sparse update reads and
writes only the rows it is given, in place, copy-on-write (``tensorweave.kernels.state``:
``SparseApply`` checks indices and shapes before anything is written, ``writable`` hands
out the store's own array when nothing else can see it). The locks of the variable and its
slots are held together while reading and storing (taken in a fixed order, so two updates
sharing variables cannot deadlock), whatever ``use_locking`` says: the cost is small and a
step then sees each variable either before or after an update, never half of one.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import state
from tensorweave.ops.training_ops import GROUPED_GD
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


# --- sparse forms: each formula takes the rows of the refs (gathered), the gradient's rows
# and the scalars, and returns the new rows of every ref.
def _sparse_momentum(attrs, rows, grad, lr, momentum):
    var, accum = rows
    accum = accum * momentum + grad
    if attrs["use_nesterov"]:
        return var - (grad * lr + accum * momentum * lr), accum
    return var - accum * lr, accum


def _sparse_adagrad(attrs, rows, grad, lr):
    var, accum = rows
    if attrs.get("update_slots", True):
        accum = accum + grad * grad
    return var - grad * lr / np.sqrt(accum), accum


def _sparse_rms_prop(attrs, rows, grad, lr, rho, momentum, epsilon):
    var, ms, mom = rows
    one = np.ones((), dtype=var.dtype)
    ms = ms + (grad * grad - ms) * (one - rho)
    mom = mom * momentum + lr * grad / np.sqrt(ms + epsilon)
    return var - mom, ms, mom


def _sparse_ftrl(attrs, rows, grad, lr, l1, l2, lr_power):
    var, accum, linear = rows
    new_accum = accum + grad * grad
    power = -lr_power
    if lr_power == -0.5:
        sigma = (np.sqrt(new_accum) - np.sqrt(accum)) / lr
        new_pow = np.sqrt(new_accum)
    else:
        new_pow = np.power(new_accum, power)
        sigma = (new_pow - np.power(accum, power)) / lr
    linear = linear + grad - sigma * var
    quadratic = new_pow / lr + 2 * l2
    var = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, np.zeros((), var.dtype))
    return var, new_accum, linear


# op -> (number of refs, position of grad, of indices, of each scalar among the other inputs, formula)
_SPARSE_KERNELS = {
    "SparseApplyMomentum": (2, 1, 2, (0, 3), _sparse_momentum),
    "SparseApplyAdagrad": (2, 1, 2, (0,), _sparse_adagrad),
    "SparseApplyRMSProp": (3, 4, 5, (0, 1, 2, 3), _sparse_rms_prop),
    "SparseApplyFtrl": (3, 0, 1, (2, 3, 4, 5), _sparse_ftrl),
}


def _sparse_factory(op_type):
    n_refs, grad_pos, idx_pos, scalar_pos, formula = _SPARSE_KERNELS[op_type]

    def factory(ctx):
        attrs = ctx.attrs
        sparse = state.SparseApply(ctx, n_refs, grad_pos, idx_pos)

        def update(*args):
            grad, scalars = args[grad_pos], [args[i] for i in scalar_pos]
            with sparse.guard:
                idx, targets = sparse.targets(args, args[idx_pos])
                dtype = targets[0].dtype
                if state.distinct(idx):
                    groups = [(idx, grad)]
                else:  # TensorFlow's kernels apply the rows in order: a repeated index twice
                    groups = [(idx[j:j + 1], grad[j:j + 1]) for j in range(idx.size)]
                for rows_at, g in groups:
                    new = formula(attrs, [t[rows_at] for t in targets], g, *scalars)
                    for t, x in zip(targets, new):
                        t[rows_at] = np.asarray(x, dtype=dtype)
            return targets[0]
        return update
    return factory


def _grouped_factory(ctx):
    """_GroupedApplyGradientDescent (passes/update_grouping.py): N ApplyGradientDescent updates
    in one node, each with its own semantics (a new array stored), under all N locks."""
    n = ctx.attrs["N"]
    stores = [ctx.ref_input(i) for i in range(n)]
    guard = StoreUpdate(ctx, stores)
    alpha_name = ctx.op.inputs[n].name
    names = ctx.attrs.get("names") or [ctx.node_name] * n

    def update(alpha, *deltas):
        if np.ndim(alpha) != 0:
            raise ctx.error(errors.InvalidArgumentError,
                            f"'{alpha_name}' must be a scalar, got a value of shape {np.shape(alpha)}")
        with guard:
            current = [s.read() for s in stores]
            guard.check_each(current, deltas, names)
            new = [np.asarray(cur - alpha * d, dtype=cur.dtype) for cur, d in zip(current, deltas)]
            for s, x in zip(stores, new):
                s.value = x
        return None
    return update


def register(reg):
    for op_type in _KERNELS:
        reg.register(op_type, CPU, factory=_factory(op_type))
    reg.register(GROUPED_GD, CPU, factory=_grouped_factory)
    for op_type in _SPARSE_KERNELS:
        reg.register(op_type, CPU, factory=_sparse_factory(op_type))
