"""Gradient clipping (TF1's ``clip_ops``): ``tw.clip_by_value``, ``tw.clip_by_norm``,
``tw.global_norm``, ``tw.clip_by_global_norm``, ``tw.clip_by_average_norm``.

Each accepts an ``IndexedSlices`` (a gather's gradient) as well as a Tensor and keeps it
sparse: the clipping applies to its ``values``, the result is an IndexedSlices with the same
``indices`` and ``dense_shape``. As in TensorFlow, norms of an IndexedSlices are those of its
values (rows of a repeated index count separately, which is what the update applies), and
the list functions pass ``None`` entries (variables without a gradient) through.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, math_ops, nn_ops

__all__ = ["clip_by_value", "clip_by_norm", "global_norm", "clip_by_global_norm", "clip_by_average_norm"]

_E = errors.InvalidArgumentError


def _values(t):
    """(the dense tensor to clip, a function rebuilding the caller's kind from clipped values)."""
    if isinstance(t, IndexedSlices):
        return t.values, lambda v: IndexedSlices(v, t.indices, t.dense_shape)
    t = convert_to_tensor(t)
    return t, lambda v: v


def _scope(name, default):
    return get_default_graph().name_scope(name or default)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Every element of ``t`` clipped to ``[clip_value_min, clip_value_max]`` (scalars, or
    tensors broadcastable to ``t``'s shape that do not make it bigger)."""
    with _scope(name, "clip_by_value"):
        values, rebuild = _values(t)
        lo = convert_to_tensor(clip_value_min, dtype=values.dtype, name="clip_value_min")
        hi = convert_to_tensor(clip_value_max, dtype=values.dtype, name="clip_value_max")
        lo_v, hi_v = constant_value(lo), constant_value(hi)
        if lo_v is not None and hi_v is not None and np.any(np.asarray(lo_v) > np.asarray(hi_v)):
            raise _E(f"clip_by_value: clip_value_min {np.asarray(lo_v).tolist()} is greater than clip_value_max "
                     f"{np.asarray(hi_v).tolist()}")
        clipped = math_ops.maximum(math_ops.minimum(values, hi), lo)
        if values.shape.ndims is not None and clipped.shape.ndims is not None and \
                not values.shape.is_compatible_with(clipped.shape):
            raise _E(f"clip_by_value: the clip values broadcast '{values.name}' of shape {values.shape} to "
                     f"{clipped.shape}; they must not change its shape")
        return rebuild(clipped)


def _l2_norm(values, axes, keepdims=True):
    """``sqrt(sum(values^2))`` over ``axes`` whose gradient is 0 (not NaN) where the norm is 0."""
    l2sum = math_ops.reduce_sum(values * values, axis=axes, keepdims=keepdims)
    positive = math_ops.greater(l2sum, array_ops.zeros_like(l2sum))
    safe = array_ops.where(positive, l2sum, array_ops.ones_like(l2sum))
    return array_ops.where(positive, math_ops.sqrt(safe), l2sum)


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``t * clip_norm / max(l2norm(t), clip_norm)``: ``t`` itself when its L2 norm (over
    ``axes``, all by default) is at most ``clip_norm``, else scaled down to that norm."""
    with _scope(name, "clip_by_norm"):
        values, rebuild = _values(t)
        clip = convert_to_tensor(clip_norm, dtype=values.dtype, name="clip_norm")
        norm = _l2_norm(values, axes)
        clipped = array_ops.identity(values * clip / math_ops.maximum(norm, clip))
        return rebuild(clipped)


def _checked_list(t_list, what):
    if isinstance(t_list, Tensor | IndexedSlices) or not hasattr(t_list, "__iter__"):
        raise TypeError(f"{what}: t_list must be a sequence of tensors, got {type(t_list).__name__}")
    return list(t_list)


def global_norm(t_list, name=None):
    """``sqrt(sum(l2norm(t)^2 for t in t_list))``; ``None`` entries are skipped; an
    IndexedSlices counts its values."""
    t_list = _checked_list(t_list, "global_norm")
    with _scope(name, "global_norm"):
        values = [_values(t)[0] for t in t_list if t is not None]
        if not values:
            raise _E("global_norm: t_list has no tensors (every entry is None)")
        dtype = values[0].dtype
        for v in values:
            if v.dtype is not dtype:
                raise _E(f"global_norm: the tensors must have one dtype; '{values[0].name}' is {dtype.name}, "
                         f"'{v.name}' is {v.dtype.name}")
        # l2_loss is half the squared norm: one reduction per tensor, then one sum.
        half_squares = [nn_ops.l2_loss(v) for v in values]
        total = math_ops.add_n(half_squares) if len(half_squares) > 1 else half_squares[0]
        return math_ops.sqrt(total * 2.0, name="global_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of ``t_list`` by ``clip_norm / max(global_norm, clip_norm)``.

    Returns ``(list_clipped, global_norm)``; ``None`` entries stay None, IndexedSlices stay
    IndexedSlices. ``use_norm`` is a norm already computed. When the global norm is infinite
    or NaN every clipped value is NaN, as in TensorFlow (the step is spoilt either way)."""
    t_list = _checked_list(t_list, "clip_by_global_norm")
    with _scope(name, "clip_by_global_norm"):
        norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
        clip = convert_to_tensor(clip_norm, dtype=norm.dtype, name="clip_norm")
        one = array_ops.constant(1.0, dtype=norm.dtype)
        # clip * min(1/norm, 1/clip): 1 when the norm is small, clip/norm otherwise; a norm of
        # 0 gives 1/0 = inf, and min(inf, 1/clip) is 1/clip.
        scale = clip * math_ops.minimum(one / norm, one / clip)
        scale = scale + (norm - norm)  # NaN when the norm is inf or NaN
        out = []
        for i, t in enumerate(t_list):
            if t is None:
                out.append(None)
                continue
            values, rebuild = _values(t)
            s = scale if values.dtype is norm.dtype else math_ops.cast(scale, values.dtype)
            out.append(rebuild(array_ops.identity(values * s, name=f"clipped_{i}")))
        return out, norm


def clip_by_average_norm(t, clip_norm, name=None):
    """``t * clip_norm / max(l2norm(t) / n, clip_norm)`` where ``n`` is the number of
    elements of ``t`` (of the dense tensor, for an IndexedSlices)."""
    with _scope(name, "clip_by_average_norm"):
        values, rebuild = _values(t)
        clip = convert_to_tensor(clip_norm, dtype=values.dtype, name="clip_norm")
        if isinstance(t, IndexedSlices):
            if t.dense_shape is None:
                raise _E(f"clip_by_average_norm: {t} has no dense_shape, so its number of elements is unknown")
            n = math_ops.reduce_prod(math_ops.cast(t.dense_shape, values.dtype))
        else:
            n = math_ops.cast(array_ops.size(values), values.dtype)
        one = array_ops.constant(1.0, dtype=values.dtype)
        inv_norm = math_ops.rsqrt(math_ops.reduce_sum(values * values))
        clipped = array_ops.identity(values * clip * math_ops.minimum(inv_norm * n, one / clip))
        return rebuild(clipped)
