"""Normalization ops: ``FusedBatchNorm`` (and ``FusedBatchNormV3``) with their gradient ops,
``LRN`` and ``LRNGrad`` (op definitions, shape functions and the ``tw.nn`` wrappers
``fused_batch_norm``, ``batch_normalization``, ``lrn``/``local_response_normalization``).

FusedBatchNorm, as TensorFlow defines it, normalises a 4-D ``x`` per channel (the last
dimension for NHWC, the second for NCHW)::

    y = scale * (x - mean) / sqrt(variance + epsilon) + offset

With ``is_training`` the mean and variance are the batch's (over N, H, W; the ``mean`` and
``variance`` inputs must be empty) and the outputs are ``y``, the batch mean, the
*Bessel-corrected* batch variance (``n / (n - 1)`` times the biased one the normalisation
used: the estimate moving averages want) and two "reserve spaces" the gradient reads: the
batch mean and the biased variance. Without ``is_training`` the given ``mean`` and
``variance`` (one per channel) are used and passed through. ``FusedBatchNormV3`` has a
third reserve space (empty) and lets ``scale``/``offset``/``mean``/``variance`` have their own
float type ``U``.

LRN (local response normalization over the channels of NHWC images)::

    sqr_sum[b, h, w, d] = sum(x[b, h, w, d - depth_radius : d + depth_radius + 1] ** 2)
    y = x / (bias + alpha * sqr_sum) ** beta

Departure: TensorFlow's FusedBatchNorm and LRN take float (and half) only; here float64 is
accepted too, so gradients can be checked against float64 finite differences.

The window arithmetic kernels share (``bn_channel_axis``, ``bn_check_inputs``,
``lrn_params``) lives here, once, for every device.
"""

from __future__ import annotations

import numbers

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, math_ops

__all__: list[str] = []

_E = errors.InvalidArgumentError
_FLOAT = "T: {float16, float32, float64}"
_U = "U: {float32, float64}"
_FORMAT = "data_format: {'NHWC', 'NCHW'} = 'NHWC'"
_BN_ATTRS = ["epsilon: float = 0.0001", _FORMAT, "is_training: bool = true"]
# TF's nn.fused_batch_norm raises smaller epsilons to this (cuDNN's minimum).
MIN_EPSILON = 1.001e-5


# ---------------------------------------------------------------------------------------
# shared by the shape functions and every device's kernels
def bn_channel_axis(data_format):
    return 3 if data_format == "NHWC" else 1


def bn_check_inputs(x_shape, scale_shape, offset_shape, mean_shape, var_shape, data_format, is_training):
    """Checks the run-time shapes of FusedBatchNorm's inputs (tuples); returns the channel
    count. Raises InvalidArgumentError (without the node's name: callers add it)."""
    if len(x_shape) != 4:
        raise _E(f"x must be 4-dimensional ({data_format}), got shape {tuple(x_shape)}")
    c = x_shape[bn_channel_axis(data_format)]
    for what, s in (("scale", scale_shape), ("offset", offset_shape)):
        if tuple(s) != (c,):
            raise _E(f"{what} must be a vector of {c} elements (one per channel of x {tuple(x_shape)}, "
                     f"{data_format}), got shape {tuple(s)}")
    if not is_training:
        for what, s in (("mean", mean_shape), ("variance", var_shape)):
            if tuple(s) != (c,):
                raise _E(f"{what} must be a vector of {c} elements when is_training is false, got shape "
                         f"{tuple(s)}")
    return c


def bn_check_grad_inputs(dy_shape, x_shape, scale_shape, r1_shape, r2_shape, data_format):
    if len(x_shape) != 4 or tuple(dy_shape) != tuple(x_shape):
        raise _E(f"y_backprop and x must be 4-dimensional and of one shape, got {tuple(dy_shape)} and "
                 f"{tuple(x_shape)}")
    c = x_shape[bn_channel_axis(data_format)]
    for what, s in (("scale", scale_shape), ("reserve_space_1", r1_shape), ("reserve_space_2", r2_shape)):
        if tuple(s) != (c,):
            raise _E(f"{what} must be a vector of {c} elements (one per channel of x {tuple(x_shape)}, "
                     f"{data_format}), got shape {tuple(s)}")
    return c


def bessel_factor(count):
    """n / (n - 1): the biased batch variance to the unbiased one (1 for a single element)."""
    return count / max(count - 1, 1)


def lrn_params(attrs):
    """(depth_radius, bias, alpha, beta) of an LRN node's attrs."""
    return int(attrs["depth_radius"]), float(attrs["bias"]), float(attrs["alpha"]), float(attrs["beta"])


# ---------------------------------------------------------------------------------------
# shape functions
def _vec(shape, what, c):
    if shape.ndims is not None and shape.ndims != 1:
        raise _E(f"{what} must be a vector (one element per channel), got shape {shape}")
    n = shape[0] if shape.ndims == 1 else None
    if c is not None and n is not None and n != c:
        raise _E(f"{what} has {n} elements but x has {c} channels")
    return n


def _fused_batch_norm_shape(op):
    x, scale, offset, mean, var = (t.shape for t in op.inputs[:5])
    fmt = op.get_attr("data_format")
    if x.ndims is not None and x.ndims != 4:
        raise _E(f"x must be 4-dimensional ({fmt}), got shape {x}")
    c = x[bn_channel_axis(fmt)] if x.ndims == 4 else None
    for what, s in (("scale", scale), ("offset", offset)):
        n = _vec(s, what, c)
        c = c if c is not None else n
    if not op.get_attr("is_training"):
        for what, s in (("mean", mean), ("variance", var)):
            n = _vec(s, what, c)
            c = c if c is not None else n
    else:
        for what, s in (("mean", mean), ("variance", var)):
            if s.ndims is not None and s.ndims != 1:
                raise _E(f"{what} must be a vector (empty when is_training), got shape {s}")
    y = x if x.ndims is not None else TensorShape([None] * 4)
    if c is not None and y[bn_channel_axis(fmt)] is None:
        dims = y.dims
        dims[bn_channel_axis(fmt)] = c
        y = TensorShape(dims)
    vec = TensorShape([c])
    out = [y, vec, vec, vec, vec]
    if len(op.outputs) == 6:
        out.append(TensorShape([None]))
    return out


def _fused_batch_norm_grad_shape(op):
    dy, x, scale, r1, r2 = (t.shape for t in op.inputs[:5])
    fmt = op.get_attr("data_format")
    for what, s in (("y_backprop", dy), ("x", x)):
        if s.ndims is not None and s.ndims != 4:
            raise _E(f"{what} must be 4-dimensional ({fmt}), got shape {s}")
    if not dy.is_compatible_with(x):
        raise _E(f"y_backprop {dy} and x {x} must have the same shape")
    xs = dy.merge_with(x) if (dy.ndims is not None or x.ndims is not None) else TensorShape([None] * 4)
    c = xs[bn_channel_axis(fmt)]
    for what, s in (("scale", scale), ("reserve_space_1", r1), ("reserve_space_2", r2)):
        n = _vec(s, what, c)
        c = c if c is not None else n
    vec = TensorShape([c])
    return [xs, vec, vec, TensorShape([0]), TensorShape([0])]


def _lrn_shape(op):
    s = op.inputs[0].shape
    if s.ndims is not None and s.ndims != 4:
        raise _E(f"input must be 4-dimensional (NHWC), got shape {s}")
    if op.get_attr("depth_radius") < 0:
        raise _E(f"depth_radius must be non-negative, got {op.get_attr('depth_radius')}")
    return [s if s.ndims is not None else TensorShape([None] * 4)]


def _lrn_grad_shape(op):
    shapes = [t.shape for t in op.inputs]
    out = TensorShape(None)
    for what, s in zip(("input_grads", "input_image", "output_image"), shapes):
        if s.ndims is not None and s.ndims != 4:
            raise _E(f"{what} must be 4-dimensional (NHWC), got shape {s}")
        if not out.is_compatible_with(s):
            raise _E(f"input_grads, input_image and output_image must have one shape, got {', '.join(map(str, shapes))}")
        out = out.merge_with(s)
    return [out if out.ndims is not None else TensorShape([None] * 4)]


def register_ops(reg):
    doc = ("Batch normalization of a 4-D x per channel (see ops/normalization_ops.py): outputs y, the batch mean, "
           "the Bessel-corrected batch variance and the reserve spaces the gradient reads.")
    reg.op("FusedBatchNorm", inputs=["x: T", "scale: T", "offset: T", "mean: T", "variance: T"],
           outputs=["y: T", "batch_mean: T", "batch_variance: T", "reserve_space_1: T", "reserve_space_2: T"],
           attrs=[_FLOAT] + _BN_ATTRS, shape_fn=_fused_batch_norm_shape, doc=doc)
    reg.op("FusedBatchNormV3", inputs=["x: T", "scale: U", "offset: U", "mean: U", "variance: U"],
           outputs=["y: T", "batch_mean: U", "batch_variance: U", "reserve_space_1: U", "reserve_space_2: U",
                    "reserve_space_3: U"],
           attrs=[_FLOAT, _U] + _BN_ATTRS, shape_fn=_fused_batch_norm_shape, doc=doc)
    gdoc = ("Gradients of FusedBatchNorm with respect to x, scale and offset, given reserve_space_1/2 (the batch "
            "mean and biased variance when is_training, else the population mean and variance).")
    reg.op("FusedBatchNormGrad", inputs=["y_backprop: T", "x: T", "scale: T", "reserve_space_1: T",
                                         "reserve_space_2: T"],
           outputs=["x_backprop: T", "scale_backprop: T", "offset_backprop: T", "reserve_space_3: T",
                    "reserve_space_4: T"],
           attrs=[_FLOAT] + _BN_ATTRS, shape_fn=_fused_batch_norm_grad_shape, doc=gdoc)
    reg.op("FusedBatchNormGradV3", inputs=["y_backprop: T", "x: T", "scale: U", "reserve_space_1: U",
                                           "reserve_space_2: U", "reserve_space_3: U"],
           outputs=["x_backprop: T", "scale_backprop: U", "offset_backprop: U", "reserve_space_4: U",
                    "reserve_space_5: U"],
           attrs=[_FLOAT, _U] + _BN_ATTRS, shape_fn=_fused_batch_norm_grad_shape, doc=gdoc)
    lrn_attrs = ["depth_radius: int = 5", "bias: float = 1.0", "alpha: float = 1.0", "beta: float = 0.5"]
    reg.op("LRN", inputs=["input: T"], outputs=["output: T"], attrs=[_FLOAT] + lrn_attrs, shape_fn=_lrn_shape,
           doc="Local response normalization over the channels of an NHWC image batch.")
    reg.op("LRNGrad", inputs=["input_grads: T", "input_image: T", "output_image: T"], outputs=["output: T"],
           attrs=[_FLOAT] + lrn_attrs, shape_fn=_lrn_grad_shape, doc="Gradient of LRN with respect to its input.")


# ---------------------------------------------------------------------------------------
# wrappers
def _empty(dtype):
    return array_ops.constant(np.zeros((0,), dtype.np_dtype))


def fused_batch_norm(x, scale, offset=None, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None):
    """Batch normalization of a 4-D ``x`` in one op (``tf.nn.fused_batch_norm``): returns
    ``(y, mean, variance)``. Training: the batch's mean and Bessel-corrected variance;
    inference (``is_training=False``): ``mean`` and ``variance`` are required and returned.
    ``offset`` None is zeros; ``epsilon`` is raised to at least 1.001e-5, as in TensorFlow."""
    fn = "fused_batch_norm"
    if data_format not in ("NHWC", "NCHW"):
        raise _E(f"{fn}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    if not isinstance(is_training, bool | np.bool_):
        raise _E(f"{fn}: is_training must be a Python bool, got {is_training!r}")
    if not is_training and (mean is None or variance is None):
        raise _E(f"{fn}: mean and variance are required when is_training is False")
    with get_default_graph().name_scope(name or "FusedBatchNorm") as scope:
        x = convert_to_tensor(x, name="input")
        scale = convert_to_tensor(scale, name="scale")
        u = scale.dtype
        if x.dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
            raise _E(f"{fn}: x must be float16, float32 or float64, got {x.dtype.name}")
        if u not in (dtypes.float32, dtypes.float64):
            raise _E(f"{fn}: scale must be float32 or float64, got {u.name}")
        if offset is None:
            c = scale.shape[0] if scale.shape.ndims == 1 else None
            offset = array_ops.zeros([c], dtype=u) if c is not None else array_ops.zeros_like(scale)
        offset = convert_to_tensor(offset, dtype=u, name="offset")
        mean = _empty(u) if mean is None else convert_to_tensor(mean, dtype=u, name="mean")
        variance = _empty(u) if variance is None else convert_to_tensor(variance, dtype=u, name="variance")
        eps = float(epsilon)
        if not eps >= 0:
            raise _E(f"{fn}: epsilon must be non-negative, got {epsilon!r}")
        outs = apply_op("FusedBatchNormV3", [x, scale, offset, mean, variance],
                        {"epsilon": max(eps, MIN_EPSILON), "data_format": data_format,
                         "is_training": bool(is_training)}, _exact_name=scope.rstrip("/"))
        return outs[0], outs[1], outs[2]


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset`` with broadcasting
    (``tf.nn.batch_normalization``); ``offset``/``scale`` may be None."""
    with get_default_graph().name_scope(name or "batchnorm"):
        x = convert_to_tensor(x, name="x")
        mean = convert_to_tensor(mean, dtype=x.dtype, name="mean")
        variance = convert_to_tensor(variance, dtype=x.dtype, name="variance")
        inv = math_ops.rsqrt(math_ops.add(variance, convert_to_tensor(variance_epsilon, dtype=x.dtype)))
        if scale is not None:
            inv = math_ops.multiply(inv, convert_to_tensor(scale, dtype=x.dtype, name="scale"))
        shift = math_ops.multiply(mean, inv)
        shift = math_ops.subtract(convert_to_tensor(offset, dtype=x.dtype, name="offset"), shift) \
            if offset is not None else math_ops.negative(shift)
        return math_ops.add(math_ops.multiply(x, inv), shift)


def _number(v, what, fn, integral=False):
    ok = isinstance(v, numbers.Integral) if integral else isinstance(v, numbers.Real)
    if isinstance(v, bool) or not ok:
        raise _E(f"{fn}: {what} must be {'an int' if integral else 'a number'}, got {v!r}")
    return int(v) if integral else float(v)


def local_response_normalization(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None):  # noqa: A002
    """``input / (bias + alpha * sqr_sum) ** beta`` where ``sqr_sum`` sums the squares of the
    ``2 * depth_radius + 1`` channels around each one (``tf.nn.lrn``), NHWC."""
    fn = "lrn"
    attrs = {"depth_radius": _number(depth_radius, "depth_radius", fn, True), "bias": _number(bias, "bias", fn),
             "alpha": _number(alpha, "alpha", fn), "beta": _number(beta, "beta", fn)}
    if attrs["depth_radius"] < 0:
        raise _E(f"{fn}: depth_radius must be non-negative, got {depth_radius}")
    return apply_op("LRN", [input], attrs, name=name)


lrn = local_response_normalization
