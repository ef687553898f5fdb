"""Built-in plugin: the core's op definitions and gradient functions (``tensorweave.ops``)."""

from __future__ import annotations

from tensorweave.ops import (
    accumulator_ops,
    array_grad,
    array_ops,
    candidate_sampling_ops,
    checkpoint_ops,
    cnn_grad,
    collective_ops,
    compression_ops,
    constant_op,
    control_flow_grad,
    control_flow_ops,
    control_flow_primitives,
    data_flow_ops,
    dataset_ops,
    depthwise_conv_ops,
    embedding_grad,
    embedding_ops,
    fusion_ops,
    image_ops,
    indexing_grad,
    indexing_ops,
    io_ops,
    math_grad,
    math_ops,
    mutex_ops,
    nn_grad,
    nn_ops,
    normalization_ops,
    random_ops,
    sparse_grad,
    sparse_ops,
    state_ops,
    string_ops,
    summary_ops,
    tensor_array_grad,
    tensor_array_ops,
    training_ops,
)
from tensorweave.plugins import hookimpl

# Op families: each module's ``register_ops`` declares its ops. The runtime's _Send/_Recv
# (ops/transfer_ops.py) are deliberately not among them: see that module's docstring.
FAMILIES = (constant_op, array_ops, math_ops, random_ops, state_ops, control_flow_primitives, control_flow_ops,
            nn_ops, training_ops, data_flow_ops, dataset_ops, checkpoint_ops, io_ops, accumulator_ops,
            compression_ops, mutex_ops, summary_ops, fusion_ops, sparse_ops, candidate_sampling_ops,
            indexing_ops, embedding_ops, string_ops, tensor_array_ops)
FAMILIES += (normalization_ops, depthwise_conv_ops, image_ops)  # batch norm, LRN, depthwise conv, resize
FAMILIES += (collective_ops,)  # all-reduce, all-gather, broadcast among devices and tasks
# Gradient modules: ``register_ops`` (helper ops gradients need) and ``register_gradients``.
GRADIENTS = (math_grad, array_grad, nn_grad, control_flow_grad, sparse_grad, indexing_grad, embedding_grad,
             tensor_array_grad)
GRADIENTS += (cnn_grad,)


@hookimpl
def tensorweave_register_ops(registry):
    for family in FAMILIES:
        family.register_ops(registry)
    for module in GRADIENTS:
        module.register_ops(registry)
        module.register_gradients(registry)
