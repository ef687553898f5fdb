"""Kernels of the collective ops (``ops/collective_ops.py``): each hands its execution to the
collective executor of its step (``runtime/collectives.executor_for``: a worker's, whose
members may be on other tasks, else this process's) and finishes when the group's result is
in. Host logic on the CPU device of every task; asynchronous, so a member waiting for the
others holds no executor thread."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.tensor_shape import as_shape
from tensorweave.runtime import collectives


def _instance(ctx, op: str) -> collectives.Instance:
    a = ctx.attrs
    shape, dtype = None, None
    if op in (collectives.BCAST_SEND, collectives.BCAST_RECV):
        s = as_shape(a["shape"])
        shape = tuple(s.as_list()) if s.is_fully_defined() else None
    if op == collectives.BCAST_RECV:
        dtype = np.dtype(dtypes.as_dtype(a["T"]).as_numpy_dtype)
    try:
        return collectives.Instance(op, a["group_size"], a["group_key"], a["instance_key"],
                                    a.get("merge_op", "Add"), a.get("final_op", "Id"), shape, dtype,
                                    float(a.get("timeout_seconds", 0.0)))
    except errors.OpError as e:  # an attr the op definition lets through but the executor refuses
        raise ctx.error(type(e), e.message) from None


def _factory(op: str):
    def factory(ctx):
        inst = _instance(ctx, op)
        device = ctx.device.name

        if op == collectives.BCAST_RECV:
            def collective(step, done):
                collectives.executor_for(step).start(step, inst, device, None, done)
        else:
            def collective(step, done, x):
                collectives.executor_for(step).start(step, inst, device, np.asarray(x), done)
        return collective
    return factory


def register_kernels(reg):
    for op in collectives.OPS:
        reg.register(op, "CPU", factory=_factory(op), is_async=True)
