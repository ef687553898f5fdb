"""tensorweave: a dataflow-graph machine-learning system after the TensorFlow whitepaper.

The public API mirrors TensorFlow 1.x names, so ``import tensorweave as tf`` runs TF1-style
programs that stick to implemented ops::

    import tensorweave as tf
    x = tf.placeholder(tf.float32, [None, 3])
    w = tf.Variable(tf.ones([3, 1]))
    y = tf.matmul(x, w)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        print(sess.run(y, {x: [[1, 2, 3]]}))
"""

from __future__ import annotations

import importlib.metadata as _md
import logging as _logging

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.dtypes import (
    DType, as_dtype, bool_ as bool, complex64, complex128, double, float16, float32, float64, half,
    int8, int16, int32, int64, string, uint8, uint16, uint32, uint64,
)
from tensorweave.framework.graph import (
    Graph, GraphKeys, Operation, Tensor, convert_to_tensor, get_default_graph,
    register_tensor_conversion_function, reset_default_graph,
)
from tensorweave.framework.importer import import_graph_def
from tensorweave.framework.sparse_tensor import SparseTensor, SparseTensorValue
from tensorweave.framework.indexed_slices import IndexedSlices, IndexedSlicesValue, convert_to_tensor_or_indexed_slices
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave import distributed, layers, python_io, summary, train  # distributed: the sessions for cluster targets
from tensorweave import data  # tf.data (docs/data.md)
from tensorweave import distribute  # tf.distribute.cluster_resolver: Slurm, Kubernetes, TF_CONFIG (docs/distributed.md)
from tensorweave import app, contrib, flags, gfile, logging, losses, test  # TF1's platform APIs (docs/tf1.md)
from tensorweave import estimator, feature_column, metrics  # tf.estimator, tf.feature_column, tf.metrics (docs/estimator.md)
from tensorweave.ops import nn
from tensorweave.ops import image  # tf.image: resize_bilinear, resize_nearest_neighbor, resize_images
from tensorweave.ops import collective_ops  # TF's collective_ops: all_reduce, all_gather, broadcast_send/recv
from tensorweave.ops.init_ops import *  # noqa: F401,F403
from tensorweave.ops.variable_scope import *  # noqa: F401,F403
from tensorweave.ops.partitioned_variables import *  # noqa: F401,F403
from tensorweave.ops.embedding_ops import sparse_segment_mean, sparse_segment_sqrt_n, sparse_segment_sum
from tensorweave.ops.array_ops import *  # noqa: F401,F403  (each family lists its API in __all__)
from tensorweave.ops.control_flow_ops import group, no_op
from tensorweave.ops.control_flow_ops import case, cond, while_loop
from tensorweave.ops.gradients import NotDifferentiable, RegisterGradient, gradients, no_gradient
from tensorweave.ops.control_flow_ops import tuple_ as tuple
from tensorweave.ops.accumulator_ops import ConditionalAccumulator
from tensorweave.ops.mutex_ops import CriticalSection
from tensorweave.ops.data_flow_ops import FIFOQueue, QueueBase, RandomShuffleQueue, count_up_to
from tensorweave.ops.tensor_array_ops import TensorArray
from tensorweave.ops.io_ops import *  # noqa: F401,F403
from tensorweave.ops.indexing_ops import *  # noqa: F401,F403  (gather_nd, dynamic_partition, pad, ...)
from tensorweave.ops.clip_ops import *  # noqa: F401,F403
from tensorweave.ops.math_ops import *  # noqa: F401,F403
from tensorweave.ops.math_ops import argmax, argmin, cast, matmul  # named: the TF1 aliases below use them
from tensorweave.ops.array_ops import concat
from tensorweave.ops.nn_ops import *  # noqa: F401,F403
from tensorweave.ops.random_ops import *  # noqa: F401,F403
from tensorweave.ops.sparse_ops import *  # noqa: F401,F403
from tensorweave.ops.string_ops import *  # noqa: F401,F403  (string hashing, as_string, sparse crosses)
from tensorweave.ops.state_ops import assign, assign_add, assign_sub, is_variable_initialized
from tensorweave.ops.state_ops import (
    scatter_add, scatter_div, scatter_max, scatter_min, scatter_mul, scatter_nd_add, scatter_nd_update, scatter_sub,
    scatter_update,
)
from tensorweave.ops.variables import (
    Variable, all_variables, global_variables, global_variables_initializer, initialize_all_variables,
    local_variables, local_variables_initializer, trainable_variables, variables_initializer,
)
from tensorweave.runtime.config import ConfigProto, GPUOptions, GraphOptions, RunMetadata, RunOptions
from tensorweave.client.session import InteractiveSession, Session
from tensorweave.framework.graph import get_default_session
from tensorweave.runtime.device import create_local_devices

# A library logs and lets the application decide what to show: nothing is printed unless the
# program configures logging (`logging.basicConfig()`); the `tensorweave` command does.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

try:
    __version__ = _md.version("tensorweave")
except _md.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

newaxis = None


def name_scope(name, default_name=None, values=None):
    """Prefix the names of ops created inside (``with tw.name_scope("layer1"):``)."""
    return get_default_graph().name_scope(name if name is not None else default_name)


def device(device_name_or_function):
    """Constrain ops created inside to a device (partial specs allowed: ``/device:GPU:*``)."""
    return get_default_graph().device(device_name_or_function)


def control_dependencies(control_inputs):
    """Ops created inside run only after ``control_inputs`` (None clears outer ones)."""
    return get_default_graph().control_dependencies(control_inputs)


def container(container_name):
    """Variables created inside live in the named container (shared across Sessions)."""
    return get_default_graph().container(container_name)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key):
    return get_default_graph().get_collection_ref(key)


def set_random_seed(seed):
    """Set the graph-level seed: random ops without an op seed become deterministic."""
    get_default_graph().seed = seed


def reset_container(containers=None):
    """Clear named containers in this process (``tf.Session.reset("", containers)``)."""
    Session.reset("", containers)


def list_devices(config=None):
    """The devices a new local Session would use."""
    return create_local_devices(config)


def colocate_with(op, ignore_existing=False):
    """Place ops created inside on the same device as ``op`` (a variable, op or tensor)."""
    return get_default_graph().colocate_with(op, ignore_existing)


# ---------------------------------------------------------------------------------------
# TF1's deprecated names that programs written before TF 1.0 still use (docs/tf1.md). Those
# already in an op family's __all__ (mul, sub, neg, div, pack, unpack, to_float, ...) come
# from there (`select` with `where` in ops/array_ops.py).
def arg_max(input, dimension, output_type=int64, name=None):  # noqa: A002 - TF1 argument name
    """``tw.argmax`` under its pre-1.0 name."""
    return argmax(input, dimension, name=name, output_type=output_type)


def arg_min(input, dimension, output_type=int64, name=None):  # noqa: A002
    """``tw.argmin`` under its pre-1.0 name."""
    return argmin(input, dimension, name=name, output_type=output_type)


def to_double(x, name="ToDouble"):
    return cast(x, float64, name=name)


def concat_v2(values, axis, name="concat_v2"):
    """``tw.concat`` under its TF 0.12 name."""
    return concat(values, axis, name=name)


def batch_matmul(x, y, adj_x=False, adj_y=False, name=None):
    """``tw.matmul`` of (batches of) matrices, under its pre-1.0 name."""
    return matmul(x, y, adjoint_a=adj_x, adjoint_b=adj_y, name=name)


def initialize_local_variables():
    return local_variables_initializer()


def initialize_variables(var_list, name="init"):
    return variables_initializer(var_list, name=name)


def scalar_summary(tags, values, collections=None, name=None):
    """``tw.summary.scalar(tags, values)`` (TF 0.x name)."""
    return summary.scalar(tags, values, collections=collections)


def histogram_summary(tag, values, collections=None, name=None):
    return summary.histogram(tag, values, collections=collections)


def image_summary(tag, tensor, max_images=3, collections=None, name=None):
    return summary.image(tag, tensor, max_outputs=max_images, collections=collections)


def audio_summary(tag, tensor, sample_rate, max_outputs=3, collections=None, name=None):
    return summary.audio(tag, tensor, sample_rate, max_outputs=max_outputs, collections=collections)


def merge_summary(inputs, collections=None, name=None):
    return summary.merge(inputs, collections=collections, name=name)


def merge_all_summaries(key=GraphKeys.SUMMARIES):
    return summary.merge_all(key)


SummaryWriter = summary.FileWriter
