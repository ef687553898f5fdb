"""Queue ops (whitepaper 4.6) and their TF1 Python API: ``tw.FIFOQueue``,
``tw.RandomShuffleQueue``, ``tw.QueueBase``; also ``CountUpTo`` (epoch limits of the input
producers in ``train/input.py``).

A queue op outputs a handle, a scalar *string* ``b"<container>:<name>"`` (plain data: a
graph with queues can be serialised and shipped; see ``runtime/queues.py``, which owns the
data structure and how kernels resolve a handle). Enqueue and dequeue kernels are async:
a blocked one parks a continuation in the queue and holds no thread.

Static shapes: dequeue outputs take the queue's ``shapes`` (found by following the handle
back to its queue op); enqueues are checked against them when the graph is built, so a
mismatch is an ``InvalidArgumentError`` naming the queue and the component before anything
runs (fed values are checked again at run time by the queue).
"""

from __future__ import annotations

import functools

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor, apply_op, constant_value, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import shape_fns
from tensorweave.ops.random_ops import get_seed

__all__ = ["QueueBase", "FIFOQueue", "RandomShuffleQueue", "count_up_to"]

QUEUE_OPS = ("FIFOQueueV2", "RandomShuffleQueueV2")
_QUEUE_ATTRS = ["component_types: list(type) >= 1", "shapes: list(shape) >= 0 = []", "capacity: int = -1",
                "container: string = ''", "shared_name: string = ''"]


def _on_queue(method):
    """Build the op on the queue's device (TF1's ``colocate_with(queue_ref)``): the queue's
    elements live in one process, so every op that uses it must run there, whatever device
    scope the caller is in."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._queue_ref.graph.colocate_with(self._queue_ref.op):
            return method(self, *args, **kwargs)
    return wrapper


def _queue_op_of(handle: Tensor):
    """The queue op a handle tensor comes from (through Identity), or None."""
    op = handle.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op if op.type in QUEUE_OPS else None


def _queue_shapes(handle: Tensor, n: int) -> tuple[str, list[TensorShape] | None]:
    q = _queue_op_of(handle)
    if q is None:
        return f"queue '{handle.op.name}'", None
    shapes = [as_shape(s) for s in q.get_attr("shapes")]
    return f"{q.type[:-2]} '{q.name}'", (shapes if len(shapes) == n else None)


def _check_enqueue(op, many: bool):
    comps = op.inputs[1:]
    what, shapes = _queue_shapes(op.inputs[0], len(comps))
    q = _queue_op_of(op.inputs[0])
    if q is not None:
        types = list(q.get_attr("component_types"))
        if len(types) != len(comps):
            raise errors.InvalidArgumentError(
                f"{what} has {len(types)} components, the enqueue gives {len(comps)}")
        for i, (t, dt) in enumerate(zip(comps, types)):
            if t.dtype is not dtypes_mod.as_dtype(dt):
                raise errors.InvalidArgumentError(
                    f"{what}: component {i} has dtype {t.dtype.name} ('{t.name}'), but the queue expects "
                    f"{dtypes_mod.as_dtype(dt).name}")
    batch = None
    for i, t in enumerate(comps):
        s = t.shape
        if many:
            if s.ndims == 0:
                raise errors.InvalidArgumentError(
                    f"{what}: enqueue_many needs a batch (rank >= 1) for component {i}, got the scalar '{t.name}'")
            if s.ndims is not None:
                b = s.dims[0]
                if b is not None and batch is not None and b != batch:
                    raise errors.InvalidArgumentError(
                        f"{what}: enqueue_many components have different batch sizes ({batch} and {b} "
                        f"in component {i}, '{t.name}')")
                batch = b if b is not None else batch
                s = TensorShape(s.dims[1:])
        if shapes is not None and s.ndims is not None and not shapes[i].is_compatible_with(s):
            raise errors.InvalidArgumentError(
                f"{what}: component {i} ('{t.name}') has shape {s}{' per element' if many else ''}, but "
                f"the queue expects {shapes[i]}")
    return []


def _dequeue_shape(op):
    _, shapes = _queue_shapes(op.inputs[0], len(op.outputs))
    return shapes if shapes is not None else shape_fns.unknown(op)


def _dequeue_many_shape(op, up_to=False):
    _, shapes = _queue_shapes(op.inputs[0], len(op.outputs))
    n = None
    if not up_to:
        v = constant_value(op.inputs[1])
        n = int(v) if v is not None and v.ndim == 0 else None
    if shapes is None:
        return shape_fns.unknown(op)
    return [TensorShape([n] + s.as_list()) if s.ndims is not None else TensorShape(None) for s in shapes]


def register_ops(reg):
    reg.op("FIFOQueueV2", outputs=["handle: string"], attrs=list(_QUEUE_ATTRS), shape_fn=shape_fns.scalar,
           stateful=True, doc="A queue that hands out elements first-in first-out; outputs its handle.")
    reg.op("RandomShuffleQueueV2", outputs=["handle: string"],
           attrs=_QUEUE_ATTRS + ["min_after_dequeue: int = 0", "seed: int = 0", "seed2: int = 0"],
           shape_fn=shape_fns.scalar, stateful=True,
           doc="A queue that hands out a random element, keeping at least min_after_dequeue until closed.")
    reg.op("QueueEnqueueV2", inputs=["handle: string", "components: Tcomponents"],
           attrs=["Tcomponents: list(type) >= 1", "timeout_ms: int = -1"],
           shape_fn=lambda op: _check_enqueue(op, False), stateful=True,
           doc="Adds one element; waits (without a thread) while the queue is full.")
    reg.op("QueueEnqueueManyV2", inputs=["handle: string", "components: Tcomponents"],
           attrs=["Tcomponents: list(type) >= 1", "timeout_ms: int = -1"],
           shape_fn=lambda op: _check_enqueue(op, True), stateful=True,
           doc="Adds the elements of a batch (split along dimension 0).")
    reg.op("QueueDequeueV2", inputs=["handle: string"], outputs=["components: component_types"],
           attrs=["component_types: list(type) >= 1", "timeout_ms: int = -1"],
           shape_fn=_dequeue_shape, stateful=True, doc="Takes one element; OutOfRangeError once closed and empty.")
    reg.op("QueueDequeueManyV2", inputs=["handle: string", "n: int32"], outputs=["components: component_types"],
           attrs=["component_types: list(type) >= 1", "timeout_ms: int = -1"],
           shape_fn=_dequeue_many_shape, stateful=True, doc="Takes n elements, stacked along a new dimension 0.")
    reg.op("QueueDequeueUpToV2", inputs=["handle: string", "n: int32"], outputs=["components: component_types"],
           attrs=["component_types: list(type) >= 1", "timeout_ms: int = -1"],
           shape_fn=lambda op: _dequeue_many_shape(op, True), stateful=True,
           doc="Like QueueDequeueManyV2, but once closed returns fewer (at least one) if that is all there is.")
    reg.op("QueueCloseV2", inputs=["handle: string"], attrs=["cancel_pending_enqueues: bool = false"],
           stateful=True, doc="Closes the queue: no more enqueues; waiting dequeues that cannot be served fail.")
    reg.op("QueueSizeV2", inputs=["handle: string"], outputs=["size: int32"], shape_fn=shape_fns.scalar,
           stateful=True, doc="The number of elements in the queue.")
    reg.op("QueueIsClosedV2", inputs=["handle: string"], outputs=["is_closed: bool"], shape_fn=shape_fns.scalar,
           stateful=True, doc="Whether the queue is closed.")
    reg.op("CountUpTo", inputs=["ref: Ref(T)"], outputs=["output: T"], attrs=["limit: int", "T: {int32, int64}"],
           shape_fn=lambda op: [op.inputs[0].shape], stateful=True,
           doc="Increments a variable until it reaches limit (then OutOfRangeError); outputs the value before.")


# ---------------------------------------------------------------------------------------
def count_up_to(ref, limit, name=None):
    """Increment the int variable ``ref`` and return its value before; OutOfRangeError once
    it has reached ``limit`` (``tf.count_up_to``)."""
    return apply_op("CountUpTo", [ref], {"limit": int(limit)}, name=name)


def _as_shapes(shapes, n, what):
    if shapes is None:
        return []
    shapes = [as_shape(s) for s in shapes]
    if len(shapes) != n:
        raise errors.InvalidArgumentError(f"{what}: {len(shapes)} shapes for {n} dtypes")
    return shapes


def _as_dtypes(dtypes, what):
    if not isinstance(dtypes, list | tuple):
        dtypes = [dtypes]
    if not dtypes:
        raise errors.InvalidArgumentError(f"{what}: dtypes must not be empty")
    return [dtypes_mod.as_dtype(d) for d in dtypes]


class QueueBase:
    """A queue in the graph: its handle tensor and the ops that use it (``tf.QueueBase``).

    Values are a list with one tensor per component (a single tensor when the queue has one
    component), or a dict keyed by ``names`` when the queue was created with names.
    """

    def __init__(self, dtypes, shapes, names, queue_ref):
        self._dtypes = list(dtypes)
        self._shapes = list(shapes) if shapes else [TensorShape(None)] * len(self._dtypes)
        if names is not None:
            names = list(names)
            if len(names) != len(self._dtypes):
                raise errors.InvalidArgumentError(f"queue: {len(names)} names for {len(self._dtypes)} dtypes")
        self._names = names
        self._queue_ref = queue_ref
        self._name = queue_ref.op.name.split("/")[-1]

    queue_ref = property(lambda self: self._queue_ref)
    name = property(lambda self: self._queue_ref.op.name)
    dtypes = property(lambda self: list(self._dtypes))
    shapes = property(lambda self: list(self._shapes))
    names = property(lambda self: self._names)

    def _describe(self):
        return f"queue '{self.name}'"

    def _flatten(self, vals, what):
        if isinstance(vals, dict):
            if self._names is None:
                raise errors.InvalidArgumentError(f"{self._describe()}: {what} of a dict needs a queue created with names")
            missing = set(self._names) - set(vals)
            extra = set(vals) - set(self._names)
            if missing or extra:
                raise errors.InvalidArgumentError(
                    f"{self._describe()}: {what} keys {sorted(vals)} do not match the queue's names "
                    f"{self._names}")
            vals = [vals[k] for k in self._names]
        elif self._names is not None:
            raise errors.InvalidArgumentError(f"{self._describe()}: {what} needs a dict keyed by {self._names}")
        elif not isinstance(vals, list | tuple):
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise errors.InvalidArgumentError(
                f"{self._describe()} has {len(self._dtypes)} components, {what} gives {len(vals)}")
        out = []
        for i, (v, dt) in enumerate(zip(vals, self._dtypes)):
            if isinstance(v, Tensor) or hasattr(v, "_as_graph_element"):
                t = convert_to_tensor(v)
                if t.dtype is not dt:
                    raise errors.InvalidArgumentError(
                        f"{self._describe()}: component {i} of {what} has dtype {t.dtype.name} ('{t.name}'), "
                        f"but the queue expects {dt.name}")
            else:
                try:
                    t = convert_to_tensor(v, dtype=dt, name=f"component_{i}")
                except errors.InvalidArgumentError as e:
                    raise errors.InvalidArgumentError(
                        f"{self._describe()}: component {i} of {what}: {e.message}") from None
            out.append(t)
        return out

    def _pack(self, tensors):
        tensors = list(tensors) if isinstance(tensors, list | tuple) else [tensors]
        if self._names is not None:
            return dict(zip(self._names, tensors))
        return tensors[0] if len(tensors) == 1 else tensors

    @_on_queue
    def enqueue(self, vals, name=None):
        """An op that adds one element (waits while the queue is full)."""
        g = get_default_graph()
        with g.name_scope(name or f"{self._name}_enqueue") as scope:
            comps = self._flatten(vals, "enqueue")
            return apply_op("QueueEnqueueV2", [self._queue_ref, comps], _exact_name=scope.rstrip("/"))

    @_on_queue
    def enqueue_many(self, vals, name=None):
        """An op that adds every element of a batch (dimension 0 of each component)."""
        g = get_default_graph()
        with g.name_scope(name or f"{self._name}_EnqueueMany") as scope:
            comps = self._flatten(vals, "enqueue_many")
            return apply_op("QueueEnqueueManyV2", [self._queue_ref, comps], _exact_name=scope.rstrip("/"))

    @_on_queue
    def dequeue(self, name=None):
        """One element; OutOfRangeError once the queue is closed and empty."""
        outs = apply_op("QueueDequeueV2", [self._queue_ref], {"component_types": self._dtypes},
                        name=name or f"{self._name}_Dequeue")
        return self._pack(outs)

    @_on_queue
    def dequeue_many(self, n, name=None):
        """``n`` elements stacked along a new dimension 0 (needs fully defined shapes)."""
        outs = apply_op("QueueDequeueManyV2", [self._queue_ref, convert_to_tensor(n, dtype=dtypes_mod.int32)],
                        {"component_types": self._dtypes}, name=name or f"{self._name}_DequeueMany")
        return self._pack(outs)

    @_on_queue
    def dequeue_up_to(self, n, name=None):
        """Like ``dequeue_many``; once closed, returns fewer elements if that is all there is."""
        outs = apply_op("QueueDequeueUpToV2", [self._queue_ref, convert_to_tensor(n, dtype=dtypes_mod.int32)],
                        {"component_types": self._dtypes}, name=name or f"{self._name}_DequeueUpTo")
        return self._pack(outs)

    @_on_queue
    def close(self, cancel_pending_enqueues=False, name=None):
        """An op that closes the queue (see ``runtime/queues.py`` for what waits fail)."""
        return apply_op("QueueCloseV2", [self._queue_ref], {"cancel_pending_enqueues": bool(cancel_pending_enqueues)},
                        name=name or f"{self._name}_Close")

    @_on_queue
    def is_closed(self, name=None):
        return apply_op("QueueIsClosedV2", [self._queue_ref], name=name or f"{self._name}_IsClosed")

    @_on_queue
    def size(self, name=None):
        """The number of elements, an int32 scalar."""
        return apply_op("QueueSizeV2", [self._queue_ref], name=name or f"{self._name}_Size")


class FIFOQueue(QueueBase):
    """A first-in first-out queue (``tf.FIFOQueue``)."""

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None, name="fifo_queue"):
        dts = _as_dtypes(dtypes, "FIFOQueue")
        shp = _as_shapes(shapes, len(dts), "FIFOQueue")
        g = get_default_graph()
        ref = apply_op("FIFOQueueV2", [], {"component_types": dts, "shapes": shp, "capacity": int(capacity),
                                           "container": g._current_container(), "shared_name": shared_name or ""},
                       name=name)
        super().__init__(dts, shp, names, ref)


class RandomShuffleQueue(QueueBase):
    """A queue that dequeues a random element (``tf.RandomShuffleQueue``); dequeues wait
    while it holds ``min_after_dequeue`` elements or fewer, until it is closed."""

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, names=None, seed=None,
                 shared_name=None, name="random_shuffle_queue"):

        dts = _as_dtypes(dtypes, "RandomShuffleQueue")
        shp = _as_shapes(shapes, len(dts), "RandomShuffleQueue")
        if min_after_dequeue >= capacity:
            raise errors.InvalidArgumentError(
                f"RandomShuffleQueue '{name}': min_after_dequeue ({min_after_dequeue}) must be less than "
                f"capacity ({capacity})")
        s1, s2 = get_seed(seed)
        g = get_default_graph()
        ref = apply_op("RandomShuffleQueueV2", [], {
            "component_types": dts, "shapes": shp, "capacity": int(capacity),
            "min_after_dequeue": int(min_after_dequeue), "seed": s1 or 0, "seed2": s2 or 0,
            "container": g._current_container(), "shared_name": shared_name or ""}, name=name)
        super().__init__(dts, shp, names, ref)
