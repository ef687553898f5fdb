"""Weight initialisers (``tw.zeros_initializer``, ``tw.glorot_uniform_initializer``, ...).

TensorFlow 1.x's initializer classes: an initializer is configured once and called as
``init(shape, dtype=None, partition_info=None)`` to build a Tensor with the initial value
(``tw.get_variable`` calls it inside the variable's name scope). ``dtype`` None means the
dtype given to the constructor. Random initializers build random ops (``tw.random_uniform``,
``tw.truncated_normal``, ...), so their seeds follow the random ops' graph/op seed rules:
with a ``seed``, every variable made with the same initializer object gets the same values.
"""

from __future__ import annotations

import math

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import as_shape
from tensorweave.ops import array_ops, random_ops

__all__ = [
    "zeros_initializer",
    "ones_initializer",
    "constant_initializer",
    "random_uniform_initializer",
    "random_normal_initializer",
    "truncated_normal_initializer",
    "variance_scaling_initializer",
    "glorot_uniform_initializer",
    "glorot_normal_initializer",
]


def _shape_list(shape, who):
    s = as_shape(shape)
    if not s.is_fully_defined():
        raise errors.InvalidArgumentError(f"{who}: the shape must be fully defined, got {s}")
    return s.as_list()


def _dtype(dtype, default):
    return dtypes.as_dtype(default if dtype is None else dtype)


def _float_dtype(dtype, who):
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_floating:
        raise errors.InvalidArgumentError(
            f"{who}: expected a floating-point dtype (float16, float32, float64), got {dtype.name}")
    return dtype


class Initializer:
    """Base class: ``init(shape, dtype=None, partition_info=None) -> Tensor``."""

    def __call__(self, shape, dtype=None, partition_info=None):
        raise NotImplementedError

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class Zeros(Initializer):
    """All zeros (empty strings, False)."""

    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return array_ops.zeros(_shape_list(shape, "zeros_initializer"), _dtype(dtype, self.dtype))

    def get_config(self):
        return {"dtype": self.dtype.name}


class Ones(Initializer):
    """All ones (True)."""

    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return array_ops.ones(_shape_list(shape, "ones_initializer"), _dtype(dtype, self.dtype))

    def get_config(self):
        return {"dtype": self.dtype.name}


class Constant(Initializer):
    """A constant: a scalar fills the shape; a list or array must have the shape's number
    of elements (it is reshaped), or exactly the shape with ``verify_shape=True``."""

    def __init__(self, value=0, dtype=dtypes.float32, verify_shape=False):
        if not np.isscalar(value) and not isinstance(value, list | tuple | np.ndarray):
            raise errors.InvalidArgumentError(
                f"constant_initializer: value must be a scalar, list, tuple or NumPy array, got {type(value).__name__}")
        self.value = value
        self.dtype = dtypes.as_dtype(dtype)
        self._verify_shape = verify_shape

    def __call__(self, shape, dtype=None, partition_info=None, verify_shape=None):
        verify = self._verify_shape if verify_shape is None else verify_shape
        return array_ops.constant(self.value, dtype=_dtype(dtype, self.dtype),
                                  shape=_shape_list(shape, "constant_initializer"), verify_shape=verify)

    def get_config(self):
        return {"value": self.value, "dtype": self.dtype.name}


class RandomUniform(Initializer):
    """Uniform values in ``[minval, maxval)``; maxval defaults to 1 for floats."""

    def __init__(self, minval=0, maxval=None, seed=None, dtype=dtypes.float32):
        self.minval, self.maxval, self.seed = minval, maxval, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return random_ops.random_uniform(_shape_list(shape, "random_uniform_initializer"), self.minval,
                                         self.maxval, _dtype(dtype, self.dtype), seed=self.seed)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed, "dtype": self.dtype.name}


class RandomNormal(Initializer):
    """Normally distributed values."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        self.mean, self.stddev, self.seed = mean, stddev, seed
        self.dtype = _float_dtype(dtype, "random_normal_initializer")

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = _float_dtype(_dtype(dtype, self.dtype), "random_normal_initializer")
        return random_ops.random_normal(_shape_list(shape, "random_normal_initializer"), self.mean,
                                        self.stddev, dtype, seed=self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed, "dtype": self.dtype.name}


class TruncatedNormal(Initializer):
    """Normal values, those beyond two standard deviations from the mean redrawn."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        self.mean, self.stddev, self.seed = mean, stddev, seed
        self.dtype = _float_dtype(dtype, "truncated_normal_initializer")

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = _float_dtype(_dtype(dtype, self.dtype), "truncated_normal_initializer")
        return random_ops.truncated_normal(_shape_list(shape, "truncated_normal_initializer"), self.mean,
                                           self.stddev, dtype, seed=self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed, "dtype": self.dtype.name}


def _compute_fans(shape):
    """(fan_in, fan_out) of a weight shape, TensorFlow's convention: a conv kernel
    ``[..., in, out]`` counts its receptive field."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = 1
    for d in shape[:-2]:
        receptive *= d
    return shape[-2] * receptive, shape[-1] * receptive


# std of a standard normal truncated to [-2, 2] (scipy.stats.truncnorm.std(a=-2, b=2)).
_TRUNCATED_STD = 0.87962566103423978


class VarianceScaling(Initializer):
    """Values whose variance is ``scale / n``, n = fan_in, fan_out or their mean (``mode``),
    drawn from a truncated normal (``"truncated_normal"``, or ``"normal"`` as in TF 1.x), a
    normal (``"untruncated_normal"``) or a uniform distribution (``"uniform"``)."""

    _MODES = ("fan_in", "fan_out", "fan_avg")
    _DISTRIBUTIONS = ("normal", "uniform", "truncated_normal", "untruncated_normal")

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None, dtype=dtypes.float32):
        if scale <= 0.0:
            raise errors.InvalidArgumentError(f"variance_scaling_initializer: scale must be positive, got {scale}")
        if mode not in self._MODES:
            raise errors.InvalidArgumentError(
                f"variance_scaling_initializer: invalid mode {mode!r}; expected one of {list(self._MODES)}")
        distribution = distribution.lower()
        if distribution not in self._DISTRIBUTIONS:
            raise errors.InvalidArgumentError(
                f"variance_scaling_initializer: invalid distribution {distribution!r}; expected one of "
                f"{list(self._DISTRIBUTIONS)}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed
        self.dtype = _float_dtype(dtype, "variance_scaling_initializer")

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = _float_dtype(_dtype(dtype, self.dtype), "variance_scaling_initializer")
        shape = _shape_list(shape, "variance_scaling_initializer")
        fan_shape = _shape_list(partition_info.full_shape, "variance_scaling_initializer") \
            if partition_info is not None else shape
        fan_in, fan_out = _compute_fans(fan_shape)
        scale = self.scale
        if self.mode == "fan_in":
            scale /= max(1.0, fan_in)
        elif self.mode == "fan_out":
            scale /= max(1.0, fan_out)
        else:
            scale /= max(1.0, (fan_in + fan_out) / 2.0)
        if self.distribution in ("normal", "truncated_normal"):
            return random_ops.truncated_normal(shape, 0.0, math.sqrt(scale) / _TRUNCATED_STD, dtype, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return random_ops.random_normal(shape, 0.0, math.sqrt(scale), dtype, seed=self.seed)
        limit = math.sqrt(3.0 * scale)
        return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, "seed": self.seed,
                "dtype": self.dtype.name}


class GlorotUniform(VarianceScaling):
    """Glorot/Xavier uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "uniform", seed, dtype)

    def get_config(self):
        return {"seed": self.seed, "dtype": self.dtype.name}


class GlorotNormal(VarianceScaling):
    """Glorot/Xavier normal: truncated normal with stddev sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)

    def get_config(self):
        return {"seed": self.seed, "dtype": self.dtype.name}


# TensorFlow 1.x's public names are the classes themselves.
zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_uniform_initializer = RandomUniform
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
variance_scaling_initializer = VarianceScaling
glorot_uniform_initializer = GlorotUniform
glorot_normal_initializer = GlorotNormal
