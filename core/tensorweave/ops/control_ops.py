"""NoOp, ``tw.group`` and ``tw.tuple``: grouping side effects with control dependencies."""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import Operation, Tensor, apply_op, get_default_graph


def register_ops(reg):
    reg.op("NoOp", doc="Does nothing; used as a target that depends on other ops.")


def no_op(name=None):
    return apply_op("NoOp", [], name=name)


def _as_op(x):
    if hasattr(x, "_as_graph_element") and not isinstance(x, Tensor | Operation):
        x = x._as_graph_element()
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    raise errors.InvalidArgumentError(f"tw.group expects Operations or Tensors, got {x!r}")


def group(*inputs, name=None):
    """An op that runs when all ``inputs`` have run (``tf.group``)."""
    flat = []
    for x in inputs:
        if isinstance(x, list | tuple):
            flat.extend(x)
        else:
            flat.append(x)
    ops = [_as_op(x) for x in flat]
    graph = ops[0].graph if ops else get_default_graph()
    with graph.as_default(), graph.control_dependencies(ops):
        return no_op(name=name or "group_deps")


def tuple_(tensors, name=None, control_inputs=None):
    """Tensors that are available only after all of ``tensors`` (and ``control_inputs``) are."""
    from tensorweave.ops.array_ops import identity

    gate = group(*[t for t in tensors if t is not None], *(control_inputs or []), name=name or "tuple")
    with gate.graph.control_dependencies([gate]):
        return [identity(t) if t is not None else None for t in tensors]
