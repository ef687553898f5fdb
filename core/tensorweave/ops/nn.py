"""The ``tw.nn`` namespace (TF1 ``tf.nn``)."""

from tensorweave.ops.math_ops import sigmoid, tanh  # noqa: F401
from tensorweave.ops.nn_ops import (  # noqa: F401
    avg_pool,
    bias_add,
    conv2d,
    conv2d_backprop_filter,
    conv2d_backprop_input,
    conv2d_transpose,
    dropout,
    elu,
    in_top_k,
    l2_loss,
    log_softmax,
    max_pool,
    moments,
    relu,
    relu6,
    sigmoid_cross_entropy_with_logits,
    softmax,
    softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2,
    softplus,
    sparse_softmax_cross_entropy_with_logits,
    xw_plus_b,
)
