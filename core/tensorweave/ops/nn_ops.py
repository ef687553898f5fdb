"""Neural-net ops: activations, softmax and cross-entropies, convolution, pooling, bias,
L2 loss, ``InTopK`` and ``CheckNumerics`` (op definitions, shape functions and wrappers).

The ``tw.nn`` namespace (``nn.py``) re-exports the wrappers under their TF1 names; the
top-level names (``tw.check_numerics``, ``tw.add_check_numerics_ops``) are in ``__all__``.

Spatial ops follow TensorFlow's window arithmetic (``conv_output_size``): ``VALID`` keeps
only windows that fit, ``SAME`` gives ``ceil(in / stride)`` outputs and pads with
``pad_total // 2`` before and the rest after. Shapes and attrs are checked here, at graph
construction; kernels check again what only the run-time shapes can tell.
"""

from __future__ import annotations

import numbers

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Tensor,
    apply_op,
    constant_value,
    constant_value_as_shape,
    convert_to_tensor,
    get_default_graph,
)
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import array_ops, control_flow_ops, math_ops, random_ops, shape_fns

__all__ = ["check_numerics", "add_check_numerics_ops"]

_FLOAT = "T: {float16, float32, float64}"
_REALNUM = "T: {float16, float32, float64, int8, int16, int32, int64}"
_POOL_T = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, uint16}"
_PADDING = "padding: {'SAME', 'VALID'}"
_FORMAT = "data_format: {'NHWC', 'NCHW'} = 'NHWC'"
_E = errors.InvalidArgumentError


# ---------------------------------------------------------------------------------------
# window arithmetic shared by shape functions, kernels and gradients
def conv_output_size(in_size, k, stride, dilation, padding):
    """``(out, pad_before, pad_after)`` along one spatial dimension, as TensorFlow computes
    it. ``in_size`` None gives ``(None, None, None)``; a window larger than a ``VALID``
    input raises InvalidArgumentError."""
    if in_size is None or k is None:
        return None, None, None
    eff = (k - 1) * dilation + 1
    if padding == "VALID":
        if in_size < eff:
            raise _E(f"the (dilated) window of size {eff} is larger than the input dimension {in_size} "
                     "with VALID padding: the output would be empty")
        return (in_size - eff) // stride + 1, 0, 0
    out = -(-in_size // stride)
    total = max((out - 1) * stride + eff - in_size, 0)
    return out, total // 2, total - total // 2


def spatial_axes(data_format):
    """(height axis, width axis, channel axis) of a 4-D tensor in ``data_format``."""
    return (1, 2, 3) if data_format == "NHWC" else (2, 3, 1)


def _attr4(op, name, data_format, what):
    """A 4-element list attr (strides, ksize, dilations); the batch and channel entries must be 1."""
    v = op.get_attr(name)
    if len(v) != 4:
        raise _E(f"{name} must have 4 elements (one per dimension of {data_format}), got {v}")
    if any(x < 1 for x in v):
        raise _E(f"{name} must be positive, got {v}")
    h, w, c = spatial_axes(data_format)
    if v[0] != 1 or v[c] != 1:
        raise _E(f"{what} over the batch or channel dimension is not supported: {name} {v} must be 1 in "
                 f"dimensions 0 and {c} ({data_format})")
    return v[h], v[w]


def _rank4(shape, what, data_format):
    if shape.ndims is not None and shape.ndims != 4:
        raise _E(f"{what} must be 4-dimensional ({data_format}), got shape {shape}")
    return shape if shape.ndims is not None else TensorShape([None] * 4)


def _nhwc_dims(shape, data_format):
    h, w, c = spatial_axes(data_format)
    return shape[0], shape[h], shape[w], shape[c]


def _make_shape(n, h, w, c, data_format):
    return TensorShape([n, h, w, c] if data_format == "NHWC" else [n, c, h, w])


def _conv_attrs(op):
    fmt = op.get_attr("data_format")
    sh, sw = _attr4(op, "strides", fmt, "striding")
    dh, dw = _attr4(op, "dilations", fmt, "dilation")
    return fmt, sh, sw, dh, dw, op.get_attr("padding")


def _conv_out_shape(in_shape, filter_shape, op, what="input"):
    """Output shape of Conv2D for ``in_shape`` (in the op's data_format) and an HWIO filter."""
    fmt, sh, sw, dh, dw, padding = _conv_attrs(op)
    n, h, w, c = _nhwc_dims(_rank4(in_shape, what, fmt), fmt)
    f = filter_shape
    if f.ndims is not None and f.ndims != 4:
        raise _E(f"filter must be 4-dimensional [height, width, in_channels, out_channels], got shape {f}")
    kh, kw, ci, co = f.dims if f.ndims is not None else [None] * 4
    if c is not None and ci is not None and c != ci:
        raise _E(f"input depth {c} does not match the filter's in_channels {ci} "
                 f"(input shape {in_shape}, filter shape {f})")
    oh = conv_output_size(h, kh, sh, dh, padding)[0]
    ow = conv_output_size(w, kw, sw, dw, padding)[0]
    return _make_shape(n, oh, ow, co, fmt)


def _conv2d_shape(op):
    return [_conv_out_shape(op.inputs[0].shape, op.inputs[1].shape, op)]


def _sizes_input(t, what):
    s = t.shape
    if s.ndims is not None and (s.ndims != 1 or (s[0] is not None and s[0] != 4)):
        raise _E(f"{what} must be a 4-element vector, got shape {s}")
    shape = constant_value_as_shape(t)
    if shape.ndims is None:
        return TensorShape([None] * 4)
    if shape.ndims != 4:
        raise _E(f"{what} must have 4 elements, got {shape}")
    return shape


def _check_backprop(op, in_shape, filter_shape, out_backprop_shape):
    expected = _conv_out_shape(in_shape, filter_shape, op)
    if not expected.is_compatible_with(out_backprop_shape):
        raise _E(f"out_backprop has shape {out_backprop_shape} but the convolution of an input of shape "
                 f"{in_shape} with a filter of shape {filter_shape} gives {expected}")


def _conv2d_backprop_input_shape(op):
    sizes, filt, dy = op.inputs
    in_shape = _sizes_input(sizes, "input_sizes")
    _check_backprop(op, in_shape, filt.shape, dy.shape)
    return [in_shape]


def _conv2d_backprop_filter_shape(op):
    x, sizes, dy = op.inputs
    f_shape = _sizes_input(sizes, "filter_sizes")
    _check_backprop(op, x.shape, f_shape, dy.shape)
    return [f_shape]


def _pool_out_shape(op, in_shape, what="input"):
    fmt = op.get_attr("data_format")
    kh, kw = _attr4(op, "ksize", fmt, "pooling")
    sh, sw = _attr4(op, "strides", fmt, "striding")
    n, h, w, c = _nhwc_dims(_rank4(in_shape, what, fmt), fmt)
    padding = op.get_attr("padding")
    return _make_shape(n, conv_output_size(h, kh, sh, 1, padding)[0],
                       conv_output_size(w, kw, sw, 1, padding)[0], c, fmt)


def _pool_shape(op):
    return [_pool_out_shape(op, op.inputs[0].shape)]


def _max_pool_grad_shape(op):
    x, y, g = op.inputs
    out = _pool_out_shape(op, x.shape, "orig_input")
    for t, what in ((y, "orig_output"), (g, "grad")):
        if not out.is_compatible_with(t.shape):
            raise _E(f"{what} has shape {t.shape} but pooling orig_input of shape {x.shape} gives {out}")
    return [_rank4(x.shape, "orig_input", op.get_attr("data_format"))]


def _avg_pool_grad_shape(op):
    sizes, g = op.inputs
    in_shape = _sizes_input(sizes, "orig_input_shape")
    out = _pool_out_shape(op, in_shape, "orig_input_shape")
    if not out.is_compatible_with(g.shape):
        raise _E(f"grad has shape {g.shape} but pooling an input of shape {in_shape} gives {out}")
    return [in_shape]


def _bias_add_shape(op):
    value, bias = op.inputs[0].shape, op.inputs[1].shape
    fmt = op.get_attr("data_format")
    if bias.ndims is not None and bias.ndims != 1:
        raise _E(f"bias must be 1-D, got shape {bias}")
    if value.ndims is not None:
        if value.ndims < 2:
            raise _E(f"value must have rank at least 2, got shape {value}")
        c_axis = -1 if fmt == "NHWC" else 1
        c = value[c_axis]
        b = bias[0] if bias.ndims == 1 else None
        if c is not None and b is not None and c != b:
            raise _E(f"bias has {b} elements but value {value} has {c} channels (dimension {c_axis % value.ndims}, "
                     f"{fmt})")
        if c is None and b is not None:
            dims = value.dims
            dims[c_axis] = b
            return [TensorShape(dims)]
    return [value]


def _bias_add_grad_shape(op):
    s = op.inputs[0].shape
    if s.ndims is None:
        return [TensorShape([None])]
    if s.ndims < 2:
        raise _E(f"out_backprop must have rank at least 2, got shape {s}")
    return [TensorShape([s[-1] if op.get_attr("data_format") == "NHWC" else s[1]])]


def _softmax_shape(op):
    s = op.inputs[0].shape
    if s.ndims == 0:
        raise _E("logits must have rank at least 1, got a scalar")
    return [s]


def _xent_shape(op):
    logits, labels = op.inputs[0].shape, op.inputs[1].shape
    for what, s in (("logits", logits), ("labels", labels)):
        if s.ndims is not None and s.ndims != 2:
            raise _E(f"{what} must be 2-dimensional [batch_size, num_classes], got shape {s}")
    if not logits.is_compatible_with(labels):
        raise _E(f"logits and labels must have the same shape, got logits {logits} and labels {labels}")
    s = logits.merge_with(labels) if logits.ndims is not None or labels.ndims is not None else TensorShape([None] * 2)
    return [TensorShape([s[0]]), s]


def _sparse_xent_shape(op):
    logits, labels = op.inputs[0].shape, op.inputs[1].shape
    if logits.ndims is not None and logits.ndims != 2:
        raise _E(f"logits must be 2-dimensional [batch_size, num_classes], got shape {logits}")
    if labels.ndims is not None and labels.ndims != 1:
        raise _E(f"labels must be 1-dimensional [batch_size], got shape {labels}")
    lg = logits if logits.ndims is not None else TensorShape([None] * 2)
    lb = labels if labels.ndims is not None else TensorShape([None])
    if lg[0] is not None and lb[0] is not None and lg[0] != lb[0]:
        raise _E(f"logits and labels must have the same first dimension, got logits {logits} and labels {labels}")
    batch = lg[0] if lg[0] is not None else lb[0]
    return [TensorShape([batch]), TensorShape([batch, lg[1]])]


def _in_top_k_shape(op):
    p, t = op.inputs[0].shape, op.inputs[1].shape
    if p.ndims is not None and p.ndims != 2:
        raise _E(f"predictions must be 2-dimensional [batch_size, num_classes], got shape {p}")
    if t.ndims is not None and t.ndims != 1:
        raise _E(f"targets must be 1-dimensional [batch_size], got shape {t}")
    b0 = p[0] if p.ndims is not None else None
    b1 = t[0] if t.ndims is not None else None
    if b0 is not None and b1 is not None and b0 != b1:
        raise _E(f"predictions and targets must have the same first dimension, got {p} and {t}")
    return [TensorShape([b0 if b0 is not None else b1])]


def _grad_pair_shape(op):
    """Activation gradients: ``gradients`` and ``features``/``outputs`` have one shape."""
    return shape_fns.merge_all(op)[:1]


def register_ops(reg):
    reg.op("Relu", inputs=["features: T"], outputs=["activations: T"], attrs=[_REALNUM], shape_fn=shape_fns.unchanged)
    reg.op("Relu6", inputs=["features: T"], outputs=["activations: T"], attrs=[_REALNUM],
           shape_fn=shape_fns.unchanged, doc="min(max(features, 0), 6).")
    reg.op("Elu", inputs=["features: T"], outputs=["activations: T"], attrs=[_FLOAT], shape_fn=shape_fns.unchanged,
           doc="exp(features) - 1 where features < 0, else features.")
    reg.op("Softplus", inputs=["features: T"], outputs=["activations: T"], attrs=[_FLOAT],
           shape_fn=shape_fns.unchanged, doc="log(exp(features) + 1), computed without overflow.")
    for name, second in (("ReluGrad", "features"), ("Relu6Grad", "features"), ("SoftplusGrad", "features"),
                         ("EluGrad", "outputs")):
        reg.op(name, inputs=["gradients: T", f"{second}: T"], outputs=["backprops: T"],
               attrs=[_FLOAT if name in ("EluGrad", "SoftplusGrad") else _REALNUM], shape_fn=_grad_pair_shape,
               doc=f"Gradient of {name[:-4]} given the gradients of its output and its {second}.")
    reg.op("Softmax", inputs=["logits: T"], outputs=["softmax: T"], attrs=[_FLOAT], shape_fn=_softmax_shape,
           doc="exp(logits) / sum(exp(logits)) along the last dimension (max-shifted).")
    reg.op("LogSoftmax", inputs=["logits: T"], outputs=["logsoftmax: T"], attrs=[_FLOAT], shape_fn=_softmax_shape,
           doc="logits - log(sum(exp(logits))) along the last dimension (max-shifted).")
    reg.op("SoftmaxCrossEntropyWithLogits", inputs=["features: T", "labels: T"], outputs=["loss: T", "backprop: T"],
           attrs=[_FLOAT], shape_fn=_xent_shape,
           doc="Per-example cross-entropy of softmax(features) against label distributions, and its "
               "gradient with respect to features.")
    reg.op("SparseSoftmaxCrossEntropyWithLogits", inputs=["features: T", "labels: Tlabels"],
           outputs=["loss: T", "backprop: T"], attrs=[_FLOAT, "Tlabels: {int32, int64} = int64"],
           shape_fn=_sparse_xent_shape,
           doc="Per-example cross-entropy of softmax(features) against class indices, and its gradient.")
    conv_attrs = [_FLOAT, "strides: list(int)", "use_cudnn_on_gpu: bool = true", _PADDING, _FORMAT,
                  "dilations: list(int) = [1, 1, 1, 1]"]
    reg.op("Conv2D", inputs=["input: T", "filter: T"], outputs=["output: T"], attrs=conv_attrs,
           shape_fn=_conv2d_shape, doc="2-D convolution (cross-correlation) of an image batch with an HWIO filter.")
    reg.op("Conv2DBackpropInput", inputs=["input_sizes: int32", "filter: T", "out_backprop: T"],
           outputs=["output: T"], attrs=conv_attrs, shape_fn=_conv2d_backprop_input_shape,
           doc="Gradient of Conv2D with respect to its input (also the transposed convolution).")
    reg.op("Conv2DBackpropFilter", inputs=["input: T", "filter_sizes: int32", "out_backprop: T"],
           outputs=["output: T"], attrs=conv_attrs, shape_fn=_conv2d_backprop_filter_shape,
           doc="Gradient of Conv2D with respect to its filter.")
    pool_attrs = ["ksize: list(int)", "strides: list(int)", _PADDING, _FORMAT]
    reg.op("MaxPool", inputs=["input: T"], outputs=["output: T"], attrs=[_POOL_T] + pool_attrs, shape_fn=_pool_shape)
    reg.op("MaxPoolGrad", inputs=["orig_input: T", "orig_output: T", "grad: T"], outputs=["output: T"],
           attrs=[_FLOAT] + pool_attrs, shape_fn=_max_pool_grad_shape,
           doc="Routes each output gradient to the first maximum of its window (row-major order).")
    reg.op("AvgPool", inputs=["value: T"], outputs=["output: T"], attrs=[_FLOAT] + pool_attrs, shape_fn=_pool_shape,
           doc="Window means; with SAME padding each window averages only its elements inside the input.")
    reg.op("AvgPoolGrad", inputs=["orig_input_shape: int32", "grad: T"], outputs=["output: T"],
           attrs=[_FLOAT] + pool_attrs, shape_fn=_avg_pool_grad_shape)
    bias_t = "T: {float16, float32, float64, int8, int16, int32, int64, uint8, complex64, complex128}"
    reg.op("BiasAdd", inputs=["value: T", "bias: T"], outputs=["output: T"], attrs=[bias_t, _FORMAT],
           shape_fn=_bias_add_shape, doc="value + bias, bias (1-D) added along the channel dimension.")
    reg.op("BiasAddGrad", inputs=["out_backprop: T"], outputs=["output: T"], attrs=[bias_t, _FORMAT],
           shape_fn=_bias_add_grad_shape, doc="Sum of out_backprop over every dimension but the channel one.")
    reg.op("L2Loss", inputs=["t: T"], outputs=["output: T"], attrs=[_FLOAT], shape_fn=shape_fns.scalar,
           doc="sum(t ** 2) / 2.")
    reg.op("InTopK", inputs=["predictions: float32", "targets: T"], outputs=["precision: bool"],
           attrs=["k: int", "T: {int32, int64} = int32"], shape_fn=_in_top_k_shape,
           doc="Whether each target class is among the k largest predictions (ties count as in).")
    reg.op("CheckNumerics", inputs=["tensor: T"], outputs=["output: T"], attrs=[_FLOAT, "message: string"],
           shape_fn=shape_fns.unchanged,
           doc="Passes its input through; fails the step with InvalidArgumentError if it has a NaN or Inf.")


# ---------------------------------------------------------------------------------------
# wrappers: activations
def relu(features, name=None):
    """max(features, 0)."""
    return apply_op("Relu", [features], name=name)


def relu6(features, name=None):
    """min(max(features, 0), 6)."""
    return apply_op("Relu6", [features], name=name)


def elu(features, name=None):
    """Exponential linear unit: exp(features) - 1 where features < 0, else features."""
    return apply_op("Elu", [features], name=name)


def softplus(features, name=None):
    """log(exp(features) + 1), stable for large |features|."""
    return apply_op("Softplus", [features], name=name)


# ---------------------------------------------------------------------------------------
# softmax and cross-entropies
def _axis_arg(axis, dim, fn):
    if axis is not None and dim is not None:
        raise _E(f"{fn}: pass only one of axis and dim")
    axis = dim if axis is None else axis
    if axis is None:
        return -1
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise _E(f"{fn}: axis must be an int, got {axis!r}")
    return int(axis)


def _swap_last(x, axis, fn):
    """A permutation putting ``axis`` last (its own inverse), or None if it already is."""
    nd = x.shape.ndims
    if nd is None:
        if axis == -1:
            return None
        raise _E(f"{fn}: axis {axis} needs the rank of '{x.name}', which is unknown")
    axis = shape_fns.normalize_axis(axis, nd, "axis") if nd else axis
    if nd == 0 or axis == nd - 1:
        return None
    perm = list(range(nd))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return perm


def _last_axis_op(op_type, logits, axis, name, fn):
    logits = convert_to_tensor(logits)
    perm = _swap_last(logits, axis, fn)
    if perm is None:
        return apply_op(op_type, [logits], name=name)
    with get_default_graph().name_scope(name or fn):
        out = apply_op(op_type, [array_ops.transpose(logits, perm)])
        return array_ops.transpose(out, perm)


def softmax(logits, axis=None, name=None, dim=None):
    """Softmax along ``axis`` (default the last; ``dim`` is the TF1 alias)."""
    return _last_axis_op("Softmax", logits, _axis_arg(axis, dim, "softmax"), name, "softmax")


def log_softmax(logits, axis=None, name=None, dim=None):
    """Log of the softmax along ``axis`` (default the last), computed stably."""
    return _last_axis_op("LogSoftmax", logits, _axis_arg(axis, dim, "log_softmax"), name, "log_softmax")


def _ensure_xent_args(fn, sentinel, labels, logits):
    if sentinel is not None:
        raise _E(f"{fn}: only call it with named arguments (labels=..., logits=..., ...)")
    if labels is None or logits is None:
        raise _E(f"{fn}: both labels and logits must be provided")


def _flatten_to_2d(x, fn):
    """``x`` reshaped to [-1, last dimension] (its rank must be known)."""
    nd = x.shape.ndims
    if nd == 2:
        return x
    last = x.shape[-1]
    if last is None:
        last = array_ops.strided_slice(array_ops.shape(x), [nd - 1], [nd])
        return array_ops.reshape(x, array_ops.concat([[-1], last], 0))
    return array_ops.reshape(x, [-1, last])


def _restore_leading(loss, like, fn):
    """Reshape a per-row loss back to ``like.shape[:-1]``."""
    nd = like.shape.ndims
    if nd == 2:
        return loss
    lead = like.shape[:-1]
    if lead.is_fully_defined():
        return array_ops.reshape(loss, lead.as_list())
    out = array_ops.reshape(loss, array_ops.strided_slice(array_ops.shape(like), [0], [nd - 1]))
    out.set_shape(lead)
    return out


def softmax_cross_entropy_with_logits_v2(_sentinel=None, labels=None, logits=None, dim=-1, name=None, axis=None):
    """Cross-entropy between ``labels`` (a distribution per row) and ``softmax(logits)``
    along ``dim``; gradients flow into both logits and labels. Returns a tensor with the
    shape of ``logits`` minus ``dim``."""
    fn = "softmax_cross_entropy_with_logits"
    _ensure_xent_args(fn, _sentinel, labels, logits)
    dim = _axis_arg(axis, None if dim == -1 else dim, fn)
    with get_default_graph().name_scope(name or "softmax_cross_entropy_with_logits") as scope:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, dtype=logits.dtype, name="labels")
        if not logits.shape.is_compatible_with(labels.shape):
            raise _E(f"{fn}: logits and labels must have the same shape, got logits {logits.shape} and "
                     f"labels {labels.shape}")
        nd = logits.shape.ndims if logits.shape.ndims is not None else labels.shape.ndims
        if nd is None:
            if dim != -1:
                raise _E(f"{fn}: dim {dim} needs the rank of logits, which is unknown")
            loss, _ = apply_op("SoftmaxCrossEntropyWithLogits", [logits, labels], _exact_name=scope.rstrip("/"))
            return loss
        if nd == 0:
            raise _E(f"{fn}: logits must have rank at least 1, got a scalar")
        perm = _swap_last(logits, dim, fn)
        if perm is not None:
            # Move dim to the end keeping the other dimensions in order: they are the loss's.
            d = perm[-1]
            perm = [i for i in range(nd) if i != d] + [d]
            logits, labels = array_ops.transpose(logits, perm), array_ops.transpose(labels, perm)
        shaped_like = logits
        if nd == 1:
            logits2, labels2 = array_ops.expand_dims(logits, 0), array_ops.expand_dims(labels, 0)
        else:
            logits2, labels2 = _flatten_to_2d(logits, fn), _flatten_to_2d(labels, fn)
        if nd == 2:
            loss, _ = apply_op("SoftmaxCrossEntropyWithLogits", [logits2, labels2], _exact_name=scope.rstrip("/"))
            return loss
        loss, _ = apply_op("SoftmaxCrossEntropyWithLogits", [logits2, labels2])
        if nd == 1:
            return apply_op("Reshape", [loss, array_ops.constant(np.zeros(0, np.int32))], _exact_name=scope.rstrip("/"))
        return _restore_leading(loss, shaped_like, fn)


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1, name=None):
    """TF1 ``tf.nn.softmax_cross_entropy_with_logits``: as the ``_v2`` form, but no gradient
    flows into ``labels``. Keyword arguments only."""
    _ensure_xent_args("softmax_cross_entropy_with_logits", _sentinel, labels, logits)
    if isinstance(labels, Tensor) or hasattr(labels, "_as_graph_element"):
        labels = array_ops.stop_gradient(labels)
    return softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits, dim=dim, name=name)


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """Cross-entropy of ``softmax(logits)`` against integer class ``labels`` (shape
    ``logits.shape[:-1]``, values in ``[0, num_classes)``; others fail at run time)."""
    fn = "sparse_softmax_cross_entropy_with_logits"
    _ensure_xent_args(fn, _sentinel, labels, logits)
    with get_default_graph().name_scope(name or "SparseSoftmaxCrossEntropyWithLogits") as scope:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, name="labels")
        if labels.dtype not in (dtypes.int32, dtypes.int64):
            raise _E(f"{fn}: labels must be int32 or int64, got {labels.dtype.name}")
        ls, gs = logits.shape, labels.shape
        if ls.ndims == 0:
            raise _E(f"{fn}: logits must have rank at least 1, got a scalar")
        if ls.ndims is not None and gs.ndims is not None:
            if gs.ndims != ls.ndims - 1:
                raise _E(f"{fn}: rank mismatch: labels must have rank {ls.ndims - 1} (the rank of logits minus "
                         f"1), got labels {gs} and logits {ls}")
            if not gs.is_compatible_with(ls[:-1]):
                raise _E(f"{fn}: shape mismatch: labels {gs} must match the first dimensions of logits {ls}")
        if ls.ndims is None or ls.ndims == 2:
            loss, _ = apply_op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                               _exact_name=scope.rstrip("/"))
            return loss
        logits2 = _flatten_to_2d(logits, fn) if ls.ndims > 1 else array_ops.expand_dims(logits, 0)
        labels1 = array_ops.reshape(labels, [-1])
        loss, _ = apply_op("SparseSoftmaxCrossEntropyWithLogits", [logits2, labels1])
        if ls.ndims == 1:
            return array_ops.reshape(loss, [])
        return _restore_leading(loss, logits, fn)


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """Element-wise logistic loss ``-z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x))`` with
    ``x = logits``, ``z = labels``, computed as TensorFlow does, without overflow::

        max(x, 0) - x * z + log(1 + exp(-|x|))

    Here ``-|x|`` is ``x - 2 max(x, 0)`` (exact in floating point) and ``log(1 + exp(.))``
    is ``Softplus``, so the whole formula is differentiated by the nn ops' own gradients.
    """
    fn = "sigmoid_cross_entropy_with_logits"
    _ensure_xent_args(fn, _sentinel, labels, logits)

    with get_default_graph().name_scope(name or "logistic_loss") as scope:
        logits = convert_to_tensor(logits, name="logits")
        labels = convert_to_tensor(labels, dtype=logits.dtype, name="labels")
        if not logits.shape.is_compatible_with(labels.shape):
            raise _E(f"{fn}: logits and labels must have the same shape, got logits {logits.shape} and "
                     f"labels {labels.shape}")
        relu_logits = relu(logits)
        neg_abs_logits = math_ops.subtract(logits, math_ops.multiply(relu_logits, 2.0))
        return apply_op("Add", [math_ops.subtract(relu_logits, math_ops.multiply(logits, labels)),
                                softplus(neg_abs_logits)], _exact_name=scope.rstrip("/"))


# ---------------------------------------------------------------------------------------
# convolution, pooling, bias
def _int_list(v, what, fn):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return [int(v)]
    try:
        out = [int(x) for x in v]
    except (TypeError, ValueError):
        raise _E(f"{fn}: {what} must be a list of ints, got {v!r}") from None
    if any(isinstance(x, bool) for x in v):
        raise _E(f"{fn}: {what} must be a list of ints, got {v!r}")
    return out


def _conv_kwargs(strides, padding, data_format, dilations, use_cudnn_on_gpu, fn):
    attrs = {"strides": _int_list(strides, "strides", fn), "padding": padding,
             "data_format": data_format, "use_cudnn_on_gpu": use_cudnn_on_gpu}
    if dilations is not None:
        attrs["dilations"] = _int_list(dilations, "dilations", fn)
    return attrs


def conv2d(input, filter, strides, padding, use_cudnn_on_gpu=True, data_format="NHWC",  # noqa: A002
           dilations=None, name=None):
    """2-D convolution of a 4-D ``input`` with a ``[height, width, in, out]`` ``filter``
    (``tf.nn.conv2d``). ``strides``/``dilations``: 4 ints, 1 in the batch and channel
    dimensions; ``padding``: ``"SAME"`` or ``"VALID"``."""
    return apply_op("Conv2D", [input, filter],
                    _conv_kwargs(strides, padding, data_format, dilations, use_cudnn_on_gpu, "conv2d"), name=name)


def _sizes_tensor(sizes, what):
    if isinstance(sizes, TensorShape):
        sizes = sizes.as_list()
    return array_ops._index_tensor(sizes, what, dtype=dtypes.int32)


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,  # noqa: A002
                          use_cudnn_on_gpu=True, data_format="NHWC", dilations=None, name=None):
    """Gradient of ``conv2d`` with respect to an input of shape ``input_sizes``."""
    return apply_op("Conv2DBackpropInput", [_sizes_tensor(input_sizes, "input_sizes"), filter, out_backprop],
                    _conv_kwargs(strides, padding, data_format, dilations, use_cudnn_on_gpu,
                                 "conv2d_backprop_input"), name=name)


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,  # noqa: A002
                           use_cudnn_on_gpu=True, data_format="NHWC", dilations=None, name=None):
    """Gradient of ``conv2d`` with respect to a filter of shape ``filter_sizes``."""
    return apply_op("Conv2DBackpropFilter", [input, _sizes_tensor(filter_sizes, "filter_sizes"), out_backprop],
                    _conv_kwargs(strides, padding, data_format, dilations, use_cudnn_on_gpu,
                                 "conv2d_backprop_filter"), name=name)


def conv2d_transpose(value, filter, output_shape, strides, padding="SAME", data_format="NHWC",  # noqa: A002
                     name=None):
    """Transposed convolution (``tf.nn.conv2d_transpose``): the gradient of ``conv2d``
    with respect to its input, for a ``[height, width, out, in]`` ``filter``."""
    with get_default_graph().name_scope(name or "conv2d_transpose") as scope:
        return apply_op("Conv2DBackpropInput", [_sizes_tensor(output_shape, "output_shape"), filter, value],
                        _conv_kwargs(strides, padding, data_format, None, True, "conv2d_transpose"),
                        _exact_name=scope.rstrip("/"))


def _pool(op_type, value, ksize, strides, padding, data_format, name, fn):
    return apply_op(op_type, [value], {"ksize": _int_list(ksize, "ksize", fn),
                                       "strides": _int_list(strides, "strides", fn),
                                       "padding": padding, "data_format": data_format}, name=name)


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None):
    """Max pooling over ``ksize`` windows (4 ints, 1 in the batch and channel dimensions)."""
    return _pool("MaxPool", value, ksize, strides, padding, data_format, name, "max_pool")


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None):
    """Average pooling; with SAME padding the padded positions do not count."""
    return _pool("AvgPool", value, ksize, strides, padding, data_format, name, "avg_pool")


def bias_add(value, bias, data_format=None, name=None):
    """``value + bias`` with the 1-D ``bias`` along the channel dimension (the last for
    ``NHWC``/None, the second for ``NCHW``)."""
    attrs = {} if data_format is None else {"data_format": data_format}
    return apply_op("BiasAdd", [value, bias], attrs, name=name)


def xw_plus_b(x, weights, biases, name=None):
    """``matmul(x, weights) + biases``."""
    with get_default_graph().name_scope(name or "xw_plus_b") as scope:
        return apply_op("BiasAdd", [math_ops.matmul(x, weights), biases], _exact_name=scope.rstrip("/"))


# ---------------------------------------------------------------------------------------
# losses, metrics, regularisation
def l2_loss(t, name=None):
    """sum(t ** 2) / 2, a scalar."""
    return apply_op("L2Loss", [t], name=name)


def in_top_k(predictions, targets, k, name=None):
    """For each row, whether ``targets[i]`` is among the ``k`` largest ``predictions[i]``
    (ties at the boundary count as in; non-finite predictions and out-of-range targets as
    out)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise _E(f"in_top_k: k must be an int, got {k!r}")
    return apply_op("InTopK", [predictions, targets], {"k": int(k)}, name=name)


def moments(x, axes, shift=None, name=None, keep_dims=False):
    """Mean and variance of ``x`` over ``axes`` (``tf.nn.moments``)."""
    with get_default_graph().name_scope(name or "moments"):
        x = convert_to_tensor(x)
        y = math_ops.cast(x, dtypes.float32) if x.dtype is dtypes.float16 else x
        mean = math_ops.reduce_mean(y, axes, keep_dims=True, name="mean")
        variance = math_ops.reduce_mean(math_ops.squared_difference(y, array_ops.stop_gradient(mean)), axes,
                                        keep_dims=True, name="variance")
        if not keep_dims:
            mean = array_ops.squeeze(mean, axes)
            variance = array_ops.squeeze(variance, axes)
        if x.dtype is dtypes.float16:
            return math_ops.cast(mean, dtypes.float16), math_ops.cast(variance, dtypes.float16)
        return mean, variance


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """Keep each element of ``x`` with probability ``keep_prob`` and scale it by
    ``1 / keep_prob``; zero the others (``tf.nn.dropout``). ``keep_prob`` is a float in
    (0, 1] or a scalar tensor (``rate = 1 - keep_prob`` is the newer spelling).
    ``noise_shape`` (broadcastable to the shape of ``x``) makes elements drop together."""
    if keep_prob is not None and rate is not None:
        raise _E("dropout: pass only one of keep_prob and rate")
    if keep_prob is None:
        if rate is None:
            raise _E("dropout: keep_prob is required")
        keep_prob = 1 - rate if not (isinstance(rate, Tensor) or hasattr(rate, "_as_graph_element")) else None
        if keep_prob is None:
            with get_default_graph().name_scope(name or "dropout"):
                keep_prob = math_ops.subtract(1.0, convert_to_tensor(rate))
    with get_default_graph().name_scope(name or "dropout") as scope:
        x = convert_to_tensor(x, name="x")
        if not x.dtype.is_floating:
            raise _E(f"dropout: x must be a floating-point tensor, got {x.dtype.name} '{x.name}'")
        is_tensor = isinstance(keep_prob, Tensor) or hasattr(keep_prob, "_as_graph_element")
        if is_tensor:
            keep_prob = convert_to_tensor(keep_prob, dtype=x.dtype, name="keep_prob")
            if keep_prob.shape.ndims not in (None, 0):
                raise _E(f"dropout: keep_prob must be a scalar, got shape {keep_prob.shape}")
            kp_value = constant_value(keep_prob)
        else:
            kp_value = keep_prob
        if kp_value is not None:
            try:
                kp = float(np.asarray(kp_value).reshape(()))
            except (TypeError, ValueError):
                raise _E(f"dropout: keep_prob must be a scalar float in (0, 1], got {kp_value!r}") from None
            if isinstance(kp_value, bool) or not 0 < kp <= 1:
                raise _E(f"dropout: keep_prob must be a scalar float in the range (0, 1], got {kp_value!r}")
            if kp == 1 and not is_tensor:
                return x
        if noise_shape is None:
            noise_shape = x.shape.as_list() if x.shape.is_fully_defined() else array_ops.shape(x)
        uniform = random_ops.random_uniform(noise_shape, seed=seed, dtype=x.dtype)
        if is_tensor:
            keep = math_ops.floor(math_ops.add(keep_prob, uniform))
            scale = math_ops.truediv(keep, keep_prob)
        else:
            keep = math_ops.floor(math_ops.add(uniform, kp))
            scale = math_ops.multiply(keep, 1.0 / kp)
        out = apply_op("Mul", [x, scale], _exact_name=scope.rstrip("/"))
        if x.shape.ndims is not None:
            out.set_shape(x.shape)
        return out


# ---------------------------------------------------------------------------------------
# numerics checking (whitepaper section 6, lesson 5)
def check_numerics(tensor, message, name=None):
    """``tensor`` unchanged; running it fails with InvalidArgumentError naming the op and
    ``message`` if ``tensor`` has a NaN or an infinity."""
    if not isinstance(message, str | bytes):
        raise _E(f"check_numerics: message must be a string, got {message!r}")
    return apply_op("CheckNumerics", [tensor], {"message": message}, name=name)


def add_check_numerics_ops():
    """A ``CheckNumerics`` for every floating-point output in the default graph, grouped in
    one op to run with the training step (``tf.add_check_numerics_ops``). The checks run one
    after another (control dependencies), so the first non-finite tensor is the one reported.
    Variables, the ops that update them, and existing checks are skipped."""
    g = get_default_graph()
    check_op = None
    floats = (dtypes.float16, dtypes.float32, dtypes.float64)
    for op in list(g.get_operations()):
        # Updates (Assign*, Apply*) must not run just because their result is checked.
        if op.type == "CheckNumerics" or op.op_def.outputs_ref or any(a.is_ref for a in op.op_def.inputs):
            continue
        for out in op.outputs:
            if out.dtype not in floats:
                continue
            message = f"{op.name}:{out.value_index}"
            with g.control_dependencies([check_op] if check_op is not None else []):
                check_op = check_numerics(out, message=message, name=f"CheckNumerics_{op.name.replace('/', '_')}")
    if check_op is None:
        return control_flow_ops.no_op(name="add_check_numerics_ops")
    return control_flow_ops.group(check_op, name="add_check_numerics_ops")
