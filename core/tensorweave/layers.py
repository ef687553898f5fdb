"""``tw.layers``: dense, convolutions (1-D, 2-D, transposed 2-D), pooling (1-D, 2-D),
flatten, dropout built from graph ops.

TensorFlow 1.x's functional layers. A layer with variables opens a variable scope named
``name`` (or a unique ``dense``, ``dense_1``, ``conv2d``, ...) and creates them with
``tw.get_variable`` (``<scope>/kernel``, ``<scope>/bias``), so ``reuse=True`` (or an
enclosing scope with reuse) shares them. Images are NHWC (``data_format="channels_last"``);
sequences are ``[batch, width, channels]``, and the 1-D layers are the 2-D ops over a height
of 1, as in TensorFlow.

``kernel_regularizer``/``bias_regularizer`` are passed to ``get_variable`` (their losses join
``GraphKeys.REGULARIZATION_LOSSES`` when the variable is created);
``activity_regularizer(outputs)`` joins the same collection. Constraints are not supported.
Not provided, for want of kernels: 3-D convolution and pooling, separable and depthwise
convolution (there is no depthwise kernel).

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
from tensorweave.ops import array_ops, init_ops, math_ops, nn
from tensorweave.ops import variable_scope as vs

__all__ = ["dense", "conv1d", "conv2d", "conv2d_transpose", "max_pooling1d", "average_pooling1d", "max_pooling2d",
           "average_pooling2d", "flatten", "dropout"]

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
