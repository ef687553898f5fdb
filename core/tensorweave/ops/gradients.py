"""Automatic differentiation (whitepaper 4.1): ``tw.gradients`` and gradient registration.

``gradients(ys, xs)`` finds the ops on a path from ``xs`` to ``ys``, then walks them
backwards from ``ys``, calling each op's registered gradient function and adding the
resulting nodes to the graph (named ``gradients/<op>_grad/...``). Partial gradients of a
tensor consumed several times are summed (``AddN``); outputs of a multi-output op that
received no gradient get zeros; ``xs`` not connected to ``ys`` get ``None``.

Sparse gradients: a gradient function may return an ``IndexedSlices`` (Gather's does, for
its params). Several IndexedSlices for one tensor are aggregated by concatenating their
values and indices (repeated rows add up when the slices are applied or densified), so the
gradient of an embedding table read in several places stays as big as the rows read. They
become dense only where a dense consumer needs them: a partial sum that also has dense
parts is dense, and a gradient function that has not declared ``accepts_indexed_slices``
(Identity's has) receives dense gradients. ``tw.gradients`` returns an IndexedSlices for an
x read through gathers only. This module also registers the conversion of an IndexedSlices
to a dense tensor (``tw.convert_to_tensor``: an ``UnsortedSegmentSum``, with TensorFlow's
warnings for unknown or huge dense shapes).

Gradient functions are registered with the op definitions, by any plugin
(``registry.gradient("MyOp")(fn)`` in ``tensorweave_register_ops``), or at run time with
``@tw.RegisterGradient("MyOp")``.
"""

from __future__ import annotations

import collections
import contextlib

import numpy as np

from tensorweave import plugins
from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Operation,
    Tensor,
    constant_value,
    convert_to_tensor,
    register_tensor_conversion_function,
)
from tensorweave.framework.indexed_slices import IndexedSlices, densify_warning
from tensorweave.framework.op_def import NO_GRADIENT
from tensorweave.ops import array_ops, control_flow_grad, math_ops
from tensorweave.ops.control_flow_grad import _is_loop_exit, _is_loop_switch, _trainable

_DIFFERENTIABLE = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)


def _is_differentiable(t: Tensor) -> bool:
    return t.dtype in _DIFFERENTIABLE


def _as_list(x):
    return list(x) if isinstance(x, list | tuple) else [x]


def _as_x_tensor(x) -> Tensor:
    # A Variable is differentiated through its reference: every read of it is on the path.
    if hasattr(x, "_ref") and not isinstance(x, Tensor):
        return x._ref()
    if isinstance(x, Tensor):
        return x
    raise errors.InvalidArgumentError(f"gradients: xs must be Tensors or Variables, got {x!r}")


def _ops_between(from_ops: set, to_ops: list) -> set:
    """Ops reachable forward from ``from_ops`` that also reach some op in ``to_ops``.

    The forward walk follows differentiable outputs only (as TF's): no gradient flows
    through an int or bool tensor, and a loop's predicate must not look like a path (its
    LoopCond would otherwise wait for a gradient that never comes)."""
    consumers: dict[Operation, list] = {}
    graph = next(iter(to_ops)).graph
    for op in graph._nodes:
        for t in op._inputs:
            if _is_differentiable(t):
                consumers.setdefault(t.op, []).append(op)
    reached = set()
    stack = list(from_ops)
    while stack:
        op = stack.pop()
        if op in reached:
            continue
        reached.add(op)
        stack.extend(consumers.get(op, ()))
    between = set()
    stack = [op for op in to_ops if op in reached]
    while stack:
        op = stack.pop()
        if op in between:
            continue
        between.add(op)
        stack.extend(t.op for t in op._inputs if t.op in reached)
    return between


def gradients(ys, xs, grad_ys=None, name="gradients", colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None, stop_gradients=None):
    """Symbolic partial derivatives of ``sum(ys)`` with respect to each of ``xs``.

    Returns a list with one Tensor (or None, when unconnected) per element of ``xs``.
    ``grad_ys`` are the initial gradients of ``ys`` (default: ones). Tensors in
    ``stop_gradients`` are treated as constants.
    """
    ys = [convert_to_tensor(y) for y in _as_list(ys)]
    xs_list = [_as_x_tensor(x) for x in _as_list(xs)]
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    else:
        grad_ys = _as_list(grad_ys)
        if len(grad_ys) != len(ys):
            raise errors.InvalidArgumentError(
                f"gradients: {len(grad_ys)} grad_ys given for {len(ys)} ys; they must correspond")
    for y in ys:
        if not _is_differentiable(y):
            raise errors.InvalidArgumentError(
                f"gradients: cannot differentiate tensor '{y.name}' of dtype {y.dtype.name}; only "
                f"floating-point and complex tensors have gradients (cast it with tw.cast first)")
    graph = ys[0].graph
    stop_ops = {t.op for t in (_as_list(stop_gradients) if stop_gradients is not None else [])}

    with graph.as_default(), graph.name_scope(name):
        # Initial gradients.
        grads: dict[Tensor, list] = {}
        for i, (y, gy) in enumerate(zip(ys, grad_ys)):
            if gy is None:
                gy = array_ops.ones_like(y, name=f"grad_ys_{i}")
            else:
                gy = convert_to_tensor(gy, dtype=y.dtype, name=f"grad_ys_{i}")
                if not y.shape.is_compatible_with(gy.shape):
                    raise errors.InvalidArgumentError(
                        f"gradients: grad_ys[{i}] has shape {gy.shape} but ys[{i}] ('{y.name}') has "
                        f"shape {y.shape}; they must match")
            grads.setdefault(y, []).append(gy)

        between = _ops_between({x.op for x in xs_list}, [y.op for y in ys])
        loop_state = None
        if any(op.type == "Exit" for op in between):  # through tw.while_loop (control_flow_grad.py)

            loop_state = control_flow_grad.maybe_create_state(graph, between)
        # How many consumers in `between` each op still waits for before its gradient is complete.
        pending = {op: 0 for op in between}
        for op in between:
            for t in op._inputs:
                if t.op in between:
                    pending[t.op] += 1
        # An x's producer is not differentiated further unless another x feeds it.
        for x in xs_list:
            if not any(t.op in between for t in x.op._inputs):
                stop_ops.add(x.op)
        if loop_state is not None:
            _backprop_loops(ys, between, pending, stop_ops, grads, loop_state, math_ops)
        else:
            ready = [op for op in between if pending[op] == 0]
            while ready:
                op = ready.pop()
                if op not in stop_ops:
                    _backprop_op(op, grads, math_ops, between)
                for t in op._inputs:
                    if t.op in between:
                        pending[t.op] -= 1
                        if pending[t.op] == 0:
                            ready.append(t.op)

        result = []
        for x in xs_list:
            parts = grads.get(x)
            result.append(_aggregate(parts, math_ops) if parts else None)
    return result


def _backprop_loops(ys, between, pending, stop_ops, grads, loop_state, math_ops) -> None:
    """The backward walk when it goes through while loops (TF1's scheme): FIFO order; a
    loop's Switch is visited once from its Exit and once from the body; a loop's Exits
    are processed together, once all of them are ready."""
    queue = collections.deque()
    to_ops = set()
    for y in ys:
        if y.op in between and pending[y.op] == 0 and y.op not in to_ops:
            to_ops.add(y.op)
            queue.append(y.op)
    for y in loop_state.process_unused_loop_exits(pending, to_ops):
        if _trainable(y):
            grads.setdefault(y, []).append(loop_state.zeros_like_for_exit(y))
            queue.append(y.op)
    while queue:
        op = queue.popleft()
        if op not in stop_ops:
            _backprop_op(op, grads, math_ops, between, loop_state)
        for t in op._inputs:
            x = t.op
            if x not in between:
                continue
            pending[x] -= 1
            ready = pending[x] == 0 or (pending[x] > 0 and _is_loop_switch(x))
            if not ready:
                continue
            if _is_loop_exit(x):
                loop_state.exit_ready(x, grads, queue)
            else:
                queue.append(x)
    loop_state.post_processing()


def _backprop_op(op: Operation, grads: dict, math_ops, between: set, loop_state=None) -> None:
    out_grads = []
    has_grad = False
    with loop_state.grad_scope(op, before=True) if loop_state else contextlib.nullcontext():
        for t in op._outputs:
            parts = grads.get(t)
            if parts:
                has_grad = True
                agg = _aggregate(parts, math_ops)
                grads[t] = [agg]  # a loop Switch is visited twice: sum once
                out_grads.append(agg)
            else:
                out_grads.append(None)
    if not has_grad:
        return
    fn = op.op_def.gradient
    if fn is NO_GRADIENT or not any(_is_differentiable(t) for t in op._inputs):
        return
    if fn is None:
        raise errors.NotFoundError(
            f"no gradient is registered for op type {op.type} (node '{op.name}'), which lies between "
            f"the xs and ys of tw.gradients. Register one with @tw.RegisterGradient(\"{op.type}\") "
            f"(fn(op, *output_grads) -> one gradient per input), or in a plugin's "
            f"tensorweave_register_ops hook with registry.gradient(\"{op.type}\")(fn); declare it not "
            f"differentiable with tw.NotDifferentiable(\"{op.type}\")", node_def=op.name, op=op)

    with loop_state.grad_scope(op, before=False) if loop_state else contextlib.nullcontext():
        _grads_of_inputs(op, fn, out_grads, grads, between, loop_state, array_ops)


def _grads_of_inputs(op, fn, out_grads, grads, between, loop_state, array_ops) -> None:
    # Outputs that received no gradient contribute zeros (multi-output ops). In a cond, the
    # zeros of a branch Switch's other output are live only when that side was taken.
    out_grads = [g if g is not None or not _is_differentiable(t) else
                 (loop_state.zeros_like(op, i) if loop_state else array_ops.zeros_like(t))
                 for i, (g, t) in enumerate(zip(out_grads, op._outputs))]
    with op.graph.name_scope(op.name + "_grad"):
        if not getattr(fn, "accepts_indexed_slices", False):
            # A dense consumer: densified here, in the gradient's own (loop) context.
            out_grads = [to_dense(g) if isinstance(g, IndexedSlices) else g for g in out_grads]
        # Inputs off every path from the xs need no gradient. Their gradient ops would be
        # pruned from a plan, but not inside a while loop, where each forward value they read
        # is pushed on a stack every iteration and popped in the backward loop.
        op._skip_input_indices = tuple(i for i, t in enumerate(op._inputs) if t.op not in between)
        try:
            in_grads = fn(op, *out_grads)
        finally:
            op._skip_input_indices = None
    if isinstance(in_grads, Tensor) or in_grads is None:
        in_grads = [in_grads]
    in_grads = list(in_grads)
    if len(in_grads) != len(op._inputs):
        raise errors.InternalError(
            f"gradient function for {op.type} returned {len(in_grads)} gradients for {len(op._inputs)} inputs")
    for t, g in zip(op._inputs, in_grads):
        if g is None or not _is_differentiable(t):
            continue
        if not isinstance(g, IndexedSlices):
            g = convert_to_tensor(g)
        if g.dtype is not t.dtype:
            raise errors.InternalError(
                f"gradient function for {op.type} returned a {g.dtype.name} gradient for input '{t.name}' "
                f"of dtype {t.dtype.name}")
        grads.setdefault(t, []).append(g)


def _aggregate(parts: list, math_ops):
    """The sum of the partial gradients ``parts``: an ``AddN`` of dense ones, the
    concatenation of IndexedSlices (still sparse), or, when both kinds meet, a dense sum."""
    if len(parts) == 1:
        return parts[0]
    sparse = [p for p in parts if isinstance(p, IndexedSlices)]
    if not sparse:
        return math_ops.add_n(parts)
    if len(sparse) == len(parts):
        return _concat_slices(sparse)
    return math_ops.add_n([to_dense(p) if isinstance(p, IndexedSlices) else p for p in parts])


def _concat_slices(parts: list) -> IndexedSlices:
    """Several IndexedSlices of one tensor as one: their rows one after the other."""
    idx_dtype = dtypes.int64 if any(p.indices.dtype is dtypes.int64 for p in parts) else dtypes.int32
    indices = [p.indices if p.indices.dtype is idx_dtype else math_ops.cast(p.indices, idx_dtype) for p in parts]
    dense_shape = next((p.dense_shape for p in parts if p.dense_shape is not None
                        and constant_value(p.dense_shape) is not None), None)
    if dense_shape is None:
        dense_shape = next((p.dense_shape for p in parts if p.dense_shape is not None), None)
    return IndexedSlices(array_ops.concat([p.values for p in parts], 0), array_ops.concat(indices, 0),
                         dense_shape)


def to_dense(value: IndexedSlices, name=None) -> Tensor:
    """The dense tensor an IndexedSlices stands for (rows of repeated indices summed): an
    ``UnsortedSegmentSum`` over its first dimension. Warns as TensorFlow does when the
    dense shape is unknown at construction or has at least 100M elements; an IndexedSlices
    without ``dense_shape`` cannot be densified (InvalidArgumentError)."""
    if value.dense_shape is None:
        raise errors.InvalidArgumentError(
            f"cannot convert {value} to a dense tensor: it has no dense_shape")
    densify_warning(value)
    known = constant_value(value.dense_shape)
    with value.graph.as_default():
        if known is not None:
            rows = int(np.asarray(known).reshape(-1)[0])
        else:
            rows = array_ops.gather(value.dense_shape, 0)
        dense = math_ops.unsorted_segment_sum(value.values, value.indices, rows, name=name)
    shape = value.shape
    if shape.ndims is not None:
        dense.set_shape(shape)
    return dense


def _indexed_slices_to_tensor(value, dtype=None, name=None):
    if dtype is not None and dtypes.as_dtype(dtype) is not value.dtype:
        raise errors.InvalidArgumentError(
            f"cannot convert {value} of dtype {value.dtype.name} to a tensor of dtype {dtypes.as_dtype(dtype).name}")
    return to_dense(value, name=name)


register_tensor_conversion_function(IndexedSlices, _indexed_slices_to_tensor)


class RegisterGradient:
    """Decorator registering a gradient function for an op type (TF1 ``tf.RegisterGradient``)::

        @tw.RegisterGradient("ScaledClip")
        def _scaled_clip_grad(op, grad):
            return grad * op.get_attr("scale")
    """

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise errors.InvalidArgumentError("RegisterGradient expects an op type name")
        self.op_type = op_type

    def __call__(self, fn):
        reg = plugins.registry().ops
        reg.source = "user code"
        reg.gradient(self.op_type, fn, override=True)
        return fn


def NotDifferentiable(op_type: str) -> None:  # noqa: N802 - TF1 name
    """Declare ``op_type`` not differentiable: gradients stop there without an error."""
    reg = plugins.registry().ops
    reg.source = "user code"
    reg.gradient(op_type, NO_GRADIENT, override=True)


no_gradient = NotDifferentiable

