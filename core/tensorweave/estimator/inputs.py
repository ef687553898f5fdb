"""``tw.estimator.inputs``: input functions over NumPy arrays (TF1's ``numpy_input_fn``).

``numpy_input_fn`` builds its pipeline from the queue-based input helpers of ``tw.train``
(no ``tw.data``): a ``range_input_producer`` queue of row indices (shuffled each epoch when
``shuffle``; ``num_epochs`` passes, or forever with None), and a batching thread that takes up
to ``batch_size`` indices, gathers those rows of every array and puts them into a FIFO queue
of ``queue_capacity`` examples. The QueueRunners are started by the Estimator's
``MonitoredSession``. With ``num_epochs`` set, the last batch may be smaller (as TF1's) and
the input then ends with ``OutOfRangeError``, which ends training, evaluation or prediction.
The arrays are constants of the graph (TF1 feeds them from Python instead), so each is held
once more in memory.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.framework.graph import get_default_graph
from tensorweave.ops import array_ops
from tensorweave.train import input as input_lib

__all__ = ["numpy_input_fn"]

_E = errors.InvalidArgumentError


def _as_arrays(value, what):
    """{name: ndarray} from a dict of arrays, or {None: ndarray} from one array."""
    if isinstance(value, dict):
        if not value:
            raise _E(f"numpy_input_fn: {what} must not be an empty dict")
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"numpy_input_fn: the keys of {what} must be strings, got {k!r}")
            out[k] = _array(v, f"{what}[{k!r}]")
        return out
    if isinstance(value, np.ndarray | list | tuple):
        return {None: _array(value, what)}
    raise TypeError(f"numpy_input_fn: {what} must be a dict of arrays or an array, got {type(value).__name__}")


def _array(v, what):
    arr = np.asarray(v)
    if arr.ndim == 0:
        raise _E(f"numpy_input_fn: {what} must have a first (example) dimension, got a scalar")
    if arr.dtype.kind == "O":
        try:
            arr = arr.astype(str)
        except (TypeError, ValueError):
            raise _E(f"numpy_input_fn: {what} has dtype object that is not strings") from None
    return arr


def numpy_input_fn(x, y=None, batch_size=128, num_epochs=1, shuffle=None, queue_capacity=1000, num_threads=1):
    """An ``input_fn`` that yields batches of the rows of ``x`` (a dict of arrays, or one
    array) and ``y`` (an array, a dict of arrays, or None): ``(features, labels)``, or just
    the features when ``y`` is None. ``shuffle`` must be given (True for training, False to
    keep the order, e.g. for prediction)."""
    if not isinstance(shuffle, bool):
        raise _E(f"numpy_input_fn: shuffle must be provided and explicitly set as boolean (it is recommended to "
                 f"set it as True for training); got {shuffle!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size <= 0:
        raise _E(f"numpy_input_fn: batch_size must be a positive int, got {batch_size!r}")
    if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(num_epochs, int | np.integer)
                                   or num_epochs <= 0):
        raise _E(f"numpy_input_fn: num_epochs must be a positive int or None (forever), got {num_epochs!r}")
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads <= 0:
        raise _E(f"numpy_input_fn: num_threads must be a positive int, got {num_threads!r}")
    if isinstance(queue_capacity, bool) or not isinstance(queue_capacity, int) or queue_capacity <= 0:
        raise _E(f"numpy_input_fn: queue_capacity must be a positive int, got {queue_capacity!r}")

    features = _as_arrays(x, "x")
    targets = None if y is None else _as_arrays(y, "y")
    if targets is not None and None not in targets and None not in features:
        dup = sorted(set(features) & set(targets))
        if dup:
            raise _E(f"numpy_input_fn: {len(dup)} duplicate keys are found in both x and y: {dup}")
    lengths = {f"x[{k!r}]" if k is not None else "x": len(a) for k, a in features.items()}
    if targets is not None:
        lengths.update({f"y[{k!r}]" if k is not None else "y": len(a) for k, a in targets.items()})
    if len(set(lengths.values())) != 1:
        raise _E("numpy_input_fn: length of tensors in x and y is mismatched. All elements in x and y must have "
                 f"the same length (the number of examples); lengths: {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise _E("numpy_input_fn: x has no examples (length 0)")
    batch_size = int(batch_size)

    def input_fn():
        g = get_default_graph()
        with g.name_scope("numpy_input_fn"):
            # Row indices, one epoch at a time; the producer ends the input after num_epochs.
            indices = input_lib.range_input_producer(n, num_epochs=num_epochs, shuffle=shuffle,
                                                     capacity=max(queue_capacity, batch_size), name="indices")
            if num_epochs is None:
                rows = indices.dequeue_many(batch_size)
            else:
                rows = indices.dequeue_up_to(batch_size)
            named = {}
            for prefix, arrays in (("x", features), ("y", targets or {})):
                for k, arr in arrays.items():
                    named[(prefix, k)] = array_ops.gather(array_ops.constant(arr), rows)
            keys = list(named)
            flat = [named[k] for k in keys]
            batched = input_lib.batch(flat, batch_size, num_threads=num_threads, capacity=queue_capacity,
                                      enqueue_many=True, allow_smaller_final_batch=num_epochs is not None)
            if not isinstance(batched, list):
                batched = [batched]
            out = dict(zip(keys, batched))

        def pick(prefix, arrays):
            if None in arrays:
                return out[(prefix, None)]
            return {k: out[(prefix, k)] for k in arrays}
        feats = pick("x", features)
        if targets is None:
            return feats
        return feats, pick("y", targets)

    return input_fn
