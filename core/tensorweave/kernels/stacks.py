"""Stack kernels (StackV2, StackPushV2, StackPopV2, StackCloseV2) for loop gradients: host
logic, registered by the core for the CPU device.

A stack lives for one step: its elements are kept in ``StepContext.step_resources`` (a dict
the executor clears when the step ends) under the stack's handle, a plain string that names
the node and a per-kernel counter (never a Python object in a tensor). The forward loop of a
gradient pushes one value per iteration; the backward loop pops them in reverse order.
Pushes and pops of concurrent iterations are ordered by control edges in the graph
(ops/control_flow_grad.py), so the kernels only need each list operation to be atomic.
"""

from __future__ import annotations

import itertools

import numpy as np

from tensorweave.framework import errors
from tensorweave.kernels import handle_key, step_resources

CPU = "CPU"


def _lookup(ctx, step, handle):
    key = handle_key(handle)
    stack = step_resources(ctx, step).get(key)
    if stack is None:
        made_by = key[len("stack:"):].rpartition(":")[0] if key.startswith("stack:") else None
        where = f"its StackV2 '{made_by}'" if made_by else "its StackV2"
        raise ctx.error(errors.NotFoundError, f"stack {key!r} does not exist in this step in this task: it was "
                                              f"closed, made by another step, or made by {where} in another task "
                                              "(a stack lives in the process of its StackV2; its pushes and pops "
                                              "must run there)")
    return key, stack


def _stack(ctx):
    counter = itertools.count()
    name = ctx.attrs.get("stack_name") or ctx.node_name

    def stack(step, max_size):
        key = f"stack:{name}:{next(counter)}"
        step_resources(ctx, step)[key] = []
        return np.array(key.encode(), dtype=object)
    return stack


def _cached_lookup(ctx):
    """``_lookup`` for one push/pop kernel: a loop hands it the same handle array in every
    iteration, so the handle's key is remembered (one tuple, replaced atomically, so
    concurrent steps with other handles never see a mixed pair)."""
    last = [(None, None)]

    def lookup(step, handle):
        h, key = last[0]
        if h is not handle:
            key = handle_key(handle)
            last[0] = (handle, key)
        res = getattr(step, "step_resources", None)
        stack = res.get(key) if res is not None else None
        return (key, stack) if stack is not None else _lookup(ctx, step, handle)
    return lookup


def _push(ctx):
    lookup = _cached_lookup(ctx)

    def push(step, handle, elem):
        lookup(step, handle)[1].append(elem)
        return elem
    return push


def _pop(ctx):
    lookup = _cached_lookup(ctx)

    def pop(step, handle):
        key, stack = lookup(step, handle)
        try:
            return stack.pop()
        except IndexError:
            raise ctx.error(errors.OutOfRangeError, f"pop from empty stack {key!r}") from None
    return pop


def _close(ctx):
    def close(step, handle):
        step_resources(ctx, step).pop(handle_key(handle), None)
    return close


def register_kernels(reg):
    for op, factory in (("StackV2", _stack), ("StackPushV2", _push), ("StackPopV2", _pop), ("StackCloseV2", _close)):
        reg.register(op, CPU, factory=factory, takes_context=True)
