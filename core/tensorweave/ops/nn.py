"""The ``tw.nn`` namespace (TF1 ``tf.nn``)."""

from tensorweave.ops.math_ops import sigmoid, tanh  # noqa: F401
from tensorweave.ops.nn_ops import relu  # noqa: F401
