"""Learning-rate schedules: TF1's ``tf.train.exponential_decay`` and its kin.

Each function returns a scalar tensor computed from ``global_step`` (a variable, as
``tw.train.get_or_create_global_step()`` makes, or any integer or float tensor), so the rate
follows the step each time it is evaluated. The step, ``decay_steps`` and the other
parameters are cast to the learning rate's dtype (float32 for a Python number), as TF1 does.
With ``p = global_step / decay_steps`` (``floor(p)`` when ``staircase``):

- ``exponential_decay``: ``lr * decay_rate ** p``;
- ``natural_exp_decay``: ``lr * exp(-decay_rate * p)``;
- ``inverse_time_decay``: ``lr / (1 + decay_rate * p)``;
- ``polynomial_decay``: ``(lr - end) * (1 - s / d) ** power + end`` with ``s = min(step,
  decay_steps)``, or with ``cycle`` ``d = decay_steps * ceil(step / decay_steps)`` (1 at step 0);
- ``piecewise_constant(x, boundaries, values)``: ``values[i]`` for
  ``boundaries[i-1] < x <= boundaries[i]``;
- ``cosine_decay``: ``lr * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)``;
- ``cosine_decay_restarts`` (SGDR): cosine periods of ``first_decay_steps * t_mul**i`` steps,
  the i-th starting at ``m_mul**i``;
- ``linear_cosine_decay`` and ``noisy_linear_cosine_decay`` (Bello et al. 2017).

A missing ``global_step`` is an ``InvalidArgumentError`` (a ``ValueError``, what TF1 raises):
"global_step is required for exponential_decay.".
"""

from __future__ import annotations

import math

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, control_flow_ops, math_ops, random_ops

__all__ = [
    "exponential_decay", "piecewise_constant", "polynomial_decay", "natural_exp_decay", "inverse_time_decay",
    "cosine_decay", "cosine_decay_restarts", "linear_cosine_decay", "noisy_linear_cosine_decay",
]

_E = errors.InvalidArgumentError


def _require_step(global_step, fn):
    if global_step is None:
        raise _E(f"global_step is required for {fn}.")


def _rate(learning_rate, fn):
    lr = convert_to_tensor(learning_rate, name="learning_rate")
    if not lr.dtype.is_floating:
        if lr.dtype.is_integer:
            lr = math_ops.cast(lr, dtypes.float32)
        else:
            raise _E(f"{fn}: learning_rate must be a number, got {lr.dtype.name} '{lr.name}'")
    if lr.shape.ndims not in (None, 0):
        raise _E(f"{fn}: learning_rate must be a scalar, got shape {lr.shape}")
    return lr


def _as(value, dtype, what, fn):
    """``value`` (a number, tensor or variable) as a ``dtype`` tensor."""
    if isinstance(value, bool):
        raise _E(f"{fn}: {what} must be a number, got {value!r}")
    if not isinstance(value, Tensor) and not hasattr(value, "_ref"):
        try:
            return convert_to_tensor(float(value), dtype=dtype, name=what)
        except (TypeError, ValueError):
            raise _E(f"{fn}: {what} must be a number or a tensor, got {value!r}") from None
    t = convert_to_tensor(value)
    if not (t.dtype.is_floating or t.dtype.is_integer):
        raise _E(f"{fn}: {what} must be numeric, got {t.dtype.name} '{t.name}'")
    return t if t.dtype is dtype else math_ops.cast(t, dtype)


def _positive(value, what, fn):
    if not isinstance(value, Tensor) and not hasattr(value, "_ref") and value is not None:
        try:
            ok = float(value) > 0
        except (TypeError, ValueError):
            raise _E(f"{fn}: {what} must be a number or a tensor, got {value!r}") from None
        if not ok:
            raise _E(f"{fn}: {what} must be positive, got {value!r}")


def _named(op_type, a, b, scope):
    """The result op named like its scope (``ExponentialDecay``), as TF1 names it."""
    return apply_op(op_type, [a, b], _exact_name=scope.rstrip("/"))


def _decayed(fn, default_name, learning_rate, global_step, decay_steps, decay_rate, staircase, name, combine):
    """The schedules of ``p = global_step / decay_steps`` (floored with ``staircase``):
    ``combine(lr, decay_rate, p)`` gives the result's (op type, a, b), named like its scope."""
    _require_step(global_step, fn)
    _positive(decay_steps, "decay_steps", fn)
    with get_default_graph().name_scope(name or default_name) as scope:
        lr = _rate(learning_rate, fn)
        dt = lr.dtype
        p = _as(global_step, dt, "global_step", fn) / _as(decay_steps, dt, "decay_steps", fn)
        if staircase:
            p = math_ops.floor(p)
        return _named(*combine(lr, _as(decay_rate, dt, "decay_rate", fn), p), scope)


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (the exponent floored with
    ``staircase``): TF1's ``tf.train.exponential_decay``."""
    return _decayed("exponential_decay", "ExponentialDecay", learning_rate, global_step, decay_steps, decay_rate,
                    staircase, name, lambda lr, rate, p: ("Mul", lr, math_ops.pow(rate, p)))


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)`` (the ratio floored
    with ``staircase``): TF1's ``tf.train.natural_exp_decay``."""
    return _decayed("natural_exp_decay", "NaturalExpDecay", learning_rate, global_step, decay_steps, decay_rate,
                    staircase, name, lambda lr, rate, p: ("Mul", lr, math_ops.exp(-rate * p)))


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)`` (the ratio floored with
    ``staircase``): TF1's ``tf.train.inverse_time_decay``."""
    return _decayed("inverse_time_decay", "InverseTimeDecay", learning_rate, global_step, decay_steps, decay_rate,
                    staircase, name, lambda lr, rate, p: ("RealDiv", lr, 1.0 + rate * p))


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                     name=None):
    """From ``learning_rate`` to ``end_learning_rate`` in ``decay_steps`` steps along
    ``(1 - step / decay_steps) ** power``, then ``end_learning_rate``; with ``cycle`` the
    decay restarts from the first multiple of ``decay_steps`` above the step (TF1's
    ``tf.train.polynomial_decay``)."""
    fn = "polynomial_decay"
    _require_step(global_step, fn)
    _positive(decay_steps, "decay_steps", fn)
    with get_default_graph().name_scope(name or "PolynomialDecay") as scope:
        lr = _rate(learning_rate, fn)
        dt = lr.dtype
        end = _as(end_learning_rate, dt, "end_learning_rate", fn)
        step = _as(global_step, dt, "global_step", fn)
        steps = _as(decay_steps, dt, "decay_steps", fn)
        if cycle:
            # the first multiple of decay_steps above the step; 1 at step 0
            multiplier = array_ops.where(math_ops.equal(step, 0.0), array_ops.ones_like(step),
                                         math_ops.ceil(step / steps))
            steps = steps * multiplier
        else:
            step = math_ops.minimum(step, steps)
        p = step / steps
        return _named("Add", (lr - end) * math_ops.pow(1.0 - p, _as(power, dt, "power", fn)), end, scope)


def piecewise_constant(x, boundaries, values, name=None):
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, ``values[-1]`` after the last boundary
    (``tf.train.piecewise_constant``). ``boundaries`` are cast to ``x``'s dtype; ``values``
    must all have one dtype, which the result has."""
    fn = "piecewise_constant"
    if x is None:
        raise _E("x (the global step) is required for piecewise_constant.")
    boundaries, values = list(boundaries), list(values)
    if len(boundaries) != len(values) - 1:
        raise _E(f"piecewise_constant: the length of boundaries should be 1 less than the length of values, got "
                 f"{len(boundaries)} boundaries and {len(values)} values")
    if not boundaries:
        raise _E("piecewise_constant: boundaries must not be empty")
    with get_default_graph().name_scope(name or "PiecewiseConstant") as scope:
        x = convert_to_tensor(x, name="x")
        if not (x.dtype.is_integer or x.dtype.is_floating):
            raise _E(f"{fn}: x must be numeric, got {x.dtype.name} '{x.name}'")
        bounds = []
        for i, b in enumerate(boundaries):
            if isinstance(b, Tensor):
                bounds.append(b if b.dtype is x.dtype else math_ops.cast(b, x.dtype))
            else:
                if x.dtype.is_integer and float(b) != int(b):
                    raise _E(f"{fn}: boundary {i} ({b!r}) is not an integer, but x is {x.dtype.name}")
                bounds.append(convert_to_tensor(b, dtype=x.dtype, name=f"boundary_{i}"))
        vals = [convert_to_tensor(v, name=f"value_{i}") for i, v in enumerate(values)]
        for i, v in enumerate(vals):
            if v.dtype is not vals[0].dtype:
                raise _E(f"{fn}: values must have the same dtype; value 0 is {vals[0].dtype.name} but value {i} "
                         f"is {v.dtype.name}")
        result = vals[-1]
        for b, v in zip(reversed(bounds[1:]), reversed(vals[1:-1])):
            result = array_ops.where(math_ops.less_equal(x, b), v, result)
        return apply_op("Select", [math_ops.less_equal(x, bounds[0]), vals[0], result],
                        _exact_name=scope.rstrip("/"))


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)`` with
    ``s = min(global_step, decay_steps)`` (``tf.train.cosine_decay``, Loshchilov & Hutter)."""
    fn = "cosine_decay"
    _require_step(global_step, fn)
    _positive(decay_steps, "decay_steps", fn)
    with get_default_graph().name_scope(name or "CosineDecay") as scope:
        lr = _rate(learning_rate, fn)
        dt = lr.dtype
        steps = _as(decay_steps, dt, "decay_steps", fn)
        step = math_ops.minimum(_as(global_step, dt, "global_step", fn), steps)
        cosine = 0.5 * (1.0 + math_ops.cos(math.pi * (step / steps)))
        a = _as(alpha, dt, "alpha", fn)
        return _named("Mul", lr, (1.0 - a) * cosine + a, scope)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0,
                          name=None):
    """Cosine decay with warm restarts (SGDR, ``tf.train.cosine_decay_restarts``): the first
    period lasts ``first_decay_steps`` steps, each next one ``t_mul`` times longer and
    starting ``m_mul`` times lower; within a period the multiplier falls from its start to
    ``alpha`` along a half cosine."""
    fn = "cosine_decay_restarts"
    _require_step(global_step, fn)
    _positive(first_decay_steps, "first_decay_steps", fn)
    with get_default_graph().name_scope(name or "SGDRDecay") as scope:
        lr = _rate(learning_rate, fn)
        dt = lr.dtype
        fraction = _as(global_step, dt, "global_step", fn) / _as(first_decay_steps, dt, "first_decay_steps", fn)
        tm = _as(t_mul, dt, "t_mul", fn)
        mm = _as(m_mul, dt, "m_mul", fn)
        a = _as(alpha, dt, "alpha", fn)

        def constant_periods():
            i = math_ops.floor(fraction)
            return i, fraction - i

        def geometric_periods():
            i = math_ops.floor(math_ops.log(1.0 - fraction * (1.0 - tm)) / math_ops.log(tm))
            done = (1.0 - math_ops.pow(tm, i)) / (1.0 - tm)
            return i, (fraction - done) / math_ops.pow(tm, i)

        if isinstance(t_mul, Tensor) or hasattr(t_mul, "_ref"):
            i_restart, within = control_flow_ops.cond(math_ops.equal(tm, 1.0), constant_periods, geometric_periods)
        elif float(t_mul) == 1.0:
            i_restart, within = constant_periods()
        else:
            i_restart, within = geometric_periods()
        cosine = 0.5 * math_ops.pow(mm, i_restart) * (1.0 + math_ops.cos(math.pi * within))
        return _named("Mul", lr, (1.0 - a) * cosine + a, scope)


def _linear_cosine(lr, global_step, decay_steps, num_periods, alpha, beta, fn, noise=None):
    dt = lr.dtype
    steps = _as(decay_steps, dt, "decay_steps", fn)
    step = math_ops.minimum(_as(global_step, dt, "global_step", fn), steps)
    linear = (steps - step) / steps
    if noise is not None:
        linear = linear + noise(step)
    fraction = 2.0 * _as(num_periods, dt, "num_periods", fn) * (step / steps)
    cosine = 0.5 * (1.0 + math_ops.cos(math.pi * fraction))
    return (_as(alpha, dt, "alpha", fn) + linear) * cosine + _as(beta, dt, "beta", fn)


def linear_cosine_decay(learning_rate, global_step, decay_steps, num_periods=0.5, alpha=0.0, beta=0.001,
                        name=None):
    """``learning_rate * ((alpha + linear) * cosine + beta)`` with ``linear = (decay_steps -
    s) / decay_steps``, ``cosine = 0.5 * (1 + cos(pi * 2 * num_periods * s / decay_steps))``
    and ``s = min(global_step, decay_steps)`` (``tf.train.linear_cosine_decay``)."""
    fn = "linear_cosine_decay"
    _require_step(global_step, fn)
    _positive(decay_steps, "decay_steps", fn)
    with get_default_graph().name_scope(name or "LinearCosineDecay") as scope:
        lr = _rate(learning_rate, fn)
        return _named("Mul", lr, _linear_cosine(lr, global_step, decay_steps, num_periods, alpha, beta, fn), scope)


def noisy_linear_cosine_decay(learning_rate, global_step, decay_steps, initial_variance=1.0, variance_decay=0.55,
                              num_periods=0.5, alpha=0.0, beta=0.001, name=None):
    """``linear_cosine_decay`` with zero-mean Gaussian noise of variance ``initial_variance /
    (1 + s) ** variance_decay`` added to the linear part, drawn anew each time it is evaluated
    (``tf.train.noisy_linear_cosine_decay``)."""
    fn = "noisy_linear_cosine_decay"
    _require_step(global_step, fn)
    _positive(decay_steps, "decay_steps", fn)
    with get_default_graph().name_scope(name or "NoisyLinearCosineDecay") as scope:
        lr = _rate(learning_rate, fn)
        dt = lr.dtype

        def noise(step):
            variance = _as(initial_variance, dt, "initial_variance", fn) / math_ops.pow(
                1.0 + step, _as(variance_decay, dt, "variance_decay", fn))
            return random_ops.random_normal([], stddev=math_ops.sqrt(variance), dtype=dt)
        return _named("Mul", lr, _linear_cosine(lr, global_step, decay_steps, num_periods, alpha, beta, fn, noise),
                      scope)
