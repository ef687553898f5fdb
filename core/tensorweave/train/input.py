"""Input pipelines built on queues and queue runners (TF1's ``tf.train`` input helpers).

Producers fill a queue from a tensor of items, epoch after epoch, in a QueueRunner thread:
``input_producer``, ``string_input_producer`` (filenames for readers), ``range_input_producer``
and ``slice_input_producer``. ``batch`` and ``shuffle_batch`` put single examples (or
batches, with ``enqueue_many``) into a FIFO or random-shuffle queue from ``num_threads``
runner threads and dequeue ``batch_size`` at a time. Every helper adds its QueueRunner to
the ``QUEUE_RUNNERS`` collection: start them with ``tw.train.start_queue_runners``.

``num_epochs`` is counted in a local variable (``tw.local_variables_initializer()`` must run
first), as in TF1: after the last epoch the producer's enqueue fails with
``OutOfRangeError``, its runner closes the queue, and consumers get ``OutOfRangeError``
once the queue is drained.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, random_ops
from tensorweave.ops.data_flow_ops import FIFOQueue, RandomShuffleQueue, count_up_to
from tensorweave.ops.variables import Variable
from tensorweave.train.queue_runner import QueueRunner, add_queue_runner

__all__ = ["limit_epochs", "input_producer", "string_input_producer", "range_input_producer",
           "slice_input_producer", "batch", "shuffle_batch"]


def limit_epochs(tensor, num_epochs=None, name=None):
    """``tensor``, but only ``num_epochs`` times: evaluating it once more raises
    OutOfRangeError. The count is a local variable named ``epochs``."""
    if num_epochs is None:
        return tensor
    if num_epochs <= 0:
        raise errors.InvalidArgumentError(f"limit_epochs: num_epochs must be > 0, got {num_epochs}")
    g = get_default_graph()
    with g.name_scope(name or "limit_epochs") as scope:
        with g.control_dependencies(None):
            epochs = Variable(convert_to_tensor(0, dtype=dtypes.int64), name="epochs", trainable=False,
                              collections=[GraphKeys.LOCAL_VARIABLES])
        counter = count_up_to(epochs, num_epochs)
        with g.control_dependencies([counter]):
            return array_ops.identity(tensor, name=scope.rstrip("/").split("/")[-1])


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None, capacity=32,
                   shared_name=None, summary_name=None, name=None, cancel_op=None):
    """A FIFOQueue filled with the rows of ``input_tensor`` (shuffled each epoch if
    ``shuffle``) by a QueueRunner; returns the queue."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer"):
        input_tensor = convert_to_tensor(input_tensor, name="input_tensor")
        s = input_tensor.shape
        rows = TensorShape(None) if s.ndims is None else TensorShape(s.dims[1:])
        element_shape = rows.merge_with(as_shape(element_shape)) if element_shape is not None else rows
        if not element_shape.is_fully_defined():
            raise errors.InvalidArgumentError(
                f"input_producer: the shape of an element of '{input_tensor.name}' must be fully defined, "
                f"got {element_shape}; pass element_shape=")
        if shuffle:
            input_tensor = random_ops.random_shuffle(input_tensor, seed=seed)
        input_tensor = limit_epochs(input_tensor, num_epochs)
        q = FIFOQueue(capacity, [input_tensor.dtype], shapes=[element_shape], shared_name=shared_name,
                      name="fifo_queue")
        enq = q.enqueue_many([input_tensor])
        add_queue_runner(QueueRunner(q, [enq], cancel_op=cancel_op))
        return q


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None, capacity=32,
                          shared_name=None, name=None, cancel_op=None):
    """A queue of the strings (usually filenames) in the 1-D ``string_tensor``, for readers."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer") as scope:
        string_tensor = convert_to_tensor(string_tensor, dtype=dtypes.string)
        v = constant_value(string_tensor)
        if v is not None and v.size == 0:
            raise errors.InvalidArgumentError("string_input_producer: string_tensor must not be empty")
        if string_tensor.shape.ndims not in (None, 1):
            raise errors.InvalidArgumentError(
                f"string_input_producer: string_tensor must be a vector, got shape {string_tensor.shape}")
        return input_producer(string_tensor, [], num_epochs, shuffle, seed, capacity, shared_name,
                              name=scope, cancel_op=cancel_op)


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None):
    """A queue of the int32 integers 0 .. limit-1, epoch after epoch."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer") as scope:
        r = array_ops.range(limit, dtype=dtypes.int32)
        return input_producer(r, [], num_epochs, shuffle, seed, capacity, shared_name, name=scope)


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None):
    """One row (slice along dimension 0) of each tensor in ``tensor_list``, the same row of
    each, a different row each time it is evaluated."""
    g = get_default_graph()
    with g.name_scope(name or "input_producer") as scope:
        tensor_list = [convert_to_tensor(t) for t in tensor_list]
        if not tensor_list:
            raise errors.InvalidArgumentError("slice_input_producer: tensor_list must not be empty")
        n = tensor_list[0].shape.dims[0] if tensor_list[0].shape.ndims else None
        for t in tensor_list[1:]:
            m = t.shape.dims[0] if t.shape.ndims else None
            if n is not None and m is not None and m != n:
                raise errors.InvalidArgumentError(
                    f"slice_input_producer: all tensors need the same size of dimension 0; "
                    f"'{tensor_list[0].name}' has {n}, '{t.name}' has {m}")
        size = n if n is not None else array_ops.shape(tensor_list[0])[0]
        q = range_input_producer(size, num_epochs, shuffle, seed, capacity, shared_name, name=scope)
        index = q.dequeue()
        return [array_ops.gather(t, index) for t in tensor_list]


# ---------------------------------------------------------------------------------------
def _flatten(tensors):
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [tensors[k] for k in keys], keys
    if isinstance(tensors, Tensor) or not isinstance(tensors, list | tuple):
        return [tensors], None
    return list(tensors), None


def _batch_shapes(tensor_list, shapes, enqueue_many, what):
    if shapes is not None:
        shapes = [as_shape(s) for s in shapes]
        if len(shapes) != len(tensor_list):
            raise errors.InvalidArgumentError(f"{what}: {len(shapes)} shapes for {len(tensor_list)} tensors")
    else:
        shapes = []
        for t in tensor_list:
            s = t.shape
            if enqueue_many:
                s = TensorShape(None) if s.ndims is None else TensorShape(s.dims[1:])
            shapes.append(s)
    for t, s in zip(tensor_list, shapes):
        if not s.is_fully_defined():
            raise errors.InvalidArgumentError(
                f"{what}: the shape of '{t.name}'{' per example' if enqueue_many else ''} must be fully "
                f"defined, got {s}; pass shapes=")
    return shapes


def _batch(queue_fn, tensors, batch_size, num_threads, enqueue_many, shapes, allow_smaller_final_batch, what):
    tensor_list, keys = _flatten(tensors)
    if not tensor_list:
        raise errors.InvalidArgumentError(f"{what}: no tensors to batch")
    tensor_list = [convert_to_tensor(t) for t in tensor_list]
    shapes = _batch_shapes(tensor_list, shapes, enqueue_many, what)
    q = queue_fn([t.dtype for t in tensor_list], shapes)
    enq = q.enqueue_many(tensor_list) if enqueue_many else q.enqueue(tensor_list)
    add_queue_runner(QueueRunner(q, [enq] * int(num_threads)))
    deq = q.dequeue_up_to(batch_size) if allow_smaller_final_batch else q.dequeue_many(batch_size)
    if keys is not None:
        deq = deq if isinstance(deq, list) else [deq]
        return dict(zip(keys, deq))
    return deq


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
          allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``batch_size`` examples, in order, through a FIFOQueue filled by
    ``num_threads`` QueueRunner threads (``tf.train.batch``). ``tensors``: a tensor, a list
    or a dict of them (one example each; a batch each with ``enqueue_many``)."""
    if dynamic_pad:
        raise errors.UnimplementedError("tw.train.batch: dynamic_pad is not implemented")
    g = get_default_graph()
    with g.name_scope(name or "batch"):
        return _batch(lambda dts, shp: FIFOQueue(capacity, dts, shp, shared_name=shared_name, name="fifo_queue"),
                      tensors, batch_size, num_threads, enqueue_many, shapes, allow_smaller_final_batch, "batch")


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None, enqueue_many=False,
                  shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``batch_size`` examples in random order, through a RandomShuffleQueue
    that keeps at least ``min_after_dequeue`` examples to mix (``tf.train.shuffle_batch``)."""
    g = get_default_graph()
    with g.name_scope(name or "shuffle_batch"):
        return _batch(lambda dts, shp: RandomShuffleQueue(capacity, min_after_dequeue, dts, shp, seed=seed,
                                                          shared_name=shared_name, name="random_shuffle_queue"),
                      tensors, batch_size, num_threads, enqueue_many, shapes, allow_smaller_final_batch,
                      "shuffle_batch")
