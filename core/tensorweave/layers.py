"""``tw.layers``: dense, conv2d, pooling, flatten, dropout built from graph ops.

TensorFlow 1.x's functional layers. A layer with variables opens a variable scope named
``name`` (or a unique ``dense``, ``dense_1``, ``conv2d``, ...) and creates them with
``tw.get_variable`` (``<scope>/kernel``, ``<scope>/bias``), so ``reuse=True`` (or an
enclosing scope with reuse) shares them. Images are NHWC (``data_format="channels_last"``).

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
from tensorweave.framework.graph import Tensor, constant_value, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, init_ops, math_ops, nn
from tensorweave.ops import variable_scope as vs

__all__ = ["dense", "conv2d", "max_pooling2d", "average_pooling2d", "flatten", "dropout"]

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


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
          reuse=None):
    """``activation(inputs @ kernel + bias)`` over the last dimension of ``inputs``.

    ``kernel`` is ``[inputs.shape[-1], units]`` (glorot_uniform unless ``kernel_initializer``),
    ``bias`` ``[units]`` (zeros). Inputs of rank above 2 are multiplied along their last axis.
    """
    _unsupported("dense", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                 activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                 bias_constraint=bias_constraint)
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
                                 trainable=trainable)
        bias = vs.get_variable("bias", [units], dtype=x.dtype, initializer=bias_initializer,
                               trainable=trainable) if use_bias else None
        rank = x.shape.ndims
        if rank == 2:
            outputs = math_ops.matmul(x, kernel)
        else:
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
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _activate(outputs, activation)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=init_ops.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
           reuse=None):
    """2-D convolution of NHWC ``inputs`` with a ``kernel_size + [in_channels, filters]``
    kernel, plus a ``[filters]`` bias, then ``activation``."""
    _unsupported("conv2d", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                 activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                 bias_constraint=bias_constraint)
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
                                 initializer=kernel_initializer, trainable=trainable)
        bias = vs.get_variable("bias", [int(filters)], dtype=x.dtype, initializer=bias_initializer,
                               trainable=trainable) if use_bias else None
        kwargs = {} if (dh, dw) == (1, 1) else {"dilations": [1, dh, dw, 1]}
        outputs = nn.conv2d(x, kernel, strides=[1, sh, sw, 1], padding=pad, **kwargs)
        if bias is not None:
            outputs = nn.bias_add(outputs, bias)
        return _activate(outputs, activation)


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
