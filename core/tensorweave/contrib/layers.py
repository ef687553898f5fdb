"""``tw.contrib.layers``: the ``tf.contrib.layers`` functions TF1 programs use, built on
``tw.layers``' ops and ``tw.get_variable``.

- layers: ``fully_connected`` (``linear``), ``conv2d`` (``convolution2d``, also 1-D on 3-D
  inputs), ``conv2d_transpose``, ``max_pool2d``, ``avg_pool2d``, ``flatten``, ``dropout``,
  ``one_hot_encoding``. As in TF1 they create ``<scope>/weights`` and ``<scope>/biases``
  (model variables: also in ``GraphKeys.MODEL_VARIABLES``), default to a ReLU activation,
  take ``normalizer_fn`` (then no biases), and are ``arg_scope``-able;
- initializers: ``xavier_initializer`` (``_conv2d``), ``variance_scaling_initializer`` with
  contrib's ``factor``/``mode``/``uniform`` arguments;
- regularizers: ``l1_regularizer``, ``l2_regularizer``, ``l1_l2_regularizer``,
  ``sum_regularizer``, ``apply_regularization``;
- ``optimize_loss``: an optimizer by name (``"SGD"``, ``"Adam"``, ``"Adagrad"``,
  ``"Momentum"``, ``"RMSProp"``), class, instance or function, with gradient clipping,
  noise and multipliers, learning-rate decay, ``UPDATE_OPS`` and summaries.

- ``batch_norm`` (``tw.layers.BatchNormalization`` with contrib's defaults: ``decay``,
  ``scale=False``, ``updates_collections``, ``is_training``) and ``separable_conv2d``.

``layer_norm`` raises ``NotImplementedError``. Any other ``tf.contrib.layers`` name raises an
``AttributeError`` that says it is not provided.
"""

from __future__ import annotations

import math
import numbers

from tensorweave import layers as core_layers
from tensorweave.contrib.framework import add_arg_scope
from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.indexed_slices import IndexedSlices
from tensorweave.ops import array_ops, clip_ops, init_ops, math_ops, nn, nn_ops, random_ops, summary_ops
from tensorweave.ops import variable_scope as vs
from tensorweave.ops.variables import Variable, trainable_variables
from tensorweave.train.adagrad import AdagradOptimizer
from tensorweave.train.adam import AdamOptimizer
from tensorweave.train.gradient_descent import GradientDescentOptimizer
from tensorweave.train.momentum import MomentumOptimizer
from tensorweave.train.optimizer import Optimizer
from tensorweave.train.rmsprop import RMSPropOptimizer
from tensorweave.train.training_util import assert_global_step, get_global_step

__all__ = [
    "fully_connected", "linear", "conv2d", "convolution2d", "conv2d_transpose", "convolution2d_transpose",
    "max_pool2d", "avg_pool2d", "flatten", "dropout", "one_hot_encoding", "batch_norm", "layer_norm",
    "separable_conv2d", "separable_convolution2d",
    "xavier_initializer", "xavier_initializer_conv2d", "variance_scaling_initializer",
    "l1_regularizer", "l2_regularizer", "l1_l2_regularizer", "sum_regularizer", "apply_regularization",
    "optimize_loss", "OPTIMIZER_CLS_NAMES", "OPTIMIZER_SUMMARIES",
]

_E = errors.InvalidArgumentError


# ---------------------------------------------------------------------------------------
# initializers
class _VarianceScaling(init_ops.Initializer):
    """contrib's variance scaling: ``n`` from the kernel's fans (``mode``), then
    U(-sqrt(3 factor / n), +sqrt(3 factor / n)) or a normal truncated at two standard
    deviations with stddev sqrt(1.3 factor / n)."""

    def __init__(self, factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype=dtypes.float32):
        dtype = dtypes.as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError(f"variance_scaling_initializer: cannot create an initializer for non-floating dtype "
                            f"{dtype.name}")
        if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
            raise TypeError(f"variance_scaling_initializer: unknown mode {mode!r}; expected FAN_IN, FAN_OUT or "
                            "FAN_AVG")
        self.factor, self.mode, self.uniform, self.seed, self.dtype = float(factor), mode, bool(uniform), seed, dtype

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = dtypes.as_dtype(self.dtype if dtype is None else dtype)
        if not dtype.is_floating:
            raise TypeError(f"variance_scaling_initializer: cannot initialize a {dtype.name} variable")
        shape = [int(d) for d in shape]
        fan_in = float(shape[-2] if len(shape) > 1 else shape[-1]) if shape else 1.0
        fan_out = float(shape[-1]) if shape else 1.0
        for d in shape[:-2]:  # a convolution kernel's receptive field
            fan_in *= d
            fan_out *= d
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[self.mode]
        if self.uniform:
            limit = math.sqrt(3.0 * self.factor / n)
            return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)
        return random_ops.truncated_normal(shape, 0.0, math.sqrt(1.3 * self.factor / n), dtype, seed=self.seed)

    def get_config(self):
        return {"factor": self.factor, "mode": self.mode, "uniform": self.uniform, "seed": self.seed,
                "dtype": self.dtype.name}


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype=dtypes.float32):
    """He et al.'s initializer by default (``factor=2``, ``FAN_IN``, truncated normal)."""
    return _VarianceScaling(factor, mode, uniform, seed, dtype)


def xavier_initializer(uniform=True, seed=None, dtype=dtypes.float32):
    """Glorot & Bengio's initializer: variance ``2 / (fan_in + fan_out)``."""
    return _VarianceScaling(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer


# ---------------------------------------------------------------------------------------
# regularizers: functions of a weight tensor returning a scalar loss (or None)
def _scale(scale, fn):
    if isinstance(scale, numbers.Integral):
        raise _E(f"{fn}: scale cannot be an integer, got {scale!r} (use a float, e.g. {float(scale)!r})")
    if not isinstance(scale, numbers.Real):
        raise _E(f"{fn}: scale must be a float, got {scale!r}")
    if scale < 0.0:
        raise _E(f"{fn}: scale must be >= 0.0, got {scale!r}")
    return float(scale)


def _regularizer(fn_name, scale, scope, penalty):
    scale = _scale(scale, fn_name)
    if scale == 0.0:
        return lambda _: None  # a scale of 0 disables the regularizer, as in TF1

    def regularize(weights):
        with get_default_graph().name_scope(scope or fn_name) as name:
            w = convert_to_tensor(weights)
            # the product takes the scope's own name ("l2_regularizer"), as in TF1
            return apply_op("Mul", [array_ops.constant(scale, dtype=w.dtype, name="scale"), penalty(w)],
                            _exact_name=name.rstrip("/"))
    return regularize


def l1_regularizer(scale, scope=None):
    """``scale * sum(|w|)``."""
    return _regularizer("l1_regularizer", scale, scope, lambda w: math_ops.reduce_sum(math_ops.abs(w)))


def l2_regularizer(scale, scope=None):
    """``scale * sum(w ** 2) / 2`` (``tw.nn.l2_loss``)."""
    return _regularizer("l2_regularizer", scale, scope, nn_ops.l2_loss)


def l1_l2_regularizer(scale_l1=1.0, scale_l2=1.0, scope=None):
    """The sum of an L1 and an L2 regularizer."""
    return sum_regularizer([l1_regularizer(scale_l1), l2_regularizer(scale_l2)], scope=scope or "l1_l2_regularizer")


def sum_regularizer(regularizer_list, scope=None):
    """A regularizer adding the (non-None) penalties of ``regularizer_list``."""
    regularizer_list = [r for r in regularizer_list if r is not None]
    if not regularizer_list:
        return lambda _: None

    def regularize(weights):
        with get_default_graph().name_scope(scope or "sum_regularizer") as name:
            penalties = [p for p in (r(weights) for r in regularizer_list) if p is not None]
            if not penalties:
                return None
            if len(penalties) == 1:
                return array_ops.identity(penalties[0], name=name.rstrip("/"))
            return math_ops.add_n(penalties, name=name.rstrip("/"))
    return regularize


def apply_regularization(regularizer, weights_list=None):
    """Sum of ``regularizer(w)`` over ``weights_list`` (default: the ``"weights"``
    collection, TF's ``GraphKeys.WEIGHTS``), added to ``GraphKeys.REGULARIZATION_LOSSES``."""
    g = get_default_graph()
    if weights_list is None:
        weights_list = g.get_collection("weights")
    weights_list = list(weights_list)
    if not weights_list:
        raise _E("apply_regularization: no weights to regularize (pass weights_list, e.g. tw.trainable_variables())")
    with g.name_scope("get_regularization_penalty") as scope:
        penalties = []
        for w in weights_list:
            p = regularizer(w)
            penalties.append(p if p is not None else array_ops.constant(0.0, dtype=convert_to_tensor(w).dtype))
        total = math_ops.add_n(penalties, name=scope.rstrip("/")) if len(penalties) > 1 else \
            array_ops.identity(penalties[0], name=scope.rstrip("/"))
    g.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, total)
    return total


# ---------------------------------------------------------------------------------------
# layers
def _collections(variables_collections, kind):
    """TF1's per-kind collections: a dict ``{"weights": [...], "biases": [...]}`` or a list."""
    if isinstance(variables_collections, dict):
        extra = variables_collections.get(kind) or []
    else:
        extra = variables_collections or []
    extra = [extra] if isinstance(extra, str) else list(extra)
    return extra + [GraphKeys.GLOBAL_VARIABLES, GraphKeys.MODEL_VARIABLES]


def _collect_outputs(outputs_collections, outputs):
    if outputs_collections:
        get_default_graph().add_to_collections(
            [outputs_collections] if isinstance(outputs_collections, str) else outputs_collections, outputs)
    return outputs


def _finish(outputs, biases, normalizer_fn, normalizer_params, activation_fn, data_format="NHWC"):
    if normalizer_fn is not None:
        outputs = normalizer_fn(outputs, **(normalizer_params or {}))
    elif biases is not None:
        outputs = nn_ops.bias_add(outputs, biases, data_format=data_format)
    if activation_fn is not None:
        outputs = activation_fn(outputs)
    return outputs


def _model_variables(weights_shape, dtype, weights_initializer, weights_regularizer, biases_initializer,
                     biases_regularizer, normalizer_fn, variables_collections, trainable, is_transposed=False):
    """``<scope>/weights`` and (without a normalizer, given an initializer) ``<scope>/biases``
    of the layer's output size (the weights' last dimension; the one before for a
    transposed convolution)."""
    out_dim = weights_shape[-2] if is_transposed else weights_shape[-1]
    weights = vs.get_variable("weights", weights_shape, dtype=dtype, initializer=weights_initializer,
                              regularizer=weights_regularizer, trainable=trainable,
                              collections=_collections(variables_collections, "weights"))
    biases = None
    if normalizer_fn is None and biases_initializer is not None:
        biases = vs.get_variable("biases", [out_dim], dtype=dtype, initializer=biases_initializer,
                                 regularizer=biases_regularizer, trainable=trainable,
                                 collections=_collections(variables_collections, "biases"))
    return weights, biases


def _positive_int(v, what, fn):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
        raise _E(f"tw.contrib.layers.{fn}: {what} must be a positive int, got {v!r}")
    return int(v)


def _float_tensor(inputs, fn):
    x = convert_to_tensor(inputs, name="inputs")
    if not x.dtype.is_floating:
        raise _E(f"tw.contrib.layers.{fn}: inputs must be a floating-point tensor, got {x.dtype.name} '{x.name}'")
    return x


@add_arg_scope
def fully_connected(inputs, num_outputs, activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None,
                    weights_initializer=None, weights_regularizer=None,
                    biases_initializer=init_ops.zeros_initializer(), biases_regularizer=None, reuse=None,
                    variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """``activation_fn(inputs @ weights + biases)`` over the last dimension of ``inputs``
    (weights: Xavier-initialised ``[in, num_outputs]``)."""
    num_outputs = _positive_int(num_outputs, "num_outputs", "fully_connected")
    with vs.variable_scope(scope, default_name="fully_connected", reuse=reuse):
        x = _float_tensor(inputs, "fully_connected")
        if x.shape.ndims is None or x.shape.ndims < 2:
            raise _E(f"tw.contrib.layers.fully_connected: inputs must have rank at least 2, got '{x.name}' of "
                     f"shape {x.shape}")
        in_dim = x.shape[-1]
        if in_dim is None:
            raise _E(f"tw.contrib.layers.fully_connected: the last dimension of the inputs must be known, got "
                     f"shape {x.shape}")
        weights, biases = _model_variables(
            [in_dim, num_outputs], x.dtype, weights_initializer or xavier_initializer(), weights_regularizer,
            biases_initializer, biases_regularizer, normalizer_fn, variables_collections, trainable)
        outputs = core_layers.matmul_last_axis(x, weights, in_dim, num_outputs)
        outputs = _finish(outputs, biases, normalizer_fn, normalizer_params, activation_fn)
        return _collect_outputs(outputs_collections, outputs)


def linear(inputs, num_outputs, **kwargs):
    """``fully_connected`` with no activation."""
    return fully_connected(inputs, num_outputs, activation_fn=None, **kwargs)


def _pair(v, what, fn):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v), int(v)
    try:
        a, b = (int(x) for x in v)
    except (TypeError, ValueError):
        raise _E(f"tw.contrib.layers.{fn}: {what} must be an int or a pair of ints, got {v!r}") from None
    if a <= 0 or b <= 0:
        raise _E(f"tw.contrib.layers.{fn}: {what} must be positive, got {v!r}")
    return a, b


def _padding(padding, fn):
    if not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise _E(f"tw.contrib.layers.{fn}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding.upper()


@add_arg_scope
def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format=None, rate=1,
           activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None, weights_initializer=None,
           weights_regularizer=None, biases_initializer=init_ops.zeros_initializer(), biases_regularizer=None,
           reuse=None, variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """Convolution with ``num_outputs`` filters, plus biases, then ``activation_fn``: 2-D on
    4-D inputs (NHWC, or NCHW with ``data_format="NCHW"``), 1-D on 3-D inputs (NWC, with
    ``kernel_size``/``stride``/``rate`` as ints). Weights ``kernel_size + [in, num_outputs]``."""
    fn = "conv2d"
    num_outputs = _positive_int(num_outputs, "num_outputs", fn)
    pad = _padding(padding, fn)
    with vs.variable_scope(scope, default_name="Conv", reuse=reuse):
        x = _float_tensor(inputs, fn)
        rank = x.shape.ndims
        if rank not in (3, 4):
            raise _E(f"tw.contrib.layers.conv2d: inputs must be 3-D (NWC) or 4-D (NHWC/NCHW), got '{x.name}' of "
                     f"shape {x.shape}")
        fmt = data_format or ("NWC" if rank == 3 else "NHWC")
        if (rank == 4 and fmt not in ("NHWC", "NCHW")) or (rank == 3 and fmt != "NWC"):
            raise _E(f"tw.contrib.layers.conv2d: data_format {data_format!r} does not fit {rank}-D inputs (expected "
                     f"{'NHWC or NCHW' if rank == 4 else 'NWC'})")
        if rank == 3:
            k, s, r = (v[0] if isinstance(v, list | tuple) else v for v in (kernel_size, stride, rate))
            kh, kw, sh, sw, dh, dw = 1, _positive_int(k, "kernel_size", fn), 1, _positive_int(s, "stride", fn), \
                1, _positive_int(r, "rate", fn)
            x4 = array_ops.expand_dims(x, 1)
            c_axis = 3
        else:
            (kh, kw), (sh, sw), (dh, dw) = _pair(kernel_size, "kernel_size", fn), _pair(stride, "stride", fn), \
                _pair(rate, "rate", fn)
            x4, c_axis = x, (3 if fmt == "NHWC" else 1)
        in_ch = x4.shape[c_axis]
        if in_ch is None:
            raise _E(f"tw.contrib.layers.conv2d: the channel dimension of the inputs must be known, got {x.shape}")
        w_shape = [kw, in_ch, num_outputs] if rank == 3 else [kh, kw, in_ch, num_outputs]
        weights, biases = _model_variables(
            w_shape, x.dtype, weights_initializer or xavier_initializer(), weights_regularizer, biases_initializer,
            biases_regularizer, normalizer_fn, variables_collections, trainable)
        w4 = array_ops.expand_dims(weights, 0) if rank == 3 else weights
        nchw = fmt == "NCHW"
        strides = [1, 1, sh, sw] if nchw else [1, sh, sw, 1]
        dilations = [1, 1, dh, dw] if nchw else [1, dh, dw, 1]
        outputs = nn_ops.conv2d(x4, w4, strides=strides, padding=pad, data_format="NCHW" if nchw else "NHWC",
                                dilations=None if (dh, dw) == (1, 1) else dilations)
        if rank == 3:
            outputs = array_ops.squeeze(outputs, [1])
        outputs = _finish(outputs, biases, normalizer_fn, normalizer_params, activation_fn,
                          "NCHW" if nchw else "NHWC")
        return _collect_outputs(outputs_collections, outputs)


convolution2d = conv2d


@add_arg_scope
def conv2d_transpose(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format="NHWC",
                     activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None, weights_initializer=None,
                     weights_regularizer=None, biases_initializer=init_ops.zeros_initializer(),
                     biases_regularizer=None, reuse=None, variables_collections=None, outputs_collections=None,
                     trainable=True, scope=None):
    """Transposed convolution of NHWC ``inputs`` (weights ``kernel_size + [num_outputs, in]``):
    each spatial size times ``stride`` (``"SAME"``), plus ``max(kernel - stride, 0)`` (``"VALID"``)."""
    fn = "conv2d_transpose"
    num_outputs = _positive_int(num_outputs, "num_outputs", fn)
    if data_format != "NHWC":
        raise errors.UnimplementedError(f"tw.contrib.layers.conv2d_transpose: only data_format='NHWC' is supported, "
                                        f"got {data_format!r}")
    (kh, kw), (sh, sw), pad = _pair(kernel_size, "kernel_size", fn), _pair(stride, "stride", fn), _padding(padding, fn)
    with vs.variable_scope(scope, default_name="Conv2d_transpose", reuse=reuse):
        x = _float_tensor(inputs, fn)
        if x.shape.ndims != 4 or x.shape[-1] is None:
            raise _E(f"tw.contrib.layers.conv2d_transpose: inputs must be 4-D NHWC with known channels, got "
                     f"'{x.name}' of shape {x.shape}")
        weights, biases = _model_variables(
            [kh, kw, num_outputs, x.shape[-1]], x.dtype, weights_initializer or xavier_initializer(),
            weights_regularizer, biases_initializer, biases_regularizer, normalizer_fn, variables_collections,
            trainable, is_transposed=True)
        outputs = core_layers.transposed_conv2d(x, weights, num_outputs, (kh, kw), (sh, sw), pad)
        outputs = _finish(outputs, biases, normalizer_fn, normalizer_params, activation_fn)
        return _collect_outputs(outputs_collections, outputs)


convolution2d_transpose = conv2d_transpose


def _pool(fn, op, inputs, kernel_size, stride, padding, data_format, outputs_collections, scope, default):
    (kh, kw), (sh, sw), pad = _pair(kernel_size, "kernel_size", fn), _pair(stride, "stride", fn), _padding(padding, fn)
    if data_format not in ("NHWC", "NCHW"):
        raise _E(f"tw.contrib.layers.{fn}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    with get_default_graph().name_scope(scope or default):
        x = _float_tensor(inputs, fn)
        if data_format == "NHWC":
            ksize, strides = [1, kh, kw, 1], [1, sh, sw, 1]
        else:
            ksize, strides = [1, 1, kh, kw], [1, 1, sh, sw]
        outputs = op(x, ksize=ksize, strides=strides, padding=pad, data_format=data_format)
        return _collect_outputs(outputs_collections, outputs)


@add_arg_scope
def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """Max pooling over ``kernel_size`` windows."""
    return _pool("max_pool2d", nn_ops.max_pool, inputs, kernel_size, stride, padding, data_format,
                 outputs_collections, scope, "MaxPool2D")


@add_arg_scope
def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """Average pooling over ``kernel_size`` windows."""
    return _pool("avg_pool2d", nn_ops.avg_pool, inputs, kernel_size, stride, padding, data_format,
                 outputs_collections, scope, "AvgPool2D")


@add_arg_scope
def flatten(inputs, outputs_collections=None, scope=None):
    """``inputs`` reshaped to ``[batch, everything else]``."""
    return _collect_outputs(outputs_collections, core_layers.flatten(inputs, name=scope or "Flatten"))


@add_arg_scope
def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True, outputs_collections=None, scope=None,
            seed=None):
    """Keep each element with probability ``keep_prob`` (scaled by ``1 / keep_prob``) when
    ``is_training`` (a bool or a bool scalar tensor); the identity otherwise."""
    if isinstance(keep_prob, Tensor | Variable):
        rate = math_ops.subtract(1.0, convert_to_tensor(keep_prob))
    else:
        if isinstance(keep_prob, bool) or not isinstance(keep_prob, numbers.Real) or not 0 < keep_prob <= 1:
            raise _E(f"tw.contrib.layers.dropout: keep_prob must be a float in (0, 1], got {keep_prob!r}")
        rate = 1.0 - float(keep_prob)
    outputs = core_layers.dropout(inputs, rate=rate, noise_shape=noise_shape, seed=seed, training=is_training,
                                  name=scope or "Dropout")
    return _collect_outputs(outputs_collections, outputs)


@add_arg_scope
def one_hot_encoding(labels, num_classes, on_value=1.0, off_value=0.0, outputs_collections=None, scope=None):
    """One-hot float rows of integer ``labels``."""
    with get_default_graph().name_scope(scope or "OneHotEncoding"):
        outputs = array_ops.one_hot(labels, num_classes, on_value=on_value, off_value=off_value)
        return _collect_outputs(outputs_collections, outputs)


@add_arg_scope
def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
               param_initializers=None, param_regularizers=None, updates_collections=GraphKeys.UPDATE_OPS,
               is_training=True, reuse=None, variables_collections=None, outputs_collections=None, trainable=True,
               batch_weights=None, fused=None, data_format="NHWC", zero_debias_moving_mean=False, scope=None,
               renorm=False, renorm_clipping=None, renorm_decay=0.99, adjustment=None):
    """Batch normalization (``tf.contrib.layers.batch_norm``), the normaliser ``conv2d`` and
    ``fully_connected`` take as ``normalizer_fn``: ``tw.layers.BatchNormalization`` with
    contrib's defaults and names (scope ``BatchNorm``; ``beta``, ``moving_mean`` and
    ``moving_variance`` model variables, ``gamma`` only with ``scale=True``). The moving
    averages decay by ``decay``; their update ops join ``updates_collections``, or with None
    run with the output. ``is_training`` is a bool or a bool scalar tensor. The channel axis
    is the last (``NHWC``) or the second (``NCHW``, rank 4)."""
    fn = "batch_norm"
    if batch_weights is not None or zero_debias_moving_mean:
        raise errors.UnimplementedError(f"tw.contrib.layers.{fn}: batch_weights and zero_debias_moving_mean are "
                                        "not supported")
    if data_format not in ("NHWC", "NCHW"):
        raise _E(f"tw.contrib.layers.{fn}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    inits = dict(param_initializers or {})
    regs = dict(param_regularizers or {})
    unknown = (set(inits) | set(regs)) - {"beta", "gamma", "moving_mean", "moving_variance"}
    if unknown:
        raise _E(f"tw.contrib.layers.{fn}: unknown parameter names {sorted(unknown)} (expected beta, gamma, "
                 "moving_mean, moving_variance)")
    x = _float_tensor(inputs, fn)
    rank = x.shape.ndims
    if rank is None or rank < 2:
        raise _E(f"tw.contrib.layers.{fn}: inputs must have a known rank of at least 2, got '{x.name}' of shape "
                 f"{x.shape}")
    axis = 1 if data_format == "NCHW" and rank == 4 else -1
    zeros, ones = init_ops.zeros_initializer(), init_ops.ones_initializer()
    layer = core_layers.BatchNormalization(
        axis=axis, momentum=decay, epsilon=epsilon, center=center, scale=scale,
        beta_initializer=inits.get("beta", zeros), gamma_initializer=inits.get("gamma", ones),
        moving_mean_initializer=inits.get("moving_mean", zeros),
        moving_variance_initializer=inits.get("moving_variance", ones),
        beta_regularizer=regs.get("beta"), gamma_regularizer=regs.get("gamma"), renorm=renorm,
        renorm_clipping=renorm_clipping, renorm_momentum=renorm_decay, fused=fused, trainable=trainable,
        adjustment=adjustment, name=scope, _reuse=reuse, _scope="BatchNorm", _updates_collections=updates_collections,
        _variable_collections=lambda kind: _collections(variables_collections, kind))
    outputs = layer.apply(x, training=is_training)
    if activation_fn is not None:
        outputs = activation_fn(outputs)
    return _collect_outputs(outputs_collections, outputs)


@add_arg_scope
def separable_conv2d(inputs, num_outputs, kernel_size, depth_multiplier=1, stride=1, padding="SAME",
                     data_format="NHWC", rate=1, activation_fn=nn_ops.relu, normalizer_fn=None,
                     normalizer_params=None, weights_initializer=None, pointwise_initializer=None,
                     weights_regularizer=None, biases_initializer=init_ops.zeros_initializer(),
                     biases_regularizer=None, reuse=None, variables_collections=None, outputs_collections=None,
                     trainable=True, scope=None):
    """Depthwise-separable convolution (``tf.contrib.layers.separable_conv2d``): a depthwise
    convolution with ``depthwise_weights`` (``kernel_size + [in, depth_multiplier]``), then,
    unless ``num_outputs`` is None, a 1x1 convolution with ``pointwise_weights``
    (``[1, 1, in * depth_multiplier, num_outputs]``); biases, ``normalizer_fn`` and
    ``activation_fn`` as ``conv2d``."""
    fn = "separable_conv2d"
    if num_outputs is not None:
        num_outputs = _positive_int(num_outputs, "num_outputs", fn)
    depth_multiplier = _positive_int(depth_multiplier, "depth_multiplier", fn)
    if data_format not in ("NHWC", "NCHW"):
        raise _E(f"tw.contrib.layers.{fn}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    (kh, kw), (sh, sw), (dh, dw) = _pair(kernel_size, "kernel_size", fn), _pair(stride, "stride", fn), \
        _pair(rate, "rate", fn)
    pad = _padding(padding, fn)
    with vs.variable_scope(scope, default_name="SeparableConv2d", reuse=reuse):
        x = _float_tensor(inputs, fn)
        c_axis = 3 if data_format == "NHWC" else 1
        if x.shape.ndims != 4 or x.shape[c_axis] is None:
            raise _E(f"tw.contrib.layers.{fn}: inputs must be 4-D ({data_format}) with known channels, got "
                     f"'{x.name}' of shape {x.shape}")
        in_ch = x.shape[c_axis]
        init = weights_initializer or xavier_initializer()
        depthwise = vs.get_variable("depthwise_weights", [kh, kw, in_ch, depth_multiplier], dtype=x.dtype,
                                    initializer=init, regularizer=weights_regularizer, trainable=trainable,
                                    collections=_collections(variables_collections, "weights"))
        strides = [1, sh, sw, 1] if data_format == "NHWC" else [1, 1, sh, sw]
        rate_arg = None if (dh, dw) == (1, 1) else [dh, dw]
        if num_outputs is not None:
            pointwise = vs.get_variable("pointwise_weights", [1, 1, in_ch * depth_multiplier, num_outputs],
                                        dtype=x.dtype, initializer=pointwise_initializer or init,
                                        regularizer=weights_regularizer, trainable=trainable,
                                        collections=_collections(variables_collections, "weights"))
            outputs = nn.separable_conv2d(x, depthwise, pointwise, strides, pad, rate=rate_arg,
                                          data_format=data_format)
            out_dim = num_outputs
        else:
            outputs = nn.depthwise_conv2d(x, depthwise, strides, pad, rate=rate_arg, data_format=data_format)
            out_dim = in_ch * depth_multiplier
        biases = None
        if normalizer_fn is None and biases_initializer is not None:
            biases = vs.get_variable("biases", [out_dim], dtype=x.dtype, initializer=biases_initializer,
                                     regularizer=biases_regularizer, trainable=trainable,
                                     collections=_collections(variables_collections, "biases"))
        outputs = _finish(outputs, biases, normalizer_fn, normalizer_params, activation_fn, data_format)
        return _collect_outputs(outputs_collections, outputs)


separable_convolution2d = separable_conv2d


def layer_norm(*args, **kwargs):
    raise NotImplementedError(
        "tf.contrib.layers.layer_norm is not provided by tensorweave: the core has no normalization ops yet")


# ---------------------------------------------------------------------------------------
# optimize_loss
OPTIMIZER_CLS_NAMES = {
    "Adagrad": AdagradOptimizer,
    "Adam": AdamOptimizer,
    "Momentum": lambda learning_rate: MomentumOptimizer(learning_rate, momentum=0.9),
    "RMSProp": RMSPropOptimizer,
    "SGD": GradientDescentOptimizer,
}

OPTIMIZER_SUMMARIES = ["learning_rate", "loss", "gradients", "gradient_norm", "global_gradient_norm"]


def _global_norm(tensors):
    if all(t is None for t in tensors):
        return array_ops.constant(0.0)
    return clip_ops.global_norm(tensors)


def _clip_by_global_norm(grads_and_vars, clip_norm):
    """Scale every gradient by ``clip_norm / max(global_norm, clip_norm)`` (tw.clip_by_global_norm:
    IndexedSlices stay sparse)."""
    grads = [g for g, _ in grads_and_vars]
    if all(g is None for g in grads):
        return list(grads_and_vars)
    clipped, _ = clip_ops.clip_by_global_norm(grads, clip_norm)
    return [(g, v) for g, (_, v) in zip(clipped, grads_and_vars)]


def _scaled(gr, m):
    """``gr * m``; an IndexedSlices stays one (its values scaled)."""
    if isinstance(gr, IndexedSlices):
        return IndexedSlices(math_ops.multiply(gr.values, math_ops.cast(m, gr.dtype)), gr.indices, gr.dense_shape)
    return math_ops.multiply(gr, math_ops.cast(m, gr.dtype))


def _make_optimizer(optimizer, lr):
    if isinstance(optimizer, str):
        if lr is None:
            raise _E(f"optimize_loss: learning_rate is required to build the optimizer {optimizer!r}")
        if optimizer == "Ftrl":
            raise errors.UnimplementedError("optimize_loss: the 'Ftrl' optimizer is not provided by tensorweave; "
                                            f"use one of {sorted(OPTIMIZER_CLS_NAMES)}")
        if optimizer not in OPTIMIZER_CLS_NAMES:
            raise _E(f"optimize_loss: unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZER_CLS_NAMES)}, "
                     "an Optimizer class or instance, or a function returning one")
        return OPTIMIZER_CLS_NAMES[optimizer](learning_rate=lr)
    if isinstance(optimizer, type) and issubclass(optimizer, Optimizer):
        if lr is None:
            raise _E(f"optimize_loss: learning_rate is required to build {optimizer.__name__}")
        return optimizer(learning_rate=lr)
    if isinstance(optimizer, Optimizer):
        return optimizer
    if callable(optimizer):
        opt = optimizer(lr) if lr is not None else optimizer()
        if not isinstance(opt, Optimizer):
            raise _E(f"optimize_loss: the optimizer function returned {opt!r}, not a tw.train.Optimizer")
        return opt
    raise _E(f"optimize_loss: optimizer must be a name ({sorted(OPTIMIZER_CLS_NAMES)}), an Optimizer class or "
             f"instance, or a function returning one; got {optimizer!r}")


def optimize_loss(loss, global_step, learning_rate, optimizer, gradient_noise_scale=None, gradient_multipliers=None,
                  clip_gradients=None, learning_rate_decay_fn=None, update_ops=None, variables=None, name=None,
                  summaries=None, colocate_gradients_with_ops=False, increment_global_step=True):
    """One training step for ``loss``: returns ``loss`` made to depend on the update (run
    it to train and read the loss). ``global_step`` None means ``get_global_step()``; a
    float ``learning_rate`` becomes the non-trainable variable ``OptimizeLoss/learning_rate``.
    ``clip_gradients``: a float (clip by global norm) or a function of the (gradient,
    variable) list. ``summaries``: a subset of ``OPTIMIZER_SUMMARIES`` (default: loss,
    learning rate, global gradient norm)."""
    loss = convert_to_tensor(loss)
    if loss.shape.ndims not in (None, 0):
        raise _E(f"optimize_loss: the loss must be a scalar, got '{loss.name}' of shape {loss.shape}")
    if global_step is None:
        global_step = get_global_step()
    else:
        assert_global_step(global_step)
    g = get_default_graph()
    with vs.variable_scope(name, default_name="OptimizeLoss"):
        if update_ops is None:
            update_ops = g.get_collection(GraphKeys.UPDATE_OPS)
        update_ops = list(update_ops)
        if update_ops:
            with g.control_dependencies(update_ops):
                loss = array_ops.identity(loss, name="loss_after_updates")

        lr = None
        if learning_rate is not None:
            if isinstance(learning_rate, Tensor | Variable) and learning_rate.shape.ndims == 0:
                lr = learning_rate
            elif isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool):
                if learning_rate < 0.0:
                    raise _E(f"optimize_loss: invalid learning_rate {learning_rate!r}: must be >= 0")
                lr = vs.get_variable("learning_rate", [], trainable=False,
                                     initializer=init_ops.constant_initializer(float(learning_rate)))
            else:
                raise _E(f"optimize_loss: learning_rate should be a float or a 0-d Tensor, got {learning_rate!r}")

        if summaries is None:
            summaries = ["loss", "learning_rate", "global_gradient_norm"]
        else:
            for s in summaries:
                if s not in OPTIMIZER_SUMMARIES:
                    raise _E(f"optimize_loss: summaries must be a subset of {OPTIMIZER_SUMMARIES}, got {s!r}")
        if learning_rate is not None and learning_rate_decay_fn is not None:
            if global_step is None:
                raise _E("optimize_loss: global_step is required for learning_rate_decay_fn")
            lr = learning_rate_decay_fn(lr, global_step)
        if lr is not None and "learning_rate" in summaries:
            summary_ops.scalar("learning_rate", lr)

        opt = _make_optimizer(optimizer, lr)
        if variables is None:
            variables = trainable_variables()
        gradients = opt.compute_gradients(loss, variables, colocate_gradients_with_ops=colocate_gradients_with_ops)
        if gradient_noise_scale is not None:
            gradients = [(None if gr is None else math_ops.add(
                gr, math_ops.multiply(random_ops.truncated_normal(gr.shape.as_list() if gr.shape.is_fully_defined()
                                                                  else array_ops.shape(gr), dtype=gr.dtype),
                                      gradient_noise_scale)), v) for gr, v in gradients]
        if gradient_multipliers is not None:
            multiplied = []
            for gr, v in gradients:
                m = gradient_multipliers.get(v, gradient_multipliers.get(v.op.name))
                multiplied.append((gr if gr is None or m is None else _scaled(gr, m), v))
            gradients = multiplied
        if not gradients:
            raise _E("optimize_loss: empty list of (gradient, variable) pairs")
        if "global_gradient_norm" in summaries or "gradient_norm" in summaries:
            summary_ops.scalar("global_norm/gradient_norm", _global_norm([gr for gr, _ in gradients]))
        if callable(clip_gradients):
            gradients = clip_gradients(gradients)
        elif isinstance(clip_gradients, numbers.Real) and not isinstance(clip_gradients, bool):
            gradients = _clip_by_global_norm(gradients, float(clip_gradients))
        elif clip_gradients is not None:
            raise _E(f"optimize_loss: clip_gradients must be a float or a function, got {clip_gradients!r}")
        if "loss" in summaries:
            summary_ops.scalar("loss", loss)
        for gr, v in gradients:
            if gr is None:
                continue
            if "gradients" in summaries:
                summary_ops.histogram("gradients/" + v.op.name, gr.values if isinstance(gr, IndexedSlices) else gr)
            if "gradient_norm" in summaries:
                summary_ops.scalar("gradient_norm/" + v.op.name, _global_norm([gr]))
        grad_updates = opt.apply_gradients(gradients, global_step=global_step if increment_global_step else None,
                                           name="train")
        with g.control_dependencies([grad_updates]):
            return array_ops.identity(loss, name="train_op")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.layers.{name} is not provided by tensorweave (tw.contrib.layers has: "
                         f"{', '.join(sorted(__all__))})")
