"""Mutex kernels (MutexV2, MutexLock, ConsumeMutexLock): host logic on the CPU device of every
task, forwarding to ``tensorweave.runtime.mutex``. MutexLock is async: a step waiting for the
mutex holds no thread."""

from __future__ import annotations

from tensorweave.runtime import mutex

CPU = "CPU"


def _mutex(ctx):
    container = ctx.attrs["container"]
    name = ctx.attrs["shared_name"] or ctx.op.name
    handle = mutex.make_handle(container, name)
    resources = ctx.resources

    def mutex_op():
        mutex.lookup_or_create(resources, container, name)
        return handle
    return mutex_op


def _lock(ctx):
    resources = ctx.resources

    def lock(step, done, handle):
        try:
            m = mutex.lookup(resources, handle)
        except Exception as e:  # noqa: BLE001 - reported as this node's failure
            done(None, e)
            return
        m.lock_async(step, done)
    return lock


def _consume(ctx):
    resources = ctx.resources

    def consume(step, done, lock, handle):
        try:
            mutex.lookup(resources, handle).release_step(step)
        except Exception as e:  # noqa: BLE001
            done(None, e)
            return
        done(None)
    return consume


def register_kernels(reg):
    reg.register("MutexV2", CPU, factory=_mutex)
    reg.register("MutexLock", CPU, factory=_lock, is_async=True)
    reg.register("ConsumeMutexLock", CPU, factory=_consume, is_async=True)
