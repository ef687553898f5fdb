"""Mutex ops and ``tw.CriticalSection`` (TF 1.x): run a function's ops so that executions of
the same critical section, from any number of concurrent steps, never overlap.

``CriticalSection.execute(fn)`` builds: ``MutexLock`` on the section's mutex (async: a step
that waits holds no thread), ``fn``'s ops with a control dependency on the lock, then
``ConsumeMutexLock`` after every op ``fn`` created, and returns ``fn``'s outputs through
identities that run after the release — so what the caller fetches was computed inside the
lock. The mutex is a host resource on the CPU of the task (runtime/mutex.py says how a hold
ends when a step fails). Executing a section inside its own ``fn`` is refused when the graph
is built, as in TF.
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import Operation, Tensor, apply_op, get_default_graph
from tensorweave.ops import shape_fns

__all__ = ["CriticalSection"]


def register_ops(reg):
    reg.op("MutexV2", outputs=["resource: string"], attrs=["container: string = ''", "shared_name: string = ''"],
           shape_fn=shape_fns.scalar, stateful=True, doc="A mutex resource; outputs its handle.")
    reg.op("MutexLock", inputs=["mutex: string"], outputs=["mutex_lock: string"], shape_fn=shape_fns.scalar,
           stateful=True, doc="Waits (without a thread) until this step holds the mutex; outputs a lock token.")
    reg.op("ConsumeMutexLock", inputs=["mutex_lock: string", "mutex: string"], stateful=True,
           doc="Ends this step's hold of the mutex (the end of a critical section).")


def _flatten(x, out):
    if isinstance(x, list | tuple):
        for v in x:
            _flatten(v, out)
    elif isinstance(x, dict):
        for k in sorted(x):
            _flatten(x[k], out)
    elif x is not None:
        out.append(x)
    return out


def _rebuild(x, it):
    if isinstance(x, list | tuple):
        vals = [_rebuild(v, it) for v in x]
        return type(x)(*vals) if hasattr(x, "_fields") else type(x)(vals)
    if isinstance(x, dict):
        return type(x)((k, _rebuild(x[k], it)) for k in sorted(x))
    return None if x is None else next(it)


class CriticalSection:
    """``tw.CriticalSection(name=None, shared_name=None)``: ``execute(fn)`` runs ``fn``'s ops
    exclusively among all executions of this section (``shared_name``: sessions sharing the
    container share the section)."""

    def __init__(self, name=None, shared_name=None, critical_section_def=None, import_scope=None):
        if critical_section_def is not None:
            raise errors.UnimplementedError("CriticalSection(critical_section_def=...) is not supported")
        g = get_default_graph()
        with g.name_scope(name or "CriticalSection"):
            self._handle = apply_op("MutexV2", [], {"shared_name": shared_name or ""}, name="mutex")
        self.name = self._handle.op.name.rsplit("/", 1)[0]
        self._graph = g
        self._executing = 0

    def execute(self, fn, exclusive_resource_access=True, name=None):
        """Run ``fn()`` (no arguments) inside the section; returns its outputs (tensors, or ops,
        in the same nested structure), each available once the section has been left.
        ``exclusive_resource_access`` is accepted for TF compatibility; we do not check which
        resources other sections use."""
        del exclusive_resource_access
        g = get_default_graph()
        if g is not self._graph:
            raise errors.InvalidArgumentError(f"CriticalSection {self.name!r} belongs to another graph")
        if self._executing:
            raise errors.InvalidArgumentError(
                f"attempting to execute CriticalSection {self.name!r} inside its own fn: the step would "
                "wait for itself forever")
        with g.name_scope(name or "critical_section_execute"):
            lock = apply_op("MutexLock", [self._handle], name="lock")
            before = len(g.get_operations())
            self._executing += 1
            try:
                with g.control_dependencies([lock]):
                    result = fn()
            finally:
                self._executing -= 1
            created = g.get_operations()[before:]
            flat = _flatten(result, [])
            for v in flat:
                if not isinstance(v, Tensor | Operation) and not hasattr(v, "op"):
                    raise errors.InvalidArgumentError(
                        f"CriticalSection.execute: fn must return tensors or ops (nested), got {type(v).__name__}")
            # Release after everything fn made (only the ops nothing else of fn's consumes are
            # needed as dependencies) and after the outputs it returned.
            consumed = {t.op for op in created for t in op.inputs} | {c for op in created for c in op.control_inputs}
            sinks = [op for op in created if op not in consumed]
            outs = [v.op if isinstance(v, Tensor) else getattr(v, "op", v) for v in flat]
            with g.control_dependencies([*sinks, *[o for o in outs if isinstance(o, Operation)]]):
                release = apply_op("ConsumeMutexLock", [lock, self._handle], name="release")
            wrapped = []
            with g.control_dependencies([release]):
                for v in flat:
                    if isinstance(v, Operation):
                        wrapped.append(apply_op("NoOp", [], name="done"))
                    else:
                        t = v.value() if hasattr(v, "value") and not isinstance(v, Tensor) else v
                        wrapped.append(apply_op("Identity", [t], name="out"))
        return _rebuild(result, iter(wrapped))
