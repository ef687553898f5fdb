"""Training ops: fused optimizer updates (ApplyGradientDescent, ApplyAdam, ...) that update
variables in place of a chain of Assign ops, as in TensorFlow.

Each op takes the variable (and its optimizer slots) as ``Ref`` inputs, the hyperparameters
as scalars and the gradient, applies TensorFlow's update formula in one step and outputs the
variable's new value. Hyperparameters must have the variable's dtype: the optimizers cast
them (``tw.train``). Shapes are checked when the node is built: the gradient and every slot
must match the variable, and every hyperparameter must be a scalar.

The sparse forms (SparseApplyMomentum, SparseApplyAdagrad, SparseApplyRMSProp,
SparseApplyFtrl; TensorFlow's) take the gradient as the rows ``grad`` (``[n] + var.shape[1:]``)
of the variable at ``indices`` (``[n]``, int32/int64) and apply the same formula to those
rows of the variable and its slots only, in place (``kernels/state.py``); the other rows are
not read or written. Rows are applied in order, so a repeated index is updated twice (the
optimizers sum repeated indices first, as TensorFlow's do). There is no
SparseApplyGradientDescent, as in TensorFlow: plain SGD's sparse step is a ScatterSub.

``_GroupedApplyGradientDescent`` (ours, never built by users) is N ApplyGradientDescent updates
of distinct variables with one ``alpha``, in one kernel: the plan pass
``passes/update_grouping.py`` makes it on devices that have a kernel for it, so a device
launches one update per step instead of one per variable.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op

# TensorFlow allows any number type; these are the ones whose updates make sense here.
_T = "T: {float16, float32, float64, complex64, complex128}"
_LOCKING = "use_locking: bool = false"

# op -> (ref inputs, scalar inputs, extra attrs); the gradient is always the last input.
UPDATES = {
    "ApplyGradientDescent": (["var"], ["alpha"], []),
    "ApplyMomentum": (["var", "accum"], ["lr", "momentum"], ["use_nesterov: bool = false"]),
    "ApplyAdagrad": (["var", "accum"], ["lr"], []),
    "ApplyAdam": (["var", "m", "v"], ["beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"],
                  ["use_nesterov: bool = false"]),
    "ApplyRMSProp": (["var", "ms", "mom"], ["lr", "rho", "momentum", "epsilon"], []),
}

# The order of inputs is TensorFlow's, which interleaves refs and scalars for Momentum.
_INPUT_ORDER = {
    "ApplyGradientDescent": ["var", "alpha", "delta"],
    "ApplyMomentum": ["var", "accum", "lr", "grad", "momentum"],
    "ApplyAdagrad": ["var", "accum", "lr", "grad"],
    "ApplyAdam": ["var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"],
    "ApplyRMSProp": ["var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad"],
}


def _merged_shape(ins, names, prefix=""):
    """The shape of ``ins["var"]`` merged with those of the inputs ``names``, which must be
    compatible with it (``prefix`` starts the error's message)."""
    var = ins["var"]
    shape = var.shape
    for name in names:
        t = ins[name]
        if not shape.is_compatible_with(t.shape):
            raise errors.InvalidArgumentError(f"{prefix}{name} '{t.name}' has shape {t.shape} but the variable "
                                              f"'{var.name}' has shape {var.shape}; they must match")
        shape = shape.merge_with(t.shape)
    return shape


def _check_scalars(ins, names, prefix=""):
    for name in names:
        t = ins[name]
        if t.shape.ndims is not None and t.shape.ndims != 0:
            raise errors.InvalidArgumentError(f"{prefix}{name} must be a scalar, got '{t.name}' of shape {t.shape}")


def _make_shape_fn(op_type):
    refs, scalars, _ = UPDATES[op_type]
    order = _INPUT_ORDER[op_type]
    grad_name = "delta" if op_type == "ApplyGradientDescent" else "grad"

    def shape_fn(op):
        ins = dict(zip(order, op.inputs))
        shape = _merged_shape(ins, refs[1:] + [grad_name])
        _check_scalars(ins, scalars)
        return [shape]

    return shape_fn


# The sparse forms: op -> (ref inputs, scalar inputs, extra attrs, input order).
SPARSE_UPDATES = {
    "SparseApplyMomentum": (["var", "accum"], ["lr", "momentum"], ["use_nesterov: bool = false"],
                            ["var", "accum", "lr", "grad", "indices", "momentum"]),
    "SparseApplyAdagrad": (["var", "accum"], ["lr"], ["update_slots: bool = true"],
                           ["var", "accum", "lr", "grad", "indices"]),
    "SparseApplyRMSProp": (["var", "ms", "mom"], ["lr", "rho", "momentum", "epsilon"], [],
                           ["var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad", "indices"]),
    "SparseApplyFtrl": (["var", "accum", "linear"], ["lr", "l1", "l2", "lr_power"], [],
                        ["var", "accum", "linear", "grad", "indices", "lr", "l1", "l2", "lr_power"]),
}


def _make_sparse_shape_fn(op_type):
    refs, scalars, _, order = SPARSE_UPDATES[op_type]

    def shape_fn(op):
        ins = dict(zip(order, op.inputs))
        var = ins["var"]
        where = f"{op_type} node '{op.name}'"
        shape = _merged_shape(ins, refs[1:], f"{where}: ")
        indices, grad = ins["indices"], ins["grad"]
        if indices.shape.ndims is not None and indices.shape.ndims != 1:
            raise errors.InvalidArgumentError(f"{where}: indices '{indices.name}' must be a vector, got shape "
                                              f"{indices.shape}")
        if shape.ndims == 0:
            raise errors.InvalidArgumentError(f"{where}: the variable '{var.name}' must have rank >= 1")
        if shape.ndims is not None and indices.shape.ndims is not None:
            want = indices.shape.concatenate(shape[1:])
            if not grad.shape.is_compatible_with(want):
                raise errors.InvalidArgumentError(
                    f"{where}: grad '{grad.name}' has shape {grad.shape}, but indices of shape {indices.shape} and "
                    f"a variable of shape {shape} need {want} (indices.shape + var.shape[1:])")
        _check_scalars(ins, scalars, f"{where}: ")
        return [shape]

    return shape_fn


def register_ops(reg):
    sparse_docs = {
        "SparseApplyMomentum": "ApplyMomentum on the rows indices of var and accum (grad holds those rows).",
        "SparseApplyAdagrad": "ApplyAdagrad on the rows indices of var and accum (grad holds those rows).",
        "SparseApplyRMSProp": "ApplyRMSProp on the rows indices of var, ms and mom (grad holds those rows).",
        "SparseApplyFtrl": ("FTRL-proximal on the rows indices of var, accum and linear: accum_new = accum + g^2; "
                            "linear += g - (accum_new^-p - accum^-p) / lr * var; quadratic = accum_new^-p / lr + 2 l2; "
                            "var = (sign(linear) l1 - linear) / quadratic if |linear| > l1 else 0 (p = lr_power)."),
    }
    for op_type, (refs, _, extra, order) in SPARSE_UPDATES.items():
        inputs = [f"{n}: Ref(T)" if n in refs else "indices: Tindices" if n == "indices" else f"{n}: T"
                  for n in order]
        reg.op(op_type, inputs=inputs, outputs=["out: T"],
               attrs=[_T, "Tindices: {int32, int64}", _LOCKING] + extra,
               shape_fn=_make_sparse_shape_fn(op_type), stateful=True, doc=sparse_docs[op_type])
    docs = {
        "ApplyGradientDescent": "var -= alpha * delta.",
        "ApplyMomentum": ("accum = accum * momentum + grad; var -= lr * accum, or with use_nesterov "
                          "var -= lr * grad + lr * momentum * accum."),
        "ApplyAdagrad": "accum += grad * grad; var -= lr * grad / sqrt(accum).",
        "ApplyAdam": ("lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power); m += (grad - m) * (1 - beta1); "
                      "v += (grad^2 - v) * (1 - beta2); var -= lr_t * m / (sqrt(v) + epsilon) (with "
                      "use_nesterov, m is replaced by beta1 * m + (1 - beta1) * grad)."),
        "ApplyRMSProp": ("ms += (grad^2 - ms) * (1 - rho); mom = momentum * mom + lr * grad / sqrt(ms + epsilon); "
                         "var -= mom."),
    }
    for op_type, order in _INPUT_ORDER.items():
        refs, _, extra = UPDATES[op_type]
        inputs = [f"{n}: Ref(T)" if n in refs else f"{n}: T" for n in order]
        reg.op(op_type, inputs=inputs, outputs=["out: T"], attrs=[_T, _LOCKING] + extra,
               shape_fn=_make_shape_fn(op_type), stateful=True, doc=docs[op_type])
    register_grouped_ops(reg)


GROUPED_GD = "_GroupedApplyGradientDescent"


def _grouped_shape_fn(op):
    n = op.get_attr("N")
    names = op.get_attr("names") or [op.name] * n
    var, alpha, delta = op.inputs[:n], op.inputs[n], op.inputs[n + 1:]
    for v, d, name in zip(var, delta, names):
        _merged_shape({"var": v, "delta": d}, ["delta"], f"update '{name}': ")
    _check_scalars({"alpha": alpha}, ["alpha"])
    return []


def register_grouped_ops(reg):
    reg.op(GROUPED_GD, inputs=["var: N * Ref(T)", "alpha: T", "delta: N * T"], outputs=[],
           attrs=[_T, "N: int >= 1", _LOCKING, "names: list(string) = []"], shape_fn=_grouped_shape_fn,
           stateful=True,
           doc="var[i] -= alpha * delta[i] for each of N distinct variables, in one kernel "
               "(made by the update-grouping plan pass from N ApplyGradientDescent nodes, named by names).")


def _attrs(use_locking, **kw):
    attrs = {"use_locking": bool(use_locking)}
    attrs.update({k: bool(v) for k, v in kw.items()})
    return attrs


def apply_gradient_descent(var, alpha, delta, use_locking=False, name=None):
    """``var -= alpha * delta``; returns the new value of ``var``."""
    return apply_op("ApplyGradientDescent", [var, alpha, delta], _attrs(use_locking), name=name)


def apply_momentum(var, accum, lr, grad, momentum, use_locking=False, use_nesterov=False, name=None):
    """Momentum update (TensorFlow's ``ApplyMomentum``); returns the new value of ``var``."""
    return apply_op("ApplyMomentum", [var, accum, lr, grad, momentum],
                    _attrs(use_locking, use_nesterov=use_nesterov), name=name)


def apply_adagrad(var, accum, lr, grad, use_locking=False, name=None):
    """Adagrad update; returns the new value of ``var``."""
    return apply_op("ApplyAdagrad", [var, accum, lr, grad], _attrs(use_locking), name=name)


def apply_adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking=False,
               use_nesterov=False, name=None):
    """Adam update; returns the new value of ``var``."""
    return apply_op("ApplyAdam", [var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad],
                    _attrs(use_locking, use_nesterov=use_nesterov), name=name)


def apply_rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad, use_locking=False, name=None):
    """RMSProp update; returns the new value of ``var``."""
    return apply_op("ApplyRMSProp", [var, ms, mom, lr, rho, momentum, epsilon, grad], _attrs(use_locking),
                    name=name)


def sparse_apply_momentum(var, accum, lr, grad, indices, momentum, use_locking=False, use_nesterov=False, name=None):
    """Momentum on the rows ``indices`` of ``var`` and ``accum``; returns the new value of ``var``."""
    return apply_op("SparseApplyMomentum", [var, accum, lr, grad, indices, momentum],
                    _attrs(use_locking, use_nesterov=use_nesterov), name=name)


def sparse_apply_adagrad(var, accum, lr, grad, indices, use_locking=False, name=None):
    """Adagrad on the rows ``indices`` of ``var`` and ``accum``; returns the new value of ``var``."""
    return apply_op("SparseApplyAdagrad", [var, accum, lr, grad, indices], _attrs(use_locking), name=name)


def sparse_apply_rms_prop(var, ms, mom, lr, rho, momentum, epsilon, grad, indices, use_locking=False, name=None):
    """RMSProp on the rows ``indices`` of ``var``, ``ms`` and ``mom``; returns the new value of ``var``."""
    return apply_op("SparseApplyRMSProp", [var, ms, mom, lr, rho, momentum, epsilon, grad, indices],
                    _attrs(use_locking), name=name)


def sparse_apply_ftrl(var, accum, linear, grad, indices, lr, l1, l2, lr_power, use_locking=False, name=None):
    """FTRL-proximal on the rows ``indices`` of ``var``, ``accum`` and ``linear``; returns the new value of ``var``."""
    return apply_op("SparseApplyFtrl", [var, accum, linear, grad, indices, lr, l1, l2, lr_power],
                    _attrs(use_locking), name=name)
