"""Kernels of the fused optimizer updates (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad,
ApplyAdam, ApplyRMSProp) and of their sparse forms (SparseApplyMomentum, SparseApplyAdagrad,
SparseApplyRMSProp, SparseApplyFtrl), with TensorFlow's formulas.

Updates write in place, copy-on-write (``tensorweave.kernels.state.writable`` hands out the
store's own array when nothing else can see it, else stores a private copy first), so values
already handed to consumers or to the user keep theirs. A sparse update reads and writes
only the rows it is given (``SparseApply`` checks indices and shapes before anything is
written). A dense update of float32/float64 runs as a loop numba compiles (jit.py), each
element through the formula's operations in the formula's order, so the bits are those of
the NumPy formulas below, in one pass over memory instead of a fresh array per operation
(RMSProp on the autoencoder's 460k parameters: 3.9 ms -> 1.3 ms). Without numba, for other
dtypes, and for GradientDescent on small variables (``_KERNELS``), the formulas run in NumPy
and their results are stored as new arrays. The locks of the variable and its
slots are held together while reading and storing (taken in a fixed order, so two updates
sharing variables cannot deadlock), whatever ``use_locking`` says: the cost is small and
updates of a variable then never interleave. Reads do not take the locks: a read on another
thread not ordered after an in-place update may see it half done, as in TensorFlow
(kernels/state.py).
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import state
from tensorweave.ops.training_ops import GROUPED_GD
from tensorweave.runtime.containers import StoreUpdate
from tensorweave_cpu import jit

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


def _adam_alpha(lr, beta1_power, beta2_power):
    """Adam's step size: its formula and its compiled loop take this one value."""
    one = np.ones((), dtype=lr.dtype)
    return lr * np.sqrt(one - beta2_power) / (one - beta1_power)


def _adam(attrs, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    one = np.ones((), dtype=var.dtype)
    alpha = _adam_alpha(lr, beta1_power, beta2_power)
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


# --- the same formulas element by element, in place (compiled by numba: jit.py). Each takes
# the flat variable and slots, the flat gradient, then scalars of the variable's dtype, some
# precomputed by the ``*_scalars`` functions below exactly as the formulas compute them.
def _gradient_descent_elements(var, delta, alpha):
    for i in range(var.size):
        var[i] = var[i] - alpha * delta[i]


def _momentum_elements(var, accum, grad, lr, momentum, nesterov):
    for i in range(var.size):
        g = grad[i]
        a = accum[i] * momentum + g
        accum[i] = a
        if nesterov:
            var[i] = var[i] - (g * lr + a * momentum * lr)
        else:
            var[i] = var[i] - a * lr


def _adagrad_elements(var, accum, grad, lr):
    for i in range(var.size):
        g = grad[i]
        a = accum[i] + g * g
        accum[i] = a
        var[i] = var[i] - g * lr / np.sqrt(a)


def _adam_elements(var, m, v, grad, alpha, beta1, one_minus_beta1, one_minus_beta2, epsilon, nesterov):
    for i in range(var.size):
        g = grad[i]
        mi = m[i] + (g - m[i]) * one_minus_beta1
        vi = v[i] + (g * g - v[i]) * one_minus_beta2
        m[i] = mi
        v[i] = vi
        if nesterov:
            var[i] = var[i] - ((g * one_minus_beta1 + beta1 * mi) * alpha) / (np.sqrt(vi) + epsilon)
        else:
            var[i] = var[i] - (mi * alpha) / (np.sqrt(vi) + epsilon)


def _rms_prop_elements(var, ms, mom, grad, lr, one_minus_rho, momentum, epsilon):
    for i in range(var.size):
        g = grad[i]
        s = ms[i] + (g * g - ms[i]) * one_minus_rho
        ms[i] = s
        o = mom[i] * momentum + lr * g / np.sqrt(s + epsilon)
        mom[i] = o
        var[i] = var[i] - o


def _gradient_descent_group(variables, deltas, alpha):
    # A grouped node's updates in one call (a tuple of flat variables, one of their flat
    # gradients): one dispatch instead of one per variable, which is most of the cost of
    # small ones (the mlp's four: 9.5 -> about 3 us for the node).
    a = alpha[()]
    for k in range(len(variables)):
        var, delta = variables[k], deltas[k]
        for i in range(var.size):
            var[i] = var[i] - a * delta[i]


_gradient_descent_group_loop = jit.Loop(_gradient_descent_group)


def _gd_scalars(attrs, alpha):
    return (alpha[()],)


def _momentum_scalars(attrs, lr, momentum):
    return lr[()], momentum[()], attrs["use_nesterov"]


def _adagrad_scalars(attrs, lr):
    return (lr[()],)


def _adam_scalars(attrs, beta1_power, beta2_power, lr, beta1, beta2, epsilon):
    one = np.ones((), dtype=lr.dtype)
    alpha = _adam_alpha(lr, beta1_power, beta2_power)
    return alpha[()], beta1[()], (one - beta1)[()], (one - beta2)[()], epsilon[()], attrs["use_nesterov"]


def _rms_prop_scalars(attrs, lr, rho, momentum, epsilon):
    one = np.ones((), dtype=lr.dtype)
    return lr[()], (one - rho)[()], momentum[()], epsilon[()]


# op -> (number of ref inputs, index of the gradient among the other inputs, the formula,
# the loop, the loop's scalars from the other inputs but the gradient, the fewest elements
# for which the loop runs). Formulas take the stores' values, then the other inputs, in the
# op's input order. Calling a compiled loop costs about 2.5 us (numba's dispatch, writable):
# more than NumPy's two operations of GradientDescent on fewer than about 5000 elements,
# less than the four or more of the others on any.
_KERNELS = {
    "ApplyGradientDescent": (1, 1, _gradient_descent, jit.Loop(_gradient_descent_elements), _gd_scalars, 4096),
    "ApplyMomentum": (2, 1, _momentum, jit.Loop(_momentum_elements), _momentum_scalars, 0),
    "ApplyAdagrad": (2, 1, _adagrad, jit.Loop(_adagrad_elements), _adagrad_scalars, 0),
    "ApplyAdam": (3, 6, _adam, jit.Loop(_adam_elements), _adam_scalars, 0),
    "ApplyRMSProp": (3, 4, _rms_prop, jit.Loop(_rms_prop_elements), _rms_prop_scalars, 0),
}
_IN_PLACE_DTYPES = ("float32", "float64")


def _compiles(ctx) -> bool:
    """Whether the node's updates can run as compiled loops: float32/float64 (every input of
    an update has the variable's dtype), on a device whose tensors are host arrays."""
    return ctx.input_dtypes[0].base_dtype.name in _IN_PLACE_DTYPES and ctx.device.host_tensors


def _in_place(ctx, stores, loop, grad, scalars) -> np.ndarray | None:
    """With the stores' locks held and every check done: run ``loop`` over the stores'
    tensors in place and return the variable's; None (nothing written) where a tensor is
    not C-contiguous (a private copy ``writable`` made is still the value: nothing changed)."""
    targets = [state.writable(s, ctx.device) for s in stores]
    flat = []
    for t in targets:
        if not t.flags.c_contiguous:
            return None
        flat.append(t.reshape(-1))
    if not grad.flags.c_contiguous:
        grad = np.ascontiguousarray(grad)
    loop(*flat, grad.reshape(-1), *scalars)
    return targets[0]


def _factory(op_type):
    n_refs, grad_index, formula, loop, loop_scalars, min_size = _KERNELS[op_type]

    def factory(ctx):
        attrs = ctx.attrs
        stores = [ctx.ref_input(i) for i in range(n_refs)]
        guard = StoreUpdate(ctx, stores)
        arg_names = [t.name for t in ctx.op.inputs[n_refs:]]
        compiles = _compiles(ctx)

        def update(*args):
            grad = args[grad_index]
            for i, (name, a) in enumerate(zip(arg_names, args)):
                if i != grad_index and np.ndim(a) != 0:
                    raise ctx.error(errors.InvalidArgumentError,
                                    f"'{name}' must be a scalar, got a value of shape {np.shape(a)}")
            with guard:
                guard.check_shapes([s.read() for s in stores], grad)
                if compiles and grad.size >= min_size and jit.enabled():
                    others = [a for i, a in enumerate(args) if i != grad_index]
                    done = _in_place(ctx, stores, loop, grad, loop_scalars(attrs, *others))
                    if done is not None:
                        return done
                current = [s.read() for s in stores]
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
    in one node, each with its own semantics (in place where nothing else sees the value),
    under all N locks."""
    n = ctx.attrs["N"]
    stores = [ctx.ref_input(i) for i in range(n)]
    guard = StoreUpdate(ctx, stores)
    alpha_name = ctx.op.inputs[n].name
    names = ctx.attrs.get("names") or [ctx.node_name] * n
    compiles = _compiles(ctx)

    def update(alpha, *deltas):
        if np.ndim(alpha) != 0:
            raise ctx.error(errors.InvalidArgumentError,
                            f"'{alpha_name}' must be a scalar, got a value of shape {np.shape(alpha)}")
        with guard:
            guard.check_each([s.read() for s in stores], deltas, names)
            if compiles and jit.enabled() and _all_in_place(ctx, stores, alpha, deltas):
                return None
            for s, d in zip(stores, deltas):
                cur = s.read()
                s.value = np.asarray(_gradient_descent(None, cur, alpha, d)[0], dtype=cur.dtype)
        return None
    return update


def _all_in_place(ctx, stores, alpha, deltas) -> bool:
    """With the locks held and the shapes checked: every store updated in place by one
    compiled call; False (nothing written) where the variables' dtypes differ from alpha's
    or a variable's tensor is not C-contiguous."""
    dt = alpha.dtype
    targets, grads = [], []
    for s, d in zip(stores, deltas):
        t = state.writable(s, ctx.device)
        if t.dtype != dt or d.dtype != dt or not t.flags.c_contiguous:
            return False
        targets.append(t.reshape(-1))
        grads.append((d if d.flags.c_contiguous else np.ascontiguousarray(d)).reshape(-1))
    _gradient_descent_group_loop(tuple(targets), tuple(grads), alpha if type(alpha) is np.ndarray else np.asarray(alpha))
    return True


def register(reg):
    for op_type in _KERNELS:
        reg.register(op_type, CPU, factory=_factory(op_type))
    reg.register(GROUPED_GD, CPU, factory=_grouped_factory)
    for op_type in _SPARSE_KERNELS:
        reg.register(op_type, CPU, factory=_sparse_factory(op_type))
