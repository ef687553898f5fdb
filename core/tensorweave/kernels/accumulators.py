"""Kernels of the gradient accumulator ops (``ops/accumulator_ops.py``) over the resource in
``runtime/accumulators.py``: host logic, registered by the core for the CPU device of every
task (the accumulator lives in the resources of the task that runs its op)."""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors
from tensorweave.runtime import queues
from tensorweave.runtime.accumulators import GradientAccumulator


def _accumulator_factory(ctx):
    a = ctx.attrs
    container, name = a["container"], a["shared_name"] or ctx.op.name
    handle = queues.make_handle(container, name)
    resources = ctx.resources
    declared = GradientAccumulator(name, a["dtype"], a["shape"], a.get("reduction_type", "MEAN"))

    def accumulator_op():
        acc = resources.manager_for(container).lookup_or_create(container, name, lambda: declared)
        if not isinstance(acc, GradientAccumulator):
            raise ctx.error(errors.InvalidArgumentError, f"resource {name!r} in container {container!r} is not "
                            "an accumulator")
        if acc is not declared and not acc.same_spec(declared):
            raise ctx.error(errors.InvalidArgumentError,
                            f"shared accumulator {name!r} already exists with dtype {acc.dtype.name}, shape "
                            f"{acc.shape}, reduction {acc.reduction_type}; this node declares a different one")
        return handle
    return accumulator_op


def _lookup(ctx):
    resources = ctx.resources

    def find(handle) -> GradientAccumulator:
        container, name = queues.parse_handle(handle)
        try:
            acc = resources.manager_for(container).lookup(container, name)
        except errors.NotFoundError:
            raise ctx.error(errors.NotFoundError, f"accumulator {name!r} not found in container {container!r}: "
                            "its ConditionalAccumulator op has not run on this task") from None
        if not isinstance(acc, GradientAccumulator):
            raise ctx.error(errors.InvalidArgumentError, f"resource {name!r} is not an accumulator")
        return acc
    return find


def _apply_factory(ctx):
    find = _lookup(ctx)

    def apply_gradient(step, done, handle, local_step, grad):
        try:
            acc = find(handle)
        except errors.OpError as e:
            done(None, e)
            return
        try:
            acc.apply(int(local_step), grad)
        except errors.OpError as e:
            done(None, ctx.error(type(e), e.message))
            return
        done(None)
    return apply_gradient


def _take_factory(ctx):
    find = _lookup(ctx)

    def take_gradient(step, done, handle, num_required):
        try:
            acc = find(handle)
        except errors.OpError as e:
            done(None, e)
            return
        acc.take_async(step, int(num_required), done)
    return take_gradient


def _set_step_factory(ctx):
    find = _lookup(ctx)

    def set_global_step(step, done, handle, new_step):
        try:
            find(handle).set_global_step(int(new_step))
        except errors.OpError as e:
            done(None, e)
            return
        done(None)
    return set_global_step


def _cancel_factory(ctx):
    find = _lookup(ctx)

    def cancel_pending_takes(step, done, handle):
        try:
            find(handle).cancel_takes()
        except errors.OpError as e:
            done(None, e)
            return
        done(None)
    return cancel_pending_takes


def _num_factory(ctx):
    find = _lookup(ctx)

    def num_accumulated(step, done, handle):
        try:
            n = find(handle).num_accumulated()
        except errors.OpError as e:
            done(None, e)
            return
        done(np.array(n, dtype=np.int32))
    return num_accumulated


def register_kernels(reg):
    reg.register("ConditionalAccumulator", "CPU", factory=_accumulator_factory)
    reg.register("AccumulatorApplyGradient", "CPU", factory=_apply_factory, is_async=True)
    reg.register("AccumulatorTakeGradient", "CPU", factory=_take_factory, is_async=True)
    reg.register("AccumulatorSetGlobalStep", "CPU", factory=_set_step_factory, is_async=True)
    reg.register("AccumulatorNumAccumulated", "CPU", factory=_num_factory, is_async=True)
    reg.register("AccumulatorCancelPendingTakes", "CPU", factory=_cancel_factory, is_async=True)
