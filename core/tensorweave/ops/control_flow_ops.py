"""``tw.cond``, ``tw.while_loop``, ``tw.case``, ``tw.group``, ``tw.tuple``: building control
flow (whitepaper 4.4).

This module owns the *graph construction* side of control flow, after TensorFlow 1.x's
``CondContext``/``WhileContext``: the builders compile into the primitives of
``ops/control_flow_primitives.py`` (Switch, Merge, Enter, Exit, NextIteration, LoopCond), which
the executor interprets (frames, iteration tags, dead tensors). It also defines the stack ops
(StackV2, StackPushV2, StackPopV2, StackCloseV2) that gradients of loops use to keep
per-iteration forward values for the backward loop (``ops/control_flow_grad.py``).

How a context works: while a branch or loop body is being built, the graph's current
control-flow context is set (``Graph._set_control_flow_context``), and ``Graph._add_op`` hands
every new op's inputs and control inputs to ``_process_new_op`` first, which

- routes tensors captured from outside: through ``Switch(x, pred)[branch]`` in a cond (so
  the op is dead when the branch is not taken), through ``Enter(x, is_constant=True)`` in a
  loop (visible in every iteration); nested contexts capture through each level;
- gives ops without data inputs (Const, NoOp, random ops) a control input from the
  context's *pivot*, so they run once per taken branch / iteration, as everything in a
  frame must be activated from inside it;
- replaces control inputs from outside a loop by an in-loop proxy (an Identity of an
  Enter'd token) because an edge may not cross a frame boundary directly.

Every op records the context it was built in (``Operation._control_flow_context``).
Variables (reference inputs) are not routed: an op that updates or reads a variable in a
loop body takes the variable directly and gets the pivot as control input, so it runs once
per iteration (``assign_add`` in a body accumulates).
"""

from __future__ import annotations

import contextlib
import numbers

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Operation, Tensor, apply_op, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, math_ops

__all__ = ["cond", "while_loop", "case", "group", "tuple_", "no_op", "init_scope"]


# ----------------------------------------------------------------------------------------
# op definitions: the per-step stacks used by loop gradients
def register_ops(reg):
    reg.op("StackV2", inputs=["max_size: int32"], outputs=["handle: string"],
           attrs=["elem_type: type", "stack_name: string = ''"], stateful=True,
           shape_fn=lambda op: [TensorShape([])],
           doc="A LIFO stack that lives for one step; its handle is a string. max_size < 0: unbounded.")
    reg.op("StackPushV2", inputs=["handle: string", "elem: T"], outputs=["output: T"],
           attrs=["T: type", "swap_memory: bool = false"], stateful=True,
           shape_fn=lambda op: [op.inputs[1].shape],
           doc="Pushes `elem` on the stack and forwards it.")
    reg.op("StackPopV2", inputs=["handle: string"], outputs=["elem: elem_type"], attrs=["elem_type: type"],
           stateful=True, doc="Pops the top element of the stack (an error when it is empty).")
    reg.op("StackCloseV2", inputs=["handle: string"], stateful=True, doc="Deletes the stack.")


def _stack(elem_type, name="stack", max_size=-1):
    return apply_op("StackV2", [max_size], {"elem_type": dtypes.as_dtype(elem_type)}, name=name)


def _stack_push(handle, elem, swap_memory=False, name="StackPush"):
    return apply_op("StackPushV2", [handle, elem], {"swap_memory": bool(swap_memory)}, name=name)


def _stack_pop(handle, elem_type, name="StackPop"):
    return apply_op("StackPopV2", [handle], {"elem_type": dtypes.as_dtype(elem_type)}, name=name)


# ----------------------------------------------------------------------------------------
# nested structures (lists, tuples, namedtuples, dicts of tensors)
def _is_seq(x) -> bool:
    return isinstance(x, list | tuple | dict)


def _flatten(x) -> list:
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _flatten(x[k])]
    if isinstance(x, list | tuple):
        return [leaf for v in x for leaf in _flatten(v)]
    return [x]


def _pack_as(structure, flat):
    it = iter(flat)

    def pack(s):
        if isinstance(s, dict):
            return type(s)((k, pack(s[k])) for k in sorted(s)) if type(s) is dict else \
                type(s)({k: pack(s[k]) for k in sorted(s)})
        if isinstance(s, tuple) and hasattr(s, "_fields"):  # namedtuple
            return type(s)(*[pack(v) for v in s])
        if isinstance(s, list | tuple):
            return type(s)(pack(v) for v in s)
        return next(it)
    return pack(structure)


def _describe(s) -> str:
    """A short picture of a structure for error messages: ``(Tensor, [Tensor, Tensor])``."""
    if isinstance(s, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(s[k])}" for k in sorted(s)) + "}"
    if isinstance(s, list):
        return "[" + ", ".join(_describe(v) for v in s) + "]"
    if isinstance(s, tuple):
        return "(" + ", ".join(_describe(v) for v in s) + ("," if len(s) == 1 else "") + ")"
    if isinstance(s, Operation):
        return "Operation"
    if s is None:
        return "None"
    return "Tensor" if isinstance(s, Tensor) else type(s).__name__


def _same_structure(a, b) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b) and \
            all(_same_structure(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b)
                and all(_same_structure(x, y) for x, y in zip(a, b)))
    return True


# ----------------------------------------------------------------------------------------
# contexts
def _output_context(op):
    """The context an op's outputs live in: an Exit's outputs are outside its loop."""
    ctx = op._control_flow_context
    if ctx is not None and op.type == "Exit":
        ctx = ctx.outer_context
    return ctx


def _is_within(ctx, outer) -> bool:
    """``ctx`` is ``outer`` or nested inside it (every context is within None, the root)."""
    while ctx is not None:
        if ctx is outer:
            return True
        ctx = ctx.outer_context
    return outer is None


def _while_of(ctx):
    while ctx is not None and not isinstance(ctx, WhileContext):
        ctx = ctx.outer_context
    return ctx


def _is_ref(t: Tensor) -> bool:
    return bool(t.op.op_def.outputs_ref)


def _is_loop_constant_enter(op) -> bool:
    return op.type == "Enter" and op._attrs.get("is_constant", False)


def _describe_ctx(ctx) -> str:
    if ctx is None:
        return "the top level of the graph"
    return ctx.describe()


@contextlib.contextmanager
def _in_context(graph, ctx, raw=False):
    """Build ops in ``ctx``; ``raw`` ops are the context's own plumbing (Enter, Switch, ...)
    whose inputs are taken as they are."""
    old = graph._get_control_flow_context()
    graph._set_control_flow_context(ctx)
    if raw and ctx is not None:
        ctx._raw += 1
    try:
        yield ctx
    finally:
        if raw and ctx is not None:
            ctx._raw -= 1
        graph._set_control_flow_context(old)


def _outside_control_flow(ctx):
    """The innermost context around ``ctx`` that is not a cond branch or loop body (None at
    the top level; a function being traced stays)."""
    while isinstance(ctx, ControlFlowContext):
        ctx = ctx.outer_context
    return ctx


@contextlib.contextmanager
def init_scope(graph=None):
    """Build ops outside any ``tw.cond``/``tw.while_loop`` and free of the caller's control
    dependencies (TF's ``init_scope``, for graphs): variables, their initializers and other
    state that must exist once per graph, not once per branch or iteration. The name scope
    and device scope stay those of the caller."""
    graph = graph if graph is not None else get_default_graph()
    old = graph._get_control_flow_context()
    graph._set_control_flow_context(_outside_control_flow(old))
    try:
        with graph.control_dependencies(None):
            yield
    finally:
        graph._set_control_flow_context(old)


def _in_control_flow(t: Tensor) -> bool:
    """``t`` lives inside a cond branch or loop body."""
    return _in_control_flow_op(t.op)


def _in_control_flow_op(op: Operation) -> bool:
    """``op``'s outputs live inside a cond branch or loop body."""
    return isinstance(_output_context(op), ControlFlowContext)


class ControlFlowContext:
    """Common part of CondContext and WhileContext: captured values, pivot activation."""

    def __init__(self, graph):
        self.graph = graph
        self.outer_context = graph._get_control_flow_context()
        self._external: dict[Tensor, Tensor] = {}  # outside tensor -> its stand-in inside
        self._control_proxies: dict[Operation, Operation] = {}
        self._raw = 0

    # -- subclasses ---------------------------------------------------------------------
    @property
    def control_pivot(self) -> Tensor:
        raise NotImplementedError

    def _capture(self, val: Tensor) -> Tensor:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def entered(self, raw=False):
        return _in_context(self.graph, self, raw)

    def add_value(self, val: Tensor) -> Tensor:
        """``val`` as seen inside this context (capturing it when it is from outside)."""
        vctx = _output_context(val.op)
        if _is_within(vctx, self):
            return val
        known = self._external.get(val)
        if known is not None:
            return known
        real = self._forward_value(val, vctx)
        if real is not None:
            self._external[val] = real
            return real
        if not _is_within(self, vctx):
            raise errors.InvalidArgumentError(
                f"tensor '{val.name}' was created in {_describe_ctx(vctx)} and cannot be used in "
                f"{self.describe()}: a value from inside a tw.cond branch or a tw.while_loop body "
                "is only available there; return it from the branch or loop instead")
        outer = val
        if self.outer_context is not None:
            outer = self.outer_context.add_value(val)
        with self.entered(raw=True), self.graph.control_dependencies(None):
            inner = self._capture(outer)
        self._external[val] = inner
        return inner

    def _forward_value(self, val, vctx):
        """In the backward loop of a gradient, a forward loop's value comes from its stack."""
        grad_ctx = _while_of(self.graph._get_control_flow_context())
        if grad_ctx is None or grad_ctx.grad_state is None:
            return None
        if _while_of(vctx) is grad_ctx.grad_state.forward_context:
            return grad_ctx.grad_state.get_real_value(val)
        return None

    def _process_new_op(self, op_def, inputs, control):
        """Called by Graph._add_op for every op built while this context is current."""
        if self._raw:
            return inputs, control
        inputs = [t if _is_ref(t) else self.add_value(t) for t in inputs]
        control = self._fix_control(list(control))
        if self._needs_pivot(inputs, control):
            pivot = self.control_pivot.op
            if pivot not in control:
                control.append(pivot)
        return inputs, control

    def _needs_pivot(self, inputs, control) -> bool:
        if any(_is_within(_output_context(c), self) for c in control):
            return False
        return all(_is_ref(t) for t in inputs)

    def _fix_control(self, control):
        """Control inputs from outside the innermost enclosing loop become in-loop proxies."""
        loop = _while_of(self)
        if loop is None:
            return control
        return [c if _is_within(_output_context(c), loop) else loop._control_proxy(c) for c in control]


class CondContext(ControlFlowContext):
    """One branch of a ``tw.cond``: ops inside run only when ``pred`` equals ``branch``."""

    def __init__(self, graph, pred: Tensor, pivot: Tensor, branch: int, name: str):
        super().__init__(graph)
        self.pred = pred
        self.pivot = pivot
        self.branch = branch
        self.name = name

    @property
    def control_pivot(self):
        return self.pivot

    def describe(self):
        return f"the {'true' if self.branch else 'false'} branch of tw.cond '{self.name}'"

    def _capture(self, val):
        return apply_op("Switch", [val, self.pred], name="Switch")[self.branch]


class WhileContext(ControlFlowContext):
    """The frame of one ``tw.while_loop`` (also used for the backward loop of its gradient)."""

    def __init__(self, graph, name: str, parallel_iterations=10, back_prop=True, swap_memory=False,
                 grad_state=None):
        super().__init__(graph)
        self.name = name  # the frame name
        self.parallel_iterations = parallel_iterations
        self.back_prop = back_prop
        self.swap_memory = swap_memory
        self.grad_state = grad_state  # set on backward loops (ops/control_flow_grad.py)
        self.pivot = None  # the LoopCond output
        self.pivot_for_pred = None
        self.pivot_for_body = None
        self.loop_enters: list[Tensor] = []
        self.loop_exits: list[Tensor] = []

    @property
    def control_pivot(self):
        return self.pivot_for_body if self.pivot_for_body is not None else self.pivot_for_pred

    def describe(self):
        kind = "the backward loop of" if self.grad_state is not None else "the body of"
        return f"{kind} tw.while_loop '{self.name}'"

    def _capture(self, val):
        return apply_op("Enter", [val], {"frame_name": self.name, "is_constant": True,
                                         "parallel_iterations": self.parallel_iterations}, name="Enter")

    def _needs_pivot(self, inputs, control):
        if any(_is_within(_output_context(c), self) for c in control):
            return False
        # Inputs that are all loop invariants would let the op run only once (in the first
        # iteration), and even when the loop runs no iteration at all.
        return all(_is_ref(t) or _is_loop_constant_enter(t.op) for t in inputs)

    def _control_proxy(self, c: Operation) -> Operation:
        """An op inside this loop that runs (each iteration) only after outside op ``c``."""
        proxy = self._control_proxies.get(c)
        if proxy is None:
            with _in_context(self.graph, self.outer_context), self.graph.control_dependencies(None), \
                    self.graph.control_dependencies([c]):
                token = array_ops.constant(True, name="control_token")
            with self.entered(), self.graph.control_dependencies(None):
                proxy = array_ops.identity(self.add_value(token), name="control_proxy").op
            self._control_proxies[c] = proxy
        return proxy

    # -- helpers the gradient code uses to add loop variables to an existing loop ----------
    def _add_loop_var(self, init: Tensor, step_fn, name: str):
        """Add a loop variable ``v`` (entering with ``init``, next value ``step_fn(v_true)``)
        to this already built loop; returns (exit tensor, next_iteration tensor)."""
        with self.entered(raw=True), self.graph.control_dependencies(None):
            enter = apply_op("Enter", [init], {"frame_name": self.name, "is_constant": False,
                                               "parallel_iterations": self.parallel_iterations}, name=name)
            merge = apply_op("Merge", [[enter, enter]], name=name)[0]
            sw_false, sw_true = apply_op("Switch", [merge, self.pivot], name=name)
        with self.entered(), self.graph.control_dependencies(None):
            nxt_value = step_fn(sw_true)
        with self.entered(raw=True), self.graph.control_dependencies(None):
            nxt = apply_op("NextIteration", [nxt_value], name=name)
            _set_back_edge(merge, nxt)
            ex = apply_op("Exit", [sw_false], name=name)
        self.loop_enters.append(enter)
        self.loop_exits.append(ex)
        return ex, nxt


def _set_back_edge(merge: Tensor, next_value: Tensor) -> None:
    """Make ``next_value`` the second input of loop Merge ``merge`` (closing the cycle)."""
    op = merge.op
    op._inputs = (op._inputs[0], next_value)
    op.graph._version += 1


# ----------------------------------------------------------------------------------------
# tw.cond
def _check_pred(pred, where, what="pred"):
    if isinstance(pred, bool | np.bool_):
        return convert_to_tensor(bool(pred), dtype=dtypes.bool_, name="pred")
    if not isinstance(pred, Tensor) and not hasattr(pred, "_as_graph_element"):
        raise errors.InvalidArgumentError(
            f"{where}: pred must be a bool scalar tensor or a Python bool, got {pred!r} "
            f"({type(pred).__name__})")
    pred = convert_to_tensor(pred)
    if pred.dtype is not dtypes.bool_:
        raise errors.InvalidArgumentError(
            f"{where}: {what} '{pred.name}' has dtype {pred.dtype.name}; a bool scalar was expected "
            "(compare it, e.g. tw.greater(x, 0), or tw.cast it to tw.bool)")
    if pred.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(
            f"{where}: {what} '{pred.name}' has shape {pred.shape}; a bool scalar (shape ()) was expected")
    return pred


def _branch_outputs(ctx: CondContext, result, which, where):
    """Flatten one branch's result into tensors that live in the branch."""
    if result is None:
        raise errors.InvalidArgumentError(f"{where}: {which} returned None; it must return tensors or ops")
    out = []
    for v in _flatten(result):
        if v is None:
            raise errors.InvalidArgumentError(
                f"{where}: {which} returned {_describe(result)}, which contains None")
        if isinstance(v, Operation):
            # An op stands for "ran in this branch": the pivot, after the op.
            with ctx.graph.control_dependencies([v]):
                v = array_ops.identity(ctx.pivot, name="op_done")
        else:
            try:
                v = convert_to_tensor(v)
            except errors.InvalidArgumentError as e:
                raise errors.InvalidArgumentError(f"{where}: {which} returned a value that is not a tensor: {e}") from None
            v = ctx.add_value(v)
        out.append(v)
    return out


def cond(pred, true_fn=None, false_fn=None, strict=False, name=None, fn1=None, fn2=None):
    """``true_fn()`` if ``pred`` else ``false_fn()``, decided when the graph runs (``tf.cond``).

    Both branches are built; only the taken one runs. They must return the same structure
    (nested lists/tuples/dicts) of tensors with the same dtypes; ops are allowed (they become
    Operations in the result). Tensors from outside used in a branch are routed through a
    Switch on ``pred``, so work that only the other branch needs does not run. With
    ``strict=False`` a one-element list or tuple is unpacked, as in TF1.
    """
    if fn1 is not None:
        if true_fn is not None:
            raise errors.InvalidArgumentError("tw.cond: pass true_fn or fn1, not both")
        true_fn = fn1
    if fn2 is not None:
        if false_fn is not None:
            raise errors.InvalidArgumentError("tw.cond: pass false_fn or fn2, not both")
        false_fn = fn2
    for fn, what in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if not callable(fn):
            raise errors.InvalidArgumentError(f"tw.cond: {what} must be callable, got {fn!r}")

    graph = pred.graph if isinstance(pred, Tensor) else get_default_graph()
    with graph.as_default(), graph.name_scope(name or "cond") as scope:
        cond_name = scope.rstrip("/")
        where = f"tw.cond '{cond_name}'"
        pred = _check_pred(pred, where)
        p_false, p_true = apply_op("Switch", [pred, pred], name="Switch")
        pivot_t = array_ops.identity(p_true, name="switch_t")
        pivot_f = array_ops.identity(p_false, name="switch_f")
        pred = array_ops.identity(pred, name="pred_id")

        results, flats = [], []
        for branch, fn, pivot, which in ((1, true_fn, pivot_t, "true_fn"), (0, false_fn, pivot_f, "false_fn")):
            ctx = CondContext(graph, pred, pivot, branch, cond_name)
            with ctx.entered():
                res = fn()
                flat = _branch_outputs(ctx, res, which, where)
            results.append(res)
            flats.append(flat)
        res_t, res_f = results
        if not _same_structure(res_t, res_f):
            raise errors.InvalidArgumentError(
                f"{where}: true_fn and false_fn must return the same structure; true_fn returned "
                f"{_describe(res_t)}, false_fn returned {_describe(res_f)}")
        flat_t, flat_f = flats
        leaves_t = _flatten(res_t)
        for i, (t, f) in enumerate(zip(flat_t, flat_f)):
            if t.dtype is not f.dtype:
                raise errors.InvalidArgumentError(
                    f"{where}: output {i} of the branches differs in dtype: true_fn returned "
                    f"'{t.name}' of dtype {t.dtype.name}, false_fn '{f.name}' of dtype {f.dtype.name} "
                    "(tw.cast one of them)")
        merged = []
        for leaf, t, f in zip(leaves_t, flat_t, flat_f):
            m = apply_op("Merge", [[f, t]], name="Merge")[0]
            merged.append(m.op if isinstance(leaf, Operation) else m)
        out = _pack_as(res_t, merged) if _is_seq(res_t) else merged[0]
        if not strict and isinstance(out, list | tuple) and len(out) == 1 and not hasattr(out, "_fields"):
            out = out[0]
        return out


def case(pred_fn_pairs, default=None, exclusive=False, strict=False, name="case"):
    """The function of the first pair whose predicate is true, else ``default`` (``tf.case``).

    ``pred_fn_pairs`` is a list of ``(pred, fn)`` (or a dict, in insertion order). Without
    ``default`` the last pair's function is the default. ``exclusive`` is accepted for TF1
    compatibility but not checked: the first true predicate wins.
    """
    pairs = list(pred_fn_pairs.items()) if isinstance(pred_fn_pairs, dict) else list(pred_fn_pairs)
    if not pairs:
        raise errors.InvalidArgumentError("tw.case: pred_fn_pairs must not be empty")
    for i, p in enumerate(pairs):
        if not (isinstance(p, tuple | list) and len(p) == 2 and callable(p[1])):
            raise errors.InvalidArgumentError(f"tw.case: pred_fn_pairs[{i}] must be a (pred, callable) pair, got {p!r}")
    if default is None:
        default = pairs[-1][1]
        pairs = pairs[:-1]
    elif not callable(default):
        raise errors.InvalidArgumentError(f"tw.case: default must be callable, got {default!r}")
    graph = get_default_graph()
    with graph.name_scope(name):
        preds = [_check_pred(p, f"tw.case '{name}' predicate {i}") for i, (p, _) in enumerate(pairs)]

        def chain(i):
            if i == len(pairs):
                return default()
            return cond(preds[i], pairs[i][1], lambda: chain(i + 1), strict=strict, name=f"case_{i}")
        return chain(0)


# ----------------------------------------------------------------------------------------
# tw.while_loop
def _shape_le(a: TensorShape, b: TensorShape) -> bool:
    """``a`` is at least as specific as ``b`` (every known dim of ``b`` equal in ``a``)."""
    if b.ndims is None:
        return True
    if a.ndims != b.ndims:
        return False
    return all(db is None or da == db for da, db in zip(a.as_list(), b.as_list()))


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, name=None, maximum_iterations=None, return_same_structure=False):
    """Repeat ``body`` while ``cond`` is true (``tf.while_loop``).

    ``loop_vars`` is a (nested) list/tuple/dict of tensors; ``cond(*loop_vars)`` returns a
    bool scalar and ``body(*loop_vars)`` the next values, in the same structure with the same
    dtypes and shapes (or shapes compatible with ``shape_invariants``). Up to
    ``parallel_iterations`` iterations run at once. With ``maximum_iterations`` the loop
    stops after that many iterations at most. A single loop variable comes back as a
    tensor unless ``return_same_structure``.
    """
    if not callable(cond):
        raise errors.InvalidArgumentError(f"tw.while_loop: cond must be callable, got {cond!r}")
    if not callable(body):
        raise errors.InvalidArgumentError(f"tw.while_loop: body must be callable, got {body!r}")
    if not isinstance(parallel_iterations, numbers.Integral) or isinstance(parallel_iterations, bool) \
            or parallel_iterations < 1:
        raise errors.InvalidArgumentError(
            f"tw.while_loop: parallel_iterations must be a positive int, got {parallel_iterations!r}")
    single = not isinstance(loop_vars, list | tuple)
    if single:
        loop_vars = [loop_vars]
        if shape_invariants is not None:
            shape_invariants = [shape_invariants]
    if not _flatten(loop_vars):
        raise errors.InvalidArgumentError("tw.while_loop: loop_vars must contain at least one tensor")
    try_to_pack = (single or len(loop_vars) == 1) and not return_same_structure
    if any(hasattr(v, "_as_loop_flow") for v in _flatten(loop_vars)):
        out = _while_loop_with_arrays(cond, body, loop_vars, shape_invariants, parallel_iterations, back_prop,
                                      swap_memory, name, maximum_iterations)
        return out[0] if try_to_pack else out
    leaves = _flatten(loop_vars)
    graph = next((v.graph for v in leaves if isinstance(v, Tensor)), None) or get_default_graph()
    with graph.as_default(), graph.name_scope(name or "while") as scope:
        loop_name = scope.rstrip("/")
        if maximum_iterations is not None:
            max_iter = convert_to_tensor(maximum_iterations, name="maximum_iterations")
            if not max_iter.dtype.is_integer or max_iter.shape.ndims not in (None, 0):
                raise errors.InvalidArgumentError(
                    f"tw.while_loop '{loop_name}': maximum_iterations must be an integer scalar, got "
                    f"'{max_iter.name}' of dtype {max_iter.dtype.name} and shape {max_iter.shape}")
            orig_cond, orig_body = cond, body
            counter = convert_to_tensor(np.zeros((), max_iter.dtype.np_dtype), name="iteration_counter")
            loop_vars = (counter, loop_vars)
            if shape_invariants is not None:
                shape_invariants = (TensorShape([]), shape_invariants)

            def cond(i, lv):
                return math_ops.logical_and(math_ops.less(i, max_iter), orig_cond(*lv))

            def body(i, lv):
                out = orig_body(*lv)
                fitted = _normalize_result(lv, out)
                if fitted is None:
                    raise _body_mismatch(f"tw.while_loop '{loop_name}'", lv, out)
                return (math_ops.add(i, 1), fitted)

            ctx = WhileContext(graph, loop_name, parallel_iterations, back_prop, swap_memory)
            out = ctx.build_loop(cond, body, loop_vars, shape_invariants)[1]
        else:
            ctx = WhileContext(graph, loop_name, parallel_iterations, back_prop, swap_memory)
            out = ctx.build_loop(cond, body, loop_vars, shape_invariants)
        return out[0] if try_to_pack else out


def _while_loop_with_arrays(cond, body, loop_vars, shape_invariants, parallel_iterations, back_prop, swap_memory,
                            name, maximum_iterations):
    """A loop with TensorArrays (objects with ``_as_loop_flow``/``_from_loop_flow``) among
    its variables: each passes through the loop as its flow tensor, and cond, body and the
    result see TensorArrays again (TF1's ``_convert_tensorarray_to_flow``)."""
    templates = _flatten(loop_vars)

    def arrays(flat):
        return _pack_as(loop_vars, [t._from_loop_flow(v) if hasattr(t, "_as_loop_flow") else v
                                    for t, v in zip(templates, flat)])

    def flows(s):
        if not _is_seq(s):
            return s._as_loop_flow() if hasattr(s, "_as_loop_flow") else s
        return _pack_as(s, [v._as_loop_flow() if hasattr(v, "_as_loop_flow") else v for v in _flatten(s)])

    if shape_invariants is not None:
        inv = _flatten_like(loop_vars, shape_invariants)
        if inv is not None:
            shape_invariants = _pack_as(loop_vars, [TensorShape([]) if hasattr(t, "_as_loop_flow") else s
                                                    for t, s in zip(templates, inv)])
    out = while_loop(lambda *a: cond(*arrays(_flatten(list(a)))),
                     lambda *a: flows(body(*arrays(_flatten(list(a))))),
                     flows(loop_vars), shape_invariants, parallel_iterations, back_prop, swap_memory, name,
                     maximum_iterations, return_same_structure=True)
    return arrays(_flatten(out))


def _normalize_result(loop_vars, result):
    """The body's result in the structure of ``loop_vars`` (a single var may come back bare),
    or None when it does not fit."""
    if _is_seq(result) and _same_structure(loop_vars, result):
        return result
    if len(loop_vars) == 1 and _same_structure(loop_vars[0], result):
        return [result]
    return None


def _body_mismatch(where, loop_vars, result):
    def count(n):
        return f"{n} {'tensor' if n == 1 else 'tensors'}"
    n_got = len(_flatten(result)) if result is not None else 0
    return errors.InvalidArgumentError(
        f"{where}: body must return the structure of loop_vars {_describe(loop_vars)} "
        f"({count(len(_flatten(loop_vars)))}), got {_describe(result)} ({count(n_got)})")


def _flatten_like(structure, values):
    """Flatten ``values`` to the leaves of ``structure`` (a leaf of ``structure`` takes the
    value at its place as it is: a shape like [None, 3] stays one item)."""
    if isinstance(structure, dict):
        if not isinstance(values, dict) or sorted(values) != sorted(structure):
            return None
        out = []
        for k in sorted(structure):
            sub = _flatten_like(structure[k], values[k])
            if sub is None:
                return None
            out.extend(sub)
        return out
    if isinstance(structure, list | tuple):
        if not isinstance(values, list | tuple) or len(values) != len(structure):
            return None
        out = []
        for st, v in zip(structure, values):
            sub = _flatten_like(st, v)
            if sub is None:
                return None
            out.extend(sub)
        return out
    return [values]


def _build_loop(self: WhileContext, cond, body, loop_vars, shape_invariants):
    """Build the loop in this context (TF1's WhileContext.BuildLoop); returns the Exits in
    the structure of ``loop_vars``."""
    where = f"tw.while_loop '{self.name}'"
    graph = self.graph
    flat = []
    for i, v in enumerate(_flatten(loop_vars)):
        if isinstance(v, Operation) or v is None:
            raise errors.InvalidArgumentError(f"{where}: loop variable {i} must be a tensor, got {v!r}")
        flat.append(convert_to_tensor(v, name=f"loop_var_{i}"))
    names = [t.name for t in flat]
    if shape_invariants is not None:
        inv = _flatten_like(loop_vars, shape_invariants)
        if inv is None:
            raise errors.InvalidArgumentError(
                f"{where}: shape_invariants must have the structure of loop_vars {_describe(loop_vars)}, "
                f"got {shape_invariants!r}")
        invariants = []
        for i, (t, s) in enumerate(zip(flat, inv)):
            s = as_shape(s)
            if not s.is_compatible_with(t.shape):
                raise errors.InvalidArgumentError(
                    f"{where}: the shape invariant {s} of loop variable {i} ('{t.name}') is not "
                    f"compatible with the shape {t.shape} it enters the loop with")
            invariants.append(s)
    else:
        invariants = [t.shape for t in flat]

    real = flat
    if self.outer_context is not None:
        with _in_context(graph, self.outer_context):
            real = [self.outer_context.add_value(t) for t in flat]
    with self.entered(raw=True), graph.control_dependencies(None):
        enters = [apply_op("Enter", [t], {"frame_name": self.name, "is_constant": False,
                                          "parallel_iterations": self.parallel_iterations}, name="Enter")
                  for t in real]
        merges = [apply_op("Merge", [[e, e]], name="Merge")[0] for e in enters]
        for e, m, s in zip(enters, merges, invariants):
            e._shape = s
            m._shape = s
    self.loop_enters = list(enters)
    self.pivot_for_pred = merges[0]

    with self.entered():
        c = cond(*_pack_as(loop_vars, merges))
        if c is None or isinstance(c, Operation) or _is_seq(c):
            raise errors.InvalidArgumentError(f"{where}: cond must return a bool scalar tensor, got {c!r}")
        c = self.add_value(_check_pred(c, where, "the value cond returned,"))
    with self.entered(raw=True), graph.control_dependencies(None):
        self.pivot = apply_op("LoopCond", [c], name="LoopCond")
        switches = [apply_op("Switch", [m, self.pivot], name="Switch") for m in merges]
    with self.entered(), graph.control_dependencies(None):
        body_vars = [array_ops.identity(s[1], name="Identity") for s in switches]
    self.pivot_for_body = body_vars[0]

    with self.entered():
        raw_result = body(*_pack_as(loop_vars, body_vars))
        result = _normalize_result(loop_vars, raw_result)
        if result is None:
            raise _body_mismatch(where, _pack_as(loop_vars, flat), raw_result)
        nexts = []
        for i, (v, t) in enumerate(zip(_flatten(result), flat)):
            if isinstance(v, Operation) or v is None:
                raise errors.InvalidArgumentError(
                    f"{where}: body returned {v!r} for loop variable {i} ('{names[i]}'); a tensor was expected")
            try:
                v = convert_to_tensor(v, dtype=t.dtype)
            except errors.InvalidArgumentError as e:
                raise errors.InvalidArgumentError(
                    f"{where}: body returned a value of the wrong dtype for loop variable {i} "
                    f"('{names[i]}', {t.dtype.name}): {e}") from None
            nexts.append(self.add_value(v))
    for i, (m, v) in enumerate(zip(merges, nexts)):
        if not _shape_le(v.shape, m.shape):
            raise errors.InvalidArgumentError(
                f"{where}: loop variable {i} ('{names[i]}') enters the loop with shape {m.shape}, "
                f"but has shape {v.shape} after one iteration (from '{v.name}'). To allow the shape to "
                "vary across iterations, pass shape_invariants to tw.while_loop with a less specific "
                f"shape for it, e.g. {_relaxed(m.shape, v.shape)}")
    with self.entered(raw=True), graph.control_dependencies(None):
        for m, v in zip(merges, nexts):
            _set_back_edge(m, apply_op("NextIteration", [v], name="NextIteration"))
        exits = [apply_op("Exit", [s[0]], name="Exit") for s in switches]
    self.loop_exits = list(exits)
    return _pack_as(loop_vars, exits)


WhileContext.build_loop = _build_loop


def _relaxed(a: TensorShape, b: TensorShape) -> str:
    if a.ndims is None or b.ndims is None or a.ndims != b.ndims:
        return "tw.TensorShape(None)"
    dims = [x if x == y else None for x, y in zip(a.as_list(), b.as_list())]
    return f"tw.TensorShape({dims})"


# ----------------------------------------------------------------------------------------
# grouping (TF keeps tf.group and tf.tuple here too)
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
    gate = group(*[t for t in tensors if t is not None], *(control_inputs or []), name=name or "tuple")
    with gate.graph.control_dependencies([gate]):
        return [array_ops.identity(t) if t is not None else None for t in tensors]
