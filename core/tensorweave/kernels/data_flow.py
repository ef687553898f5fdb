"""Queue kernels (FIFOQueueV2, RandomShuffleQueueV2, enqueue/dequeue/close/size) and CountUpTo:
host logic, registered by the core for the CPU device of every task.

The queue itself is in ``tensorweave.runtime.queues``; these kernels create it in the
session's resources and forward to it. Enqueue and dequeue are async kernels: a blocked
one leaves its ``done`` continuation parked in the queue and holds no thread.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime import queues

CPU = "CPU"


def _queue_factory(make):
    def factory(ctx):
        container = ctx.attrs["container"]
        name = ctx.attrs["shared_name"] or ctx.op.name
        handle = queues.make_handle(container, name)
        resources = ctx.resources
        declared = make(ctx, name)  # built here so a bad spec fails when the plan is built

        def queue_op():
            q = queues.lookup_or_create(resources, container, name, lambda: declared)
            if q is not declared and not q.same_spec(declared):
                raise ctx.error(errors.InvalidArgumentError,
                                f"shared queue {name!r} in container {container!r} already exists as "
                                f"{q.kind} with types {[d.name for d in q.dtypes]}, shapes "
                                f"{[str(s) for s in q.shapes]}, capacity {q.capacity}; this node declares a "
                                "different queue")
            return handle
        return queue_op
    return factory


def _fifo(ctx, name):
    return queues.FIFOQueue(name, ctx.attrs["component_types"], ctx.attrs["shapes"], ctx.attrs["capacity"])


def _shuffle(ctx, name):
    a = ctx.attrs
    return queues.RandomShuffleQueue(name, a["component_types"], a["shapes"], a["capacity"],
                                     a["min_after_dequeue"], a["seed"], a["seed2"])


def _lookup_then(ctx, body):
    """An async kernel that resolves the handle (input 0), then calls body(q, step, done, *rest)."""
    resources = ctx.resources
    cache = {}

    def compute(step, done, handle, *rest):
        try:
            key = handle.item() if isinstance(handle, np.ndarray) else handle
            q = cache.get(key)
            if q is None:
                q = cache[key] = queues.lookup(resources, handle)
        except Exception as e:  # noqa: BLE001 - reported as this node's failure
            done(None, e)
            return
        body(q, step, done, *rest)
    return compute


def _enqueue(many):
    def factory(ctx):
        def body(q, step, done, *components):
            q.enqueue_async(step, components, done, many=many)
        return _lookup_then(ctx, body)
    return factory


def _dequeue(ctx):
    return _lookup_then(ctx, lambda q, step, done: q.dequeue_async(step, done))


def _dequeue_many(up_to):
    def factory(ctx):
        def body(q, step, done, n):
            q.dequeue_many_async(step, int(n), done, allow_smaller=up_to)
        return _lookup_then(ctx, body)
    return factory


def _sync(fn):
    """A queue op that never waits, written as an async kernel for the handle lookup."""
    def factory(ctx):
        def body(q, step, done, *args):
            try:
                out = fn(ctx, q, *args)
            except Exception as e:  # noqa: BLE001
                done(None, e)
                return
            done(out)
        return _lookup_then(ctx, body)
    return factory


def _close(ctx, q):
    q.close(ctx.attrs["cancel_pending_enqueues"])


def _count_up_to(ctx):
    store = ctx.ref_input(0)
    limit = ctx.attrs["limit"]

    def count_up_to():
        with store.lock:
            cur = store.read()
            if cur >= limit:
                raise ctx.error(errors.OutOfRangeError, f"reached limit of {limit} (variable {store.name})")
            store.value = np.asarray(cur + 1, dtype=cur.dtype)
        return cur
    return count_up_to


def register_kernels(reg):
    reg.register("FIFOQueueV2", CPU, factory=_queue_factory(_fifo))
    reg.register("RandomShuffleQueueV2", CPU, factory=_queue_factory(_shuffle))
    reg.register("QueueEnqueueV2", CPU, factory=_enqueue(False), is_async=True)
    reg.register("QueueEnqueueManyV2", CPU, factory=_enqueue(True), is_async=True)
    reg.register("QueueDequeueV2", CPU, factory=_dequeue, is_async=True)
    reg.register("QueueDequeueManyV2", CPU, factory=_dequeue_many(False), is_async=True)
    reg.register("QueueDequeueUpToV2", CPU, factory=_dequeue_many(True), is_async=True)
    reg.register("QueueCloseV2", CPU, factory=_sync(_close), is_async=True)
    reg.register("QueueSizeV2", CPU, factory=_sync(lambda ctx, q: np.array(q.size(), dtype=np.int32)), is_async=True)
    reg.register("QueueIsClosedV2", CPU, factory=_sync(lambda ctx, q: np.array(q.closed)), is_async=True)
    reg.register("CountUpTo", CPU, factory=_count_up_to)
