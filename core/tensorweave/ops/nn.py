"""The ``tw.nn`` namespace (TF1 ``tf.nn``)."""

from tensorweave.ops import rnn_cell  # noqa: F401  (tw.nn.rnn_cell.BasicLSTMCell, ...)
from tensorweave.ops.candidate_sampling_ops import (  # noqa: F401
    all_candidate_sampler,
    compute_accidental_hits,
    fixed_unigram_candidate_sampler,
    learned_unigram_candidate_sampler,
    log_uniform_candidate_sampler,
    uniform_candidate_sampler,
)
from tensorweave.ops.depthwise_conv_ops import (  # noqa: F401
    depthwise_conv2d,
    depthwise_conv2d_native,
    depthwise_conv2d_native_backprop_filter,
    depthwise_conv2d_native_backprop_input,
    separable_conv2d,
)
from tensorweave.ops.embedding_ops import embedding_lookup, embedding_lookup_sparse  # noqa: F401
from tensorweave.ops.indexing_ops import top_k  # noqa: F401
from tensorweave.ops.math_ops import sigmoid, tanh  # noqa: F401
from tensorweave.ops.nn_impl import nce_loss, sampled_softmax_loss  # noqa: F401
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
from tensorweave.ops.normalization_ops import (  # noqa: F401
    batch_normalization,
    fused_batch_norm,
    local_response_normalization,
    lrn,
)
from tensorweave.ops.rnn import (  # noqa: F401
    bidirectional_dynamic_rnn,
    dynamic_rnn,
    static_bidirectional_rnn,
    static_rnn,
)
