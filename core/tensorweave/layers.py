"""``tw.layers``: dense, convolutions (1-D, 2-D, transposed 2-D, separable 2-D), pooling
(1-D, 2-D), flatten, dropout, batch normalization built from graph ops.

TensorFlow 1.x's functional layers. A layer with variables opens a variable scope named
``name`` (or a unique ``dense``, ``dense_1``, ``conv2d``, ...) and creates them with
``tw.get_variable`` (``<scope>/kernel``, ``<scope>/bias``), so ``reuse=True`` (or an
enclosing scope with reuse) shares them. Images are NHWC (``data_format="channels_last"``);
sequences are ``[batch, width, channels]``, and the 1-D layers are the 2-D ops over a height
of 1, as in TensorFlow.

``kernel_regularizer``/``bias_regularizer`` are passed to ``get_variable`` (their losses join
``GraphKeys.REGULARIZATION_LOSSES`` when the variable is created);
``activity_regularizer(outputs)`` joins the same collection. Constraints are not supported.
Not provided, for want of kernels: 3-D convolution and pooling. ``batch_normalization``
(and the ``BatchNormalization`` class) puts its moving-average updates in
``GraphKeys.UPDATE_OPS``; see its docstring.

``dropout(training=...)``: there is no ``tw.cond`` yet, so ``training`` is a Python bool, a
constant, or a bool/float scalar Tensor (e.g. a placeholder). A Tensor selects the keep
probability at run time without branching: ``keep_prob = 1 - rate * training``, and
dropout with keep probability 1 returns its input exactly. ``rate`` may itself be a scalar
Tensor.
"""

from __future__ import annotations

import numbers

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, constant_value, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, control_flow_ops, init_ops, math_ops, nn, state_ops
from tensorweave.ops import variable_scope as vs

__all__ = ["dense", "conv1d", "conv2d", "conv2d_transpose", "max_pooling1d", "average_pooling1d", "max_pooling2d",
           "average_pooling2d", "flatten", "dropout", "separable_conv2d", "batch_normalization",
           "BatchNormalization"]

_E = errors.InvalidArgumentError


def _unsupported(fn, **kw):
    for k, v in kw.items():
        if v is not None:
            raise errors.UnimplementedError(f"tw.layers.{fn}: {k} is not supported")


def _float_input(inputs, fn):
    x = convert_to_tensor(inputs, name="inputs")
    if not x.dtype.is_floating:
        raise _E(f"tw.layers.{fn}: inputs must be a floating-point tensor, got {x.dtype.name} '{x.name}'")
    return x


def _pair(v, what, fn):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return [int(v), int(v)]
    try:
        out = [int(x) for x in v]
    except (TypeError, ValueError):
        raise _E(f"tw.layers.{fn}: {what} must be an int or a pair of ints, got {v!r}") from None
    if len(out) != 2 or any(x <= 0 for x in out):
        raise _E(f"tw.layers.{fn}: {what} must be an int or a pair of positive ints, got {v!r}")
    return out


def _padding(padding, fn):
    if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
        raise _E(f"tw.layers.{fn}: padding must be 'valid' or 'same', got {padding!r}")
    return padding.upper()


def _channels_last(data_format, fn):
    if data_format != "channels_last":
        raise errors.UnimplementedError(
            f"tw.layers.{fn}: only data_format='channels_last' (NHWC) is supported, got {data_format!r}")


def _activate(outputs, activation):
    if activation is None:
        return outputs
    if not callable(activation):
        raise _E(f"tw.layers: activation must be callable or None, got {activation!r}")
    return activation(outputs)


def _check_regularizers(fn, **regs):
    for k, v in regs.items():
        if v is not None and not callable(v):
            raise _E(f"tw.layers.{fn}: {k} must be a callable (e.g. tw.contrib.layers.l2_regularizer(0.01)) "
                     f"or None, got {v!r}")


def _regularize_activity(outputs, activity_regularizer):
    """TF1's layers add ``activity_regularizer(outputs)`` to REGULARIZATION_LOSSES."""
    if activity_regularizer is None:
        return outputs
    g = get_default_graph()
    with g.name_scope("ActivityRegularizer"):
        loss = activity_regularizer(outputs)
    if loss is not None:
        g.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return outputs


def matmul_last_axis(x, kernel, in_dim, units):
    """``x @ kernel`` over the last axis of ``x`` (of any rank >= 2), keeping the leading
    dimensions (shared with ``tw.contrib.layers.fully_connected``)."""
    rank = x.shape.ndims
    if rank == 2:
        return math_ops.matmul(x, kernel)
    outer = x.shape[:-1]
    flat = array_ops.reshape(x, [-1, in_dim])
    outputs = math_ops.matmul(flat, kernel)
    if outer.is_fully_defined():
        out_shape = outer.as_list() + [units]
    else:
        out_shape = array_ops.concat(
            [array_ops.strided_slice(array_ops.shape(x), [0], [rank - 1], [1]), [units]], 0)
    outputs = array_ops.reshape(outputs, out_shape, name="Tensordot")
    outputs.set_shape(outer.concatenate([units]))
    return outputs


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
          reuse=None):
    """``activation(inputs @ kernel + bias)`` over the last dimension of ``inputs``.

    ``kernel`` is ``[inputs.shape[-1], units]`` (glorot_uniform unless ``kernel_initializer``),
    ``bias`` ``[units]`` (zeros). Inputs of rank above 2 are multiplied along their last axis.
    """
    _unsupported("dense", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    _check_regularizers("dense", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                        activity_regularizer=activity_regularizer)
    if isinstance(units, bool) or not isinstance(units, numbers.Integral) or units <= 0:
        raise _E(f"tw.layers.dense: units must be a positive int, got {units!r}")
    units = int(units)
    with vs.variable_scope(name, default_name="dense", reuse=reuse):
        x = _float_input(inputs, "dense")
        if x.shape.ndims is None or x.shape.ndims < 2:
            raise _E(f"tw.layers.dense: inputs must have rank at least 2, got '{x.name}' of shape {x.shape}")
        in_dim = x.shape[-1]
        if in_dim is None:
            raise _E(f"tw.layers.dense: the last dimension of the inputs must be known, got shape {x.shape}")
        kernel = vs.get_variable("kernel", [in_dim, units], dtype=x.dtype, initializer=kernel_initializer,
                                 regularizer=kernel_regularizer, trainable=trainable)
        bias = vs.get_variable("bias", [units], dtype=x.dtype, initializer=bias_initializer,
                               regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        outputs = matmul_last_axis(x, kernel, in_dim, units)
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _regularize_activity(_activate(outputs, activation), activity_regularizer)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """2-D convolution of NHWC ``inputs`` with a ``kernel_size + [in_channels, filters]``
    kernel, plus a ``[filters]`` bias, then ``activation``."""
    _unsupported("conv2d", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    _check_regularizers("conv2d", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                        activity_regularizer=activity_regularizer)
    _channels_last(data_format, "conv2d")
    if isinstance(filters, bool) or not isinstance(filters, numbers.Integral) or filters <= 0:
        raise _E(f"tw.layers.conv2d: filters must be a positive int, got {filters!r}")
    kh, kw = _pair(kernel_size, "kernel_size", "conv2d")
    sh, sw = _pair(strides, "strides", "conv2d")
    dh, dw = _pair(dilation_rate, "dilation_rate", "conv2d")
    pad = _padding(padding, "conv2d")
    with vs.variable_scope(name, default_name="conv2d", reuse=reuse):
        x = _float_input(inputs, "conv2d")
        if x.shape.ndims is not None and x.shape.ndims != 4:
            raise _E(f"tw.layers.conv2d: inputs must be 4-D (NHWC), got '{x.name}' of shape {x.shape}")
        in_ch = x.shape[-1]
        if in_ch is None:
            raise _E(f"tw.layers.conv2d: the channel dimension of the inputs must be known, got shape {x.shape}")
        kernel = vs.get_variable("kernel", [kh, kw, in_ch, int(filters)], dtype=x.dtype,
                                 initializer=kernel_initializer, regularizer=kernel_regularizer, trainable=trainable)
        bias = vs.get_variable("bias", [int(filters)], dtype=x.dtype, initializer=bias_initializer,
                               regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        kwargs = {} if (dh, dw) == (1, 1) else {"dilations": [1, dh, dw, 1]}
        outputs = nn.conv2d(x, kernel, strides=[1, sh, sw, 1], padding=pad, **kwargs)
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _regularize_activity(_activate(outputs, activation), activity_regularizer)


def _int1(v, what, fn):
    """An int, or a 1-element list/tuple of one (the 1-D layers' sizes)."""
    if isinstance(v, list | tuple) and len(v) == 1:
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
        raise _E(f"tw.layers.{fn}: {what} must be a positive int, got {v!r}")
    return int(v)


def _sequence_input(inputs, fn):
    x = _float_input(inputs, fn)
    if x.shape.ndims is not None and x.shape.ndims != 3:
        raise _E(f"tw.layers.{fn}: inputs must be 3-D [batch, width, channels], got '{x.name}' of shape {x.shape}")
    return x


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
           dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """1-D convolution of ``[batch, width, channels]`` ``inputs`` with a
    ``[kernel_size, channels, filters]`` kernel, plus a ``[filters]`` bias, then
    ``activation``: a 2-D convolution over a height of 1, as TensorFlow computes it."""
    _unsupported("conv1d", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    _check_regularizers("conv1d", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                        activity_regularizer=activity_regularizer)
    _channels_last(data_format, "conv1d")
    if isinstance(filters, bool) or not isinstance(filters, numbers.Integral) or filters <= 0:
        raise _E(f"tw.layers.conv1d: filters must be a positive int, got {filters!r}")
    k = _int1(kernel_size, "kernel_size", "conv1d")
    s = _int1(strides, "strides", "conv1d")
    d = _int1(dilation_rate, "dilation_rate", "conv1d")
    pad = _padding(padding, "conv1d")
    with vs.variable_scope(name, default_name="conv1d", reuse=reuse):
        x = _sequence_input(inputs, "conv1d")
        in_ch = x.shape[-1]
        if in_ch is None:
            raise _E(f"tw.layers.conv1d: the channel dimension of the inputs must be known, got shape {x.shape}")
        kernel = vs.get_variable("kernel", [k, in_ch, int(filters)], dtype=x.dtype, initializer=kernel_initializer,
                                 regularizer=kernel_regularizer, trainable=trainable)
        bias = vs.get_variable("bias", [int(filters)], dtype=x.dtype, initializer=bias_initializer,
                               regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        with get_default_graph().name_scope("conv1d"):
            kwargs = {} if d == 1 else {"dilations": [1, 1, d, 1]}
            y = nn.conv2d(array_ops.expand_dims(x, 1), array_ops.expand_dims(kernel, 0), strides=[1, 1, s, 1],
                          padding=pad, **kwargs)
            outputs = array_ops.squeeze(y, [1])
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _regularize_activity(_activate(outputs, activation), activity_regularizer)


def _deconv_length(size, k, stride, padding):
    """The output length of a transposed convolution (the input length of the forward one)."""
    if size is None:
        return None
    return size * stride if padding == "SAME" else size * stride + max(k - stride, 0)


def transposed_conv2d(x, kernel, filters, kernel_size, strides, padding):
    """``x`` (NHWC) through the transposed convolution with ``kernel``
    (``[kh, kw, filters, in]``), each spatial size grown as ``_deconv_length`` says (shared
    with ``tw.contrib.layers.conv2d_transpose``)."""
    (kh, kw), (sh, sw) = kernel_size, strides
    n, h, w = (x.shape[i] if x.shape.ndims is not None else None for i in range(3))
    oh, ow = _deconv_length(h, kh, sh, padding), _deconv_length(w, kw, sw, padding)
    if n is not None and oh is not None and ow is not None:
        out_shape = [n, oh, ow, filters]
    else:
        dyn = array_ops.shape(x)
        dims = [n if n is not None else dyn[0]]
        for i, (size, k, st) in enumerate(((oh, kh, sh), (ow, kw, sw)), start=1):
            if size is not None:
                dims.append(size)
            elif padding == "SAME":
                dims.append(dyn[i] * st)
            else:
                dims.append(dyn[i] * st + max(k - st, 0))
        out_shape = array_ops.stack(dims + [filters])
    outputs = nn.conv2d_transpose(x, kernel, out_shape, strides=[1, sh, sw, 1], padding=padding)
    outputs.set_shape([n, oh, ow, filters])
    return outputs


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     activation=None, use_bias=True, kernel_initializer=None,
                     bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                     name=None, reuse=None):
    """Transposed 2-D convolution ("deconvolution") of NHWC ``inputs``: the gradient of a
    convolution with respect to its input. The kernel is ``kernel_size + [filters,
    in_channels]``; each spatial size becomes ``size * stride`` (``"same"``) or
    ``size * stride + max(kernel - stride, 0)`` (``"valid"``)."""
    _unsupported("conv2d_transpose", kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
    _check_regularizers("conv2d_transpose", kernel_regularizer=kernel_regularizer,
                        bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer)
    _channels_last(data_format, "conv2d_transpose")
    if isinstance(filters, bool) or not isinstance(filters, numbers.Integral) or filters <= 0:
        raise _E(f"tw.layers.conv2d_transpose: filters must be a positive int, got {filters!r}")
    filters = int(filters)
    kh, kw = _pair(kernel_size, "kernel_size", "conv2d_transpose")
    sh, sw = _pair(strides, "strides", "conv2d_transpose")
    pad = _padding(padding, "conv2d_transpose")
    with vs.variable_scope(name, default_name="conv2d_transpose", reuse=reuse):
        x = _float_input(inputs, "conv2d_transpose")
        if x.shape.ndims is not None and x.shape.ndims != 4:
            raise _E(f"tw.layers.conv2d_transpose: inputs must be 4-D (NHWC), got '{x.name}' of shape {x.shape}")
        in_ch = x.shape[-1]
        if in_ch is None:
            raise _E("tw.layers.conv2d_transpose: the channel dimension of the inputs must be known, got shape "
                     f"{x.shape}")
        kernel = vs.get_variable("kernel", [kh, kw, filters, in_ch], dtype=x.dtype, initializer=kernel_initializer,
                                 regularizer=kernel_regularizer, trainable=trainable)
        bias = vs.get_variable("bias", [filters], dtype=x.dtype, initializer=bias_initializer,
                               regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        outputs = transposed_conv2d(x, kernel, filters, (kh, kw), (sh, sw), pad)
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _regularize_activity(_activate(outputs, activation), activity_regularizer)


def _pooling(fn_name, op, inputs, pool_size, strides, padding, data_format, name):
    _channels_last(data_format, fn_name)
    ph, pw = _pair(pool_size, "pool_size", fn_name)
    sh, sw = _pair(strides, "strides", fn_name)
    pad = _padding(padding, fn_name)
    g = get_default_graph()
    with g.name_scope(name or fn_name):
        x = _float_input(inputs, fn_name)
        if x.shape.ndims is not None and x.shape.ndims != 4:
            raise _E(f"tw.layers.{fn_name}: inputs must be 4-D (NHWC), got '{x.name}' of shape {x.shape}")
        return op(x, ksize=[1, ph, pw, 1], strides=[1, sh, sw, 1], padding=pad)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """Max pooling over ``pool_size`` windows of NHWC ``inputs``."""
    return _pooling("max_pooling2d", nn.max_pool, inputs, pool_size, strides, padding, data_format, name)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """Average pooling over ``pool_size`` windows of NHWC ``inputs``."""
    return _pooling("average_pooling2d", nn.avg_pool, inputs, pool_size, strides, padding, data_format, name)


def _pooling1d(fn_name, op, inputs, pool_size, strides, padding, data_format, name):
    _channels_last(data_format, fn_name)
    p = _int1(pool_size, "pool_size", fn_name)
    st = _int1(strides, "strides", fn_name)
    pad = _padding(padding, fn_name)
    with get_default_graph().name_scope(name or fn_name):
        x = _sequence_input(inputs, fn_name)
        y = op(array_ops.expand_dims(x, 1), ksize=[1, 1, p, 1], strides=[1, 1, st, 1], padding=pad)
        return array_ops.squeeze(y, [1])


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """Max pooling over ``pool_size`` windows of ``[batch, width, channels]`` ``inputs``."""
    return _pooling1d("max_pooling1d", nn.max_pool, inputs, pool_size, strides, padding, data_format, name)


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """Average pooling over ``pool_size`` windows of ``[batch, width, channels]`` ``inputs``."""
    return _pooling1d("average_pooling1d", nn.avg_pool, inputs, pool_size, strides, padding, data_format, name)


def flatten(inputs, name=None, data_format="channels_last"):
    """``inputs`` reshaped to ``[batch, everything else]`` (a vector becomes ``[batch, 1]``)."""
    _channels_last(data_format, "flatten")
    g = get_default_graph()
    with g.name_scope(name or "flatten"):
        x = convert_to_tensor(inputs, name="inputs")
        shape = x.shape
        if shape.ndims is not None and shape.ndims < 1:
            raise _E(f"tw.layers.flatten: inputs must have rank at least 1, got '{x.name}' of shape {shape}")
        if shape.ndims is not None and shape[1:].is_fully_defined():
            rest = int(np.prod(shape[1:].as_list(), dtype=np.int64))
            out = array_ops.reshape(x, [-1, rest])
            out.set_shape([shape[0], rest])
            return out
        batch = array_ops.strided_slice(array_ops.shape(x), [0], [1], [1])
        out = array_ops.reshape(x, array_ops.concat([batch, [-1]], 0))
        if shape.ndims is not None:
            out.set_shape([shape[0], None])
        return out


def _static_bool(training):
    """``training`` as a Python bool when it is known before running, else None."""
    if isinstance(training, bool | np.bool_):
        return bool(training)
    if isinstance(training, numbers.Number):
        return bool(training)
    if isinstance(training, Tensor):
        v = constant_value(training)
        return None if v is None else bool(np.asarray(v).reshape(()))
    raise _E(f"tw.layers.dropout: training must be a bool or a scalar Tensor, got {training!r}")


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``
    when ``training``; otherwise return ``inputs`` unchanged (see the module docstring for
    ``training`` given as a Tensor)."""
    g = get_default_graph()
    with g.name_scope(name or "dropout"):
        x = _float_input(inputs, "dropout")
        rate_is_tensor = isinstance(rate, Tensor) or hasattr(rate, "_as_graph_element")
        if not rate_is_tensor:
            if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
                raise _E(f"tw.layers.dropout: rate must be a float in [0, 1), got {rate!r}")
        static = _static_bool(training)
        if static is False:
            return array_ops.identity(x)
        if static is True:
            if not rate_is_tensor and rate == 0:
                return array_ops.identity(x)
            keep_prob = math_ops.subtract(1.0, convert_to_tensor(rate, dtype=x.dtype)) if rate_is_tensor \
                else 1.0 - float(rate)
        else:
            t = training
            if t.shape.ndims not in (None, 0):
                raise _E(f"tw.layers.dropout: training must be a scalar, got '{t.name}' of shape {t.shape}")
            if not (t.dtype is dtypes.bool_ or t.dtype.is_floating):
                raise _E(f"tw.layers.dropout: training must be a bool or float scalar, got {t.dtype.name}")
            on = math_ops.cast(t, x.dtype)
            keep_prob = math_ops.subtract(1.0, math_ops.multiply(convert_to_tensor(rate, dtype=x.dtype), on),
                                          name="keep_prob")
        return nn.dropout(x, keep_prob=keep_prob, noise_shape=noise_shape, seed=seed)


# ---------------------------------------------------------------------------------------
# separable convolution
def separable_conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                     depthwise_initializer=None, pointwise_initializer=None,
                     bias_initializer=init_ops.zeros_initializer(), depthwise_regularizer=None,
                     pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                     depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None, trainable=True,
                     name=None, reuse=None):
    """Depthwise-separable 2-D convolution of NHWC ``inputs``: a depthwise convolution with
    ``depthwise_kernel`` (``kernel_size + [in_channels, depth_multiplier]``), then a 1x1
    convolution with ``pointwise_kernel`` (``[1, 1, in_channels * depth_multiplier,
    filters]``), plus a ``[filters]`` bias, then ``activation``."""
    fn = "separable_conv2d"
    _unsupported(fn, depthwise_constraint=depthwise_constraint, pointwise_constraint=pointwise_constraint,
                 bias_constraint=bias_constraint)
    _check_regularizers(fn, depthwise_regularizer=depthwise_regularizer, pointwise_regularizer=pointwise_regularizer,
                        bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer)
    _channels_last(data_format, fn)
    for what, v in (("filters", filters), ("depth_multiplier", depth_multiplier)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
            raise _E(f"tw.layers.{fn}: {what} must be a positive int, got {v!r}")
    kh, kw = _pair(kernel_size, "kernel_size", fn)
    sh, sw = _pair(strides, "strides", fn)
    dh, dw = _pair(dilation_rate, "dilation_rate", fn)
    pad = _padding(padding, fn)
    with vs.variable_scope(name, default_name=fn, reuse=reuse):
        x = _float_input(inputs, fn)
        if x.shape.ndims is not None and x.shape.ndims != 4:
            raise _E(f"tw.layers.{fn}: inputs must be 4-D (NHWC), got '{x.name}' of shape {x.shape}")
        in_ch = x.shape[-1]
        if in_ch is None:
            raise _E(f"tw.layers.{fn}: the channel dimension of the inputs must be known, got shape {x.shape}")
        mult = int(depth_multiplier)
        depthwise = vs.get_variable("depthwise_kernel", [kh, kw, in_ch, mult], dtype=x.dtype,
                                    initializer=depthwise_initializer, regularizer=depthwise_regularizer,
                                    trainable=trainable)
        pointwise = vs.get_variable("pointwise_kernel", [1, 1, in_ch * mult, int(filters)], dtype=x.dtype,
                                    initializer=pointwise_initializer, regularizer=pointwise_regularizer,
                                    trainable=trainable)
        bias = vs.get_variable("bias", [int(filters)], dtype=x.dtype, initializer=bias_initializer,
                               regularizer=bias_regularizer, trainable=trainable) if use_bias else None
        outputs = nn.separable_conv2d(x, depthwise, pointwise, strides=[1, sh, sw, 1], padding=pad,
                                      rate=None if (dh, dw) == (1, 1) else [dh, dw])
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _regularize_activity(_activate(outputs, activation), activity_regularizer)


# ---------------------------------------------------------------------------------------
# batch normalization
def _training_flag(training, fn):
    """``training`` as a Python bool, or a bool scalar Tensor (decided at run time)."""
    if isinstance(training, bool | np.bool_ | numbers.Number):
        return bool(training)
    t = convert_to_tensor(training)
    v = constant_value(t)
    if v is not None:
        return bool(np.asarray(v).reshape(()))
    if t.shape.ndims not in (None, 0) or t.dtype is not dtypes.bool_:
        raise _E(f"tw.layers.{fn}: training must be a Python bool or a bool scalar Tensor, got '{t.name}' "
                 f"({t.dtype.name}, shape {t.shape})")
    return t


class BatchNormalization:
    """Batch normalization over the ``axis`` (channel) dimension (``tf.layers.BatchNormalization``).

    Training normalises with the batch's mean and variance and updates the non-trainable
    ``moving_mean``/``moving_variance`` as ``moving -= (moving - batch) * (1 - momentum)``;
    those update ops join ``GraphKeys.UPDATE_OPS`` (run them with the training step, e.g.
    under ``tw.control_dependencies(tw.get_collection(tw.GraphKeys.UPDATE_OPS))``). Inference
    normalises with the moving statistics. ``training`` is a Python bool or a bool scalar
    Tensor (both branches are built and ``tw.cond`` picks one; the updates then move nothing
    when it is false). ``fused=None`` uses the FusedBatchNorm op for 4-D inputs normalised
    over their last axis (NHWC) or their second (NCHW), the composite ops otherwise; the fused
    op's batch variance is Bessel-corrected (as TensorFlow's), the composite one is not.
    """

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=init_ops.zeros_initializer(), gamma_initializer=init_ops.ones_initializer(),
                 moving_mean_initializer=init_ops.zeros_initializer(),
                 moving_variance_initializer=init_ops.ones_initializer(), beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, renorm=False,
                 renorm_clipping=None, renorm_momentum=0.99, fused=None, trainable=True, virtual_batch_size=None,
                 adjustment=None, name=None, **kwargs):
        fn = "batch_normalization"
        _unsupported(fn, beta_constraint=beta_constraint, gamma_constraint=gamma_constraint,
                     renorm_clipping=renorm_clipping, virtual_batch_size=virtual_batch_size, adjustment=adjustment)
        if renorm:
            raise errors.UnimplementedError(f"tw.layers.{fn}: renorm is not supported")
        _check_regularizers(fn, beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer)
        if isinstance(axis, list | tuple):
            if len(axis) != 1:
                raise errors.UnimplementedError(f"tw.layers.{fn}: normalising over several axes {axis} is not "
                                                "supported")
            axis = axis[0]
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise _E(f"tw.layers.{fn}: axis must be an int, got {axis!r}")
        for what, v in (("momentum", momentum), ("epsilon", epsilon)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise _E(f"tw.layers.{fn}: {what} must be a number, got {v!r}")
        if not epsilon > 0:
            raise _E(f"tw.layers.{fn}: epsilon must be positive, got {epsilon!r}")
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.center, self.scale, self.fused, self.trainable = center, scale, fused, trainable
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer
        self.beta_regularizer, self.gamma_regularizer = beta_regularizer, gamma_regularizer
        self.name = name
        self._reuse = kwargs.pop("_reuse", None)
        self._scope_default = kwargs.pop("_scope", None) or "batch_normalization"
        # tw.contrib.layers.batch_norm's: where the updates go (None: run with the output) and
        # each variable's collections (kind -> list, or None for get_variable's default).
        self._updates_collections = kwargs.pop("_updates_collections", GraphKeys.UPDATE_OPS)
        self._variable_collections = kwargs.pop("_variable_collections", None) or (lambda kind: None)
        if kwargs:
            raise _E(f"tw.layers.{fn}: unexpected arguments {sorted(kwargs)}")
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None
        self.updates = []

    def __call__(self, inputs, training=False):
        return self.apply(inputs, training=training)

    def apply(self, inputs, training=False):
        fn = "batch_normalization"
        training = _training_flag(training, fn)
        with vs.variable_scope(self.name, default_name=self._scope_default, reuse=self._reuse):
            x = _float_input(inputs, fn)
            rank = x.shape.ndims
            if rank is None:
                raise _E(f"tw.layers.{fn}: inputs must have a known rank, got '{x.name}'")
            axis = self.axis + rank if self.axis < 0 else self.axis
            if not 0 <= axis < rank:
                raise _E(f"tw.layers.{fn}: axis {self.axis} is out of range for inputs of rank {rank}")
            channels = x.shape[axis]
            if channels is None:
                raise _E(f"tw.layers.{fn}: the dimension {axis} of the inputs (the normalised axis) must be known, "
                         f"got shape {x.shape}")
            fused = self.fused
            fusable = rank == 4 and axis in (1, 3)
            if fused is None:
                fused = fusable
            elif fused and not fusable:
                raise _E(f"tw.layers.{fn}: fused=True needs 4-D inputs normalised over axis 1 (NCHW) or 3 (NHWC), "
                         f"got shape {x.shape} and axis {self.axis}")
            pdtype = dtypes.float32 if x.dtype is dtypes.float16 else x.dtype
            cols = self._variable_collections
            b_var = vs.get_variable("beta", [channels], dtype=pdtype, initializer=self.beta_initializer,
                                    regularizer=self.beta_regularizer, trainable=self.trainable,
                                    collections=cols("beta")) if self.center else None
            g_var = vs.get_variable("gamma", [channels], dtype=pdtype, initializer=self.gamma_initializer,
                                    regularizer=self.gamma_regularizer, trainable=self.trainable,
                                    collections=cols("gamma")) if self.scale else None
            mm = vs.get_variable("moving_mean", [channels], dtype=pdtype, initializer=self.moving_mean_initializer,
                                 trainable=False, collections=cols("moving_mean"))
            mv = vs.get_variable("moving_variance", [channels], dtype=pdtype,
                                 initializer=self.moving_variance_initializer, trainable=False,
                                 collections=cols("moving_variance"))
            self.gamma, self.beta, self.moving_mean, self.moving_variance = g_var, b_var, mm, mv
            if fused:
                outputs, mean, variance = self._fused(x, axis, channels, pdtype, training)
            else:
                outputs, mean, variance = self._composite(x, axis, rank, training)
            if training is not False:
                updates = self._update_moving(mean, variance, training)
                if self._updates_collections is None:
                    with get_default_graph().control_dependencies(updates):
                        outputs = array_ops.identity(outputs)
            return outputs

    def _fused(self, x, axis, channels, pdtype, training):
        fmt = "NHWC" if axis == 3 else "NCHW"
        gamma = self.gamma if self.gamma is not None else array_ops.constant(np.ones(channels), dtype=pdtype)
        beta = self.beta if self.beta is not None else array_ops.constant(np.zeros(channels), dtype=pdtype)

        def train():
            return nn.fused_batch_norm(x, gamma, beta, epsilon=self.epsilon, data_format=fmt)

        def infer():
            return nn.fused_batch_norm(x, gamma, beta, mean=self.moving_mean, variance=self.moving_variance,
                                       epsilon=self.epsilon, data_format=fmt, is_training=False)
        if training is True:
            return train()
        if training is False:
            return infer()
        y, m, v = control_flow_ops.cond(training, train, infer)
        y.set_shape(x.shape)
        return y, m, v

    def _composite(self, x, axis, rank, training):
        red = [a for a in range(rank) if a != axis]
        shape = [1] * rank
        shape[axis] = -1

        def bshape(t):
            return None if t is None else array_ops.reshape(t, shape)

        def normalise(mean, variance):
            return nn.batch_normalization(x, bshape(mean), bshape(variance), bshape(self.beta), bshape(self.gamma),
                                          self.epsilon)
        if training is False:
            return normalise(self.moving_mean, self.moving_variance), None, None
        mean, variance = nn.moments(x, red)
        if x.dtype is dtypes.float16:
            mean, variance = math_ops.cast(mean, dtypes.float32), math_ops.cast(variance, dtypes.float32)
        if training is True:
            return normalise(mean, variance), mean, variance
        m, v = control_flow_ops.cond(training, lambda: (array_ops.identity(mean), array_ops.identity(variance)),
                                     lambda: (array_ops.identity(self.moving_mean.value()),
                                              array_ops.identity(self.moving_variance.value())))
        return normalise(m, v), mean, variance

    def _update_moving(self, mean, variance, training):
        g = get_default_graph()
        collections = self._updates_collections
        if isinstance(collections, str):
            collections = [collections]
        decay = 1.0 - self.momentum
        if training is not True:  # a Tensor: no movement when it is false
            decay = math_ops.multiply(math_ops.cast(training, mean.dtype), decay, name="decay")
        for var, value, what in ((self.moving_mean, mean, "AssignMovingAvg"),
                                 (self.moving_variance, variance, "AssignMovingAvg_1")):
            with g.name_scope(what):
                delta = math_ops.multiply(math_ops.subtract(var.value(), value), decay)
                update = state_ops.assign_sub(var, delta)
            self.updates.append(update)
            if collections:
                g.add_to_collections(collections, update)
        return self.updates[-2:]


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=init_ops.zeros_initializer(), gamma_initializer=init_ops.ones_initializer(),
                        moving_mean_initializer=init_ops.zeros_initializer(),
                        moving_variance_initializer=init_ops.ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, training=False,
                        trainable=True, name=None, reuse=None, renorm=False, renorm_clipping=None,
                        renorm_momentum=0.99, fused=None, virtual_batch_size=None, adjustment=None):
    """Functional form of :class:`BatchNormalization` (``tf.layers.batch_normalization``):
    variables ``<name>/gamma``, ``beta``, ``moving_mean``, ``moving_variance``; the moving
    averages' update ops go to ``GraphKeys.UPDATE_OPS``."""
    layer = BatchNormalization(axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                               beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                               moving_mean_initializer=moving_mean_initializer,
                               moving_variance_initializer=moving_variance_initializer,
                               beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
                               beta_constraint=beta_constraint, gamma_constraint=gamma_constraint, renorm=renorm,
                               renorm_clipping=renorm_clipping, renorm_momentum=renorm_momentum, fused=fused,
                               trainable=trainable, virtual_batch_size=virtual_batch_size, adjustment=adjustment,
                               name=name, _reuse=reuse)
    return layer.apply(inputs, training=training)
