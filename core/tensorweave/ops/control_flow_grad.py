"""Gradients through ``tw.cond`` and ``tw.while_loop`` (whitepaper 4.4), after TF1.

This module owns the gradient functions of the control-flow primitives and the per-loop
state ``tw.gradients`` keeps while it differentiates through loops:

- **cond**: the gradient of a Merge is a Switch of the incoming gradient on the cond's
  predicate (only the taken branch gets a live gradient); the gradient of a branch's Switch
  is a Merge of the two branch gradients (the untaken side gets zeros that are live only
  when that side was taken, so the Merge always sees exactly one live input).
- **while_loop**: for each forward loop on the path, ``GradLoopState`` adds a loop counter
  to the forward loop, and builds a backward loop (a ``WhileContext`` with ``grad_state``)
  that runs the recorded number of iterations. Forward values that gradient functions use
  inside the backward loop are pushed on a per-step stack (StackPushV2) in each forward
  iteration and popped (StackPopV2) in the backward iteration that needs them; loop
  invariants (Enter with is_constant) get their gradients summed over the iterations by an
  accumulator loop variable. Control edges (``f_sync``/``b_sync`` and the counter) order the
  pushes and pops of concurrent iterations (parallel_iterations > 1) so a LIFO stack still
  returns each iteration its own values.

The walk itself (pending counts, when a loop's Exits are ready, FIFO order) is in
``ops/gradients.py``; it calls ``maybe_create_state`` and the ``ControlFlowState`` methods.
"""

from __future__ import annotations

import contextlib

from tensorweave.framework import errors
from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.graph import apply_op, constant_value
from tensorweave.framework.op_def import NO_GRADIENT
from tensorweave.ops import array_ops, math_ops
from tensorweave.ops.control_flow_ops import (
    CondContext,
    WhileContext,
    _in_context,
    _output_context,
    _set_back_edge,
    _stack,
    _stack_pop,
    _stack_push,
    _while_of,
)


def register_ops(reg):  # the stack ops are defined with the builders (control_flow_ops)
    pass


def register_gradients(reg):
    reg.gradient("Switch", _switch_grad)
    reg.gradient("Merge", _merge_grad)
    reg.gradient("Enter", _enter_grad)
    reg.gradient("Exit", _exit_grad)
    reg.gradient("NextIteration", _next_iteration_grad)
    for op in ("LoopCond", "ControlTrigger", "StackV2", "StackPushV2", "StackPopV2", "StackCloseV2"):
        reg.gradient(op, NO_GRADIENT)


def _trainable(t) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def _is_loop_switch(op) -> bool:
    return op.type == "Switch" and isinstance(op._control_flow_context, WhileContext)


def _is_loop_exit(op) -> bool:
    return op.type == "Exit" and isinstance(op._control_flow_context, WhileContext)


def _plain(graph):
    """No control dependencies from the caller's scopes on plumbing ops."""
    return graph.control_dependencies(None)


@contextlib.contextmanager
def _on_task_of(graph, value):
    """Build a stack op for the history of forward tensor ``value`` in the task (process)
    that computes ``value``: a stack lives in the process of its StackV2 and its pushes and
    pops (colocated with it by the placer, through the Enter/Switch that carry its handle
    into the loops) must run there. TF colocates StackV2 with the value; our stack kernels
    are host kernels, so the job/replica/task of the value's device is kept and the device
    type left to the placer (the value may live on an accelerator). No device scope or
    colocation of the caller applies (the gradient may be built under either)."""
    spec = DeviceSpec.from_string(value.op.device)
    task = DeviceSpec(spec.job, spec.replica, spec.task).to_string()
    with graph.colocate_with(None, ignore_existing=True), graph.device(None), graph.device(task or None):
        yield


# ----------------------------------------------------------------------------------------
# gradient functions
def _switch_grad(op, grad_false, grad_true):
    grad = (grad_false, grad_true)
    graph = op.graph
    op_ctxt = op._control_flow_context
    grad_ctxt = graph._get_control_flow_context()
    if isinstance(op_ctxt, WhileContext):
        grad_state = grad_ctxt.grad_state
        merge_grad = grad_state.switch_map.get(op)
        if merge_grad is not None:
            # Second visit, from the body side: close the backward loop's cycle.
            if grad[1] is not None:
                with _in_context(graph, grad_ctxt, raw=True), _plain(graph):
                    _set_back_edge(merge_grad, apply_op("NextIteration", [grad[1]], name="b_next"))
            return None, None
        if grad[0] is not None:
            # First visit, from the Exit: the backward loop variable's Merge; its second
            # input is set when the body side arrives (or to zeros in post_processing).
            with _in_context(graph, grad_ctxt, raw=True), _plain(graph):
                merge_grad = apply_op("Merge", [[grad[0], grad[0]]], name="b_switch")[0]
            grad_state.switch_map[op] = merge_grad
            return merge_grad, None
        return None, None
    if isinstance(op_ctxt, CondContext):
        if grad[1 - op_ctxt.branch] is None:
            return None, None
        return apply_op("Merge", [list(grad)], name="cond_grad")[0], None
    false_grad = apply_op("Switch", [grad[0], op.inputs[1]])[0]
    true_grad = apply_op("Switch", [grad[1], op.inputs[1]])[1]
    return apply_op("Merge", [[false_grad, true_grad]])[0], None


def _merge_grad(op, grad, _):
    graph = op.graph
    op_ctxt = _output_context(op.inputs[0].op)
    grad_ctxt = graph._get_control_flow_context()
    if isinstance(op_ctxt, WhileContext):
        false_g, true_g = apply_op("Switch", [grad, grad_ctxt.pivot], name="b_merge")
        return [false_g, true_g] + [None] * (len(op.inputs) - 2)
    if isinstance(op_ctxt, CondContext):
        pred = op_ctxt.pred
        grad_loop = _while_of(grad_ctxt)
        if grad_loop is not None and grad_loop.grad_state is not None:
            # A cond inside a loop: the backward iteration needs the predicate of its own
            # forward iteration, kept on a stack.
            grad_state = grad_loop.grad_state
            real_pred = grad_state.history_map.get(pred)
            if real_pred is None:
                history = grad_state.add_forward_accumulator(pred)
                real_pred = grad_state.add_backprop_accumulated_value(history, pred)
                grad_state.history_map[pred] = real_pred
            pred = real_pred
        return list(apply_op("Switch", [grad, pred], name="cond_grad"))

    return [apply_op("Switch", [grad, math_ops.equal(op.outputs[1], i)])[1] for i in range(len(op.inputs))]


def _enter_grad(op, grad):
    graph = op.graph
    grad_ctxt = _while_of(graph._get_control_flow_context())
    if grad_ctxt is None or grad_ctxt.grad_state is None or not grad_ctxt.back_prop:
        return grad
    if op.get_attr("is_constant"):
        # A loop invariant: the sum of its gradients over all iterations.
        return grad_ctxt.grad_state.add_backprop_accumulator(op, grad)
    with _in_context(graph, grad_ctxt, raw=True), _plain(graph):
        result = apply_op("Exit", [grad], name="b_enter")
    grad_ctxt.loop_exits.append(result)
    return result


def _exit_grad(op, grad):
    graph = op.graph
    op_ctxt = op._control_flow_context
    grad_ctxt = graph._get_control_flow_context()
    if op_ctxt.grad_state is not None:
        raise errors.UnimplementedError(
            f"gradient of Exit node '{op.name}' of a backward loop: second-order gradients of "
            "tw.while_loop are not supported")
    if grad_ctxt is None or not grad_ctxt.back_prop:
        return None
    with _in_context(graph, grad_ctxt, raw=True), _plain(graph):
        result = apply_op("Enter", [grad], {"frame_name": grad_ctxt.name, "is_constant": False,
                                            "parallel_iterations": grad_ctxt.parallel_iterations},
                          name="b_exit")
    grad_ctxt.loop_enters.append(result)
    return result


def _next_iteration_grad(op, grad):
    return grad


# ----------------------------------------------------------------------------------------
# per-loop state
class GradLoopState:
    """The backward loop of one forward loop, and the history it keeps (TF's _GradLoopState)."""

    def __init__(self, forward_ctxt: WhileContext, outer_grad_state, root_ctxt):
        graph = forward_ctxt.graph
        self.graph = graph
        self.root_ctxt = root_ctxt  # where tw.gradients was called: stacks live there
        self.outer_grad_state = outer_grad_state
        self.forward_context = forward_ctxt
        self.history_map = {}  # forward tensor -> its value in the backward loop
        self.switch_map = {}  # forward loop Switch op -> backward Merge
        self.unused_exits = []
        self.deferred_exits = []
        self.forward_loop_exits = list(forward_ctxt.loop_exits)
        self.pending_exits_count = len(self.forward_loop_exits)
        self._forward_sync = None
        self._grad_sync = None

        outer_forward_ctxt = outer_grad_state.forward_context if outer_grad_state else forward_ctxt.outer_context
        # The forward loop counter: how many iterations ran (each execution, if nested).
        with _in_context(graph, outer_forward_ctxt), _plain(graph):
            n = array_ops.constant(0, name="f_count")
            if outer_grad_state is not None:
                # Pushes of the i-th execution of this inner loop before those of the (i+1)-th.
                n.op._add_control_input(outer_grad_state.forward_index.op.inputs[0].op)
        cnt, self.forward_index = forward_ctxt._add_loop_var(n, lambda v: math_ops.add(v, 1), "f_count")

        if outer_grad_state is not None:
            # Nested: remember the iteration count of each execution of this inner loop.
            history_cnt = outer_grad_state.add_forward_accumulator(cnt)
            with _in_context(graph, outer_grad_state.grad_context):
                self.grad_context = self._new_grad_context(forward_ctxt)
                real_cnt = outer_grad_state.add_backprop_accumulated_value(history_cnt, cnt)
                self.grad_index = self._add_backprop_counter(real_cnt, outer_grad_state)
        else:
            with _in_context(graph, outer_forward_ctxt):
                self.grad_context = self._new_grad_context(forward_ctxt)
                self.grad_index = self._add_backprop_counter(cnt, None)

    def _new_grad_context(self, fwd):
        frame = self.graph.unique_name(fwd.name.replace("/", "_") + "_grad")
        return WhileContext(self.graph, frame, fwd.parallel_iterations, fwd.back_prop, fwd.swap_memory,
                            grad_state=self)

    def _add_backprop_counter(self, count, outer_grad_state):
        """The backward loop's own counter: runs ``count`` iterations, and is the loop's pivot."""
        ctx, graph = self.grad_context, self.graph
        with ctx.entered(raw=True), _plain(graph):
            enter = apply_op("Enter", [count], {"frame_name": ctx.name, "is_constant": False,
                                                "parallel_iterations": ctx.parallel_iterations}, name="b_count")
            merge = apply_op("Merge", [[enter, enter]], name="b_count")[0]
        ctx.loop_enters.append(enter)
        ctx.pivot_for_pred = merge
        with ctx.entered(), _plain(graph):
            pred = math_ops.greater_equal(merge, 1, name="b_count")
        with ctx.entered(raw=True), _plain(graph):
            ctx.pivot = apply_op("LoopCond", [pred], name="b_count")
            sw_false, sw_true = apply_op("Switch", [merge, ctx.pivot], name="b_count")
        with ctx.entered(), _plain(graph):
            index = math_ops.subtract(sw_true, 1, name="b_count")
        ctx.pivot_for_body = index
        with ctx.entered(raw=True), _plain(graph):
            next_count = apply_op("NextIteration", [index], name="b_count")
            _set_back_edge(merge, next_count)
            final_zero = apply_op("Exit", [sw_false], name="b_count")
        ctx.loop_exits.append(final_zero)
        if outer_grad_state is not None:
            # Pops of the i-th execution of this inner loop before those of the (i+1)-th.
            outer_grad_state.grad_sync._add_control_input(final_zero.op)
        return next_count

    # The sync nodes order the pushes (pops) of one iteration before the next iteration's
    # counter value. Pushes and pops inside a cond are dead in iterations that did not take
    # the branch, so the sync must stay live whatever its control inputs are: a one-input
    # Merge of the counter waits for all its control inputs and is dead only when its data
    # input is (TF uses a ControlTrigger, which the executor may treat as dead then).
    @property
    def forward_sync(self):
        if self._forward_sync is None:
            self._forward_sync = self._sync(self.forward_context, self.forward_index, "f_sync")
        return self._forward_sync

    @property
    def grad_sync(self):
        if self._grad_sync is None:
            self._grad_sync = self._sync(self.grad_context, self.grad_index, "b_sync")
        return self._grad_sync

    def _sync(self, ctx, index, name):
        with _in_context(self.graph, ctx, raw=True), _plain(self.graph):
            sync = apply_op("Merge", [[index.op.inputs[0]]], name=name)[0].op
        index.op._add_control_input(sync)
        return sync

    # -- history: forward values on stacks ------------------------------------------------
    def add_forward_accumulator(self, value, dead_branch=False):
        """Push ``value`` (a forward tensor of this loop) on a new stack in every forward
        iteration; returns the stack handle."""
        graph, fwd = self.graph, self.forward_context
        with _in_context(graph, self.root_ctxt), _plain(graph), _on_task_of(graph, value):
            acc = _stack(value.dtype, name="f_acc")
        with _in_context(graph, fwd), _on_task_of(graph, value):
            enter_acc = fwd.add_value(acc)
        value_ctxt = _output_context(value.op)
        if value_ctxt is fwd:
            with _in_context(graph, fwd), _plain(graph), _on_task_of(graph, value):
                push = _stack_push(enter_acc, value, fwd.swap_memory)
            # The counter advances to the next iteration only after this push.
            self.forward_index.op._add_control_input(push.op)
        else:
            if not isinstance(value_ctxt, CondContext):
                raise errors.InternalError(
                    f"cannot keep the history of '{value.name}' for the gradient of tw.while_loop "
                    f"'{fwd.name}': it is in {value_ctxt.describe() if value_ctxt else 'no loop'}")
            if dead_branch:
                # The value lives where the branch is *not* taken (a zeros shape for it).
                with _in_context(graph, value_ctxt.outer_context), _plain(graph), _on_task_of(graph, value):
                    push = _stack_push(enter_acc, value, fwd.swap_memory)
                push.op._control_flow_context = value_ctxt
            else:
                with _in_context(graph, value_ctxt), _plain(graph), _on_task_of(graph, value):
                    push = _stack_push(enter_acc, value, fwd.swap_memory)
            self.forward_sync._add_control_input(push.op)
        # ... and after this iteration's counter increment (pushes in iteration order).
        push.op._add_control_input(self.forward_index.op.inputs[0].op)
        return acc

    def add_backprop_accumulated_value(self, history_value, value, dead_branch=False):
        """Pop, in the backward loop, the value pushed by ``add_forward_accumulator``."""
        graph = self.graph
        history_ctxt = history_value.op._control_flow_context
        cond_ctxt = None
        value_ctxt = value.op._control_flow_context
        while value_ctxt is not None and value_ctxt is not history_ctxt:
            if isinstance(value_ctxt, CondContext):
                cond_ctxt = value_ctxt
                break
            value_ctxt = value_ctxt.outer_context
        with _in_context(graph, self.grad_context), _plain(graph), _on_task_of(graph, history_value):
            if cond_ctxt is not None:
                # Pushed only in iterations that took the branch: pop only in those too.
                grad_state, pred = self, None
                while pred is None and grad_state is not None:
                    pred = grad_state.history_map.get(cond_ctxt.pred)
                    grad_state = grad_state.outer_grad_state
                if pred is None:
                    pred = cond_ctxt.pred
                branch = (1 - cond_ctxt.branch) if dead_branch else cond_ctxt.branch
                history_value = apply_op("Switch", [history_value, pred], name="b_pop_guard")[branch]
            pop = _stack_pop(history_value, value.dtype, name="b_acc_pop")
            pop._shape = value.shape
        if self.grad_context.parallel_iterations > 1:
            # Pops of an iteration before the next backward iteration starts.
            self.grad_sync._add_control_input(pop.op)
        return pop

    def get_real_value(self, value):
        """The value of forward tensor ``value`` in the matching backward iteration."""
        real = self.history_map.get(value)
        if real is not None:
            return real
        cur_value, cur_state, history = value, self, None
        while True:
            enter_op = _loop_constant_enter(cur_value)
            if enter_op is not None:
                # A loop invariant: no history needed at this level.
                cur_value = enter_op.inputs[0]
                cur_state = cur_state.outer_grad_state
                if cur_state is None:
                    with _in_context(self.graph, self.grad_context):
                        real = self.grad_context.add_value(cur_value)
                    break
            elif cur_value.op.type == "Const":
                with _in_context(self.graph, self.grad_context), _plain(self.graph):
                    real = array_ops.constant(constant_value(cur_value), dtype=cur_value.dtype)
                break
            else:
                history = cur_state.add_forward_accumulator(cur_value)
                break
        if real is None:
            real = cur_state.add_backprop_accumulated_value(history, cur_value)
            if cur_state is not self:
                with _in_context(self.graph, self.grad_context):
                    real = self.grad_context.add_value(real)
        self.history_map[value] = real
        return real

    def add_backprop_accumulator(self, op, grad):
        """Sum ``grad`` (the gradient of loop invariant ``op``, an Enter) over all backward
        iterations in a new backward loop variable; returns its Exit."""
        ctx, graph = self.grad_context, self.graph
        outer = ctx.outer_context
        shape = grad.shape
        if shape.is_fully_defined():
            with _in_context(graph, outer), _plain(graph):
                acc = array_ops.zeros(shape.as_list(), grad.dtype, name="b_acc")
        else:
            value = op.inputs[0]
            outer_loop = _while_of(outer)
            if outer_loop is not None and outer_loop.grad_state is not None:
                # Nested: the shape of the invariant in each execution of the inner loop.
                ogs = self.outer_grad_state
                with _in_context(graph, self.forward_context.outer_context), _plain(graph):
                    zeros_shape = array_ops.shape(value)
                history = ogs.add_forward_accumulator(zeros_shape)
                real_shape = ogs.add_backprop_accumulated_value(history, zeros_shape)
                with _in_context(graph, outer), _plain(graph):
                    acc = array_ops.zeros(real_shape, grad.dtype, name="b_acc")
            else:
                with _in_context(graph, outer), _plain(graph):
                    acc = array_ops.zeros_like(value, name="b_acc")
        with ctx.entered(raw=True), _plain(graph):
            enter_acc = apply_op("Enter", [acc], {"frame_name": ctx.name, "is_constant": False,
                                                  "parallel_iterations": ctx.parallel_iterations}, name="b_acc")
            merge_acc = apply_op("Merge", [[enter_acc, enter_acc]], name="b_acc")[0]
            sw_false, sw_true = apply_op("Switch", [merge_acc, ctx.pivot], name="b_acc")
        with ctx.entered(), _plain(graph):
            add_acc = math_ops.add(sw_true, grad, name="b_acc")
        with ctx.entered(raw=True), _plain(graph):
            _set_back_edge(merge_acc, apply_op("NextIteration", [add_acc], name="b_acc"))
            result = apply_op("Exit", [sw_false], name="b_acc")
        ctx.loop_enters.append(enter_acc)
        ctx.loop_exits.append(result)
        return result


def _loop_constant_enter(value):
    op = value.op
    while op.type in ("Switch", "Identity"):
        op = op.inputs[0].op
    return op if op.type == "Enter" and op._attrs.get("is_constant", False) else None


class ControlFlowState:
    """The GradLoopState of every forward loop a ``tw.gradients`` call goes through."""

    def __init__(self, graph, root_ctxt):
        self.graph = graph
        self.root_ctxt = root_ctxt
        self._map: dict[WhileContext, GradLoopState] = {}

    def _add_while_context(self, exit_op, between: set):
        fwd = _while_of(exit_op._control_flow_context)
        if fwd in self._map:
            return
        outer_fwd = _while_of(fwd.outer_context)
        outer_state = self._map.get(outer_fwd) if outer_fwd is not None else None
        state = GradLoopState(fwd, outer_state, self.root_ctxt)
        self._map[fwd] = state
        # Every exit of the loop takes part: the backward loop needs a gradient for each.
        for ex in state.forward_loop_exits:
            between.add(ex.op)

    def get_grad_state(self, op, before):
        if before and _is_loop_exit(op):
            fwd = _while_of(op._control_flow_context.outer_context)
        else:
            fwd = _while_of(op._control_flow_context)
        return self._map.get(fwd) if fwd is not None else None

    def grad_scope(self, op, before):
        """Build ``op``'s gradient (``before``: the aggregation of its output gradients) in
        the backward loop of the forward loop ``op`` is in."""
        state = self.get_grad_state(op, before)
        if state is None:
            return contextlib.nullcontext()
        return _in_context(self.graph, state.grad_context)

    def process_unused_loop_exits(self, pending, to_ops_set):
        loop_exits = []
        for state in self._map.values():
            for y in state.forward_loop_exits:
                if pending.get(y.op, 0) == 0:
                    state.pending_exits_count -= 1
                    if y.op not in to_ops_set:
                        state.unused_exits.append(y)
                    if state.pending_exits_count == 0:
                        loop_exits.extend(state.unused_exits)
        return loop_exits

    def exit_ready(self, exit_op, grads, queue):
        """Called when an Exit's consumers are all done: the loop's exits go together."""
        state = self.get_grad_state(exit_op, before=False)
        y = exit_op.outputs[0]
        state.deferred_exits.append(y)
        state.pending_exits_count -= 1
        if state.pending_exits_count != 0:
            return
        has_grad = False
        for y in state.deferred_exits:
            if grads.get(y):
                has_grad = True
                queue.append(y.op)
            else:
                state.unused_exits.append(y)
        for y in state.unused_exits:
            if has_grad and _trainable(y):
                grads.setdefault(y, []).append(self.zeros_like_for_exit(y))
            queue.append(y.op)

    def zeros_like(self, op, index):
        """Zeros for output ``index`` of ``op`` that got no gradient, inside loops."""
        if _is_loop_switch(op):
            return None
        dead_branch = op.type == "Switch"
        fwd = _while_of(op._control_flow_context)
        state = self._map.get(fwd) if fwd is not None else None
        val = op.outputs[index]
        if state is None:
            return array_ops.zeros_like(val)
        op_ctxt = op._control_flow_context
        graph = self.graph
        if val.shape.is_fully_defined():
            result = array_ops.zeros(val.shape.as_list(), val.dtype)
            if dead_branch:
                pred = state.history_map.get(op_ctxt.pred)
                if pred is None:
                    pred = state.get_real_value(op_ctxt.pred)
                result = apply_op("Switch", [result, pred])[1 - op_ctxt.branch]
            return result
        if dead_branch:
            with _in_context(graph, op_ctxt.outer_context), _plain(graph):
                val = apply_op("Switch", [op.inputs[0], op_ctxt.pred])[1 - op_ctxt.branch]
                zeros_shape = array_ops.shape(val)
            val.op._control_flow_context = op_ctxt
            zeros_shape.op._control_flow_context = op_ctxt
        else:
            with _in_context(graph, op_ctxt), _plain(graph):
                zeros_shape = array_ops.shape(val)
        history = state.add_forward_accumulator(zeros_shape, dead_branch=dead_branch)
        shape = state.add_backprop_accumulated_value(history, zeros_shape, dead_branch)
        return array_ops.zeros(shape, val.dtype)

    def zeros_like_for_exit(self, val):
        """Zeros as the gradient of an Exit that the ys do not depend on."""
        graph = self.graph
        fwd = val.op._control_flow_context
        outer_fwd = _while_of(fwd.outer_context)
        outer_state = self._map.get(outer_fwd) if outer_fwd is not None else None
        if outer_state is None:
            if val.shape.is_fully_defined():
                return array_ops.zeros(val.shape.as_list(), val.dtype)
            return array_ops.zeros_like(val)
        if val.shape.is_fully_defined():
            with _in_context(graph, outer_state.grad_context), _plain(graph):
                return array_ops.zeros(val.shape.as_list(), val.dtype)
        with _in_context(graph, fwd.outer_context), _plain(graph):
            shape = array_ops.shape(val)
        history = outer_state.add_forward_accumulator(shape)
        real_shape = outer_state.add_backprop_accumulated_value(history, shape)
        with _in_context(graph, outer_state.grad_context), _plain(graph):
            return array_ops.zeros(real_shape, val.dtype)

    def post_processing(self):
        """A loop variable whose next value does not depend on its value: its backward Merge
        never got a second input; feed it zeros for the iterations after the first."""
        graph = self.graph
        for state in self._map.values():
            for b_merge in state.switch_map.values():
                first, second = b_merge.op.inputs
                if first is not second:
                    continue
                ctx = state.grad_context
                if first.shape.is_fully_defined():
                    with ctx.entered(), _plain(graph):
                        zeros = array_ops.zeros(first.shape.as_list(), first.dtype)
                else:
                    with _in_context(graph, ctx.outer_context), _plain(graph):
                        zeros = array_ops.zeros_like(first.op.inputs[0])
                    with ctx.entered(), _plain(graph):
                        zeros = ctx.add_value(zeros)
                with ctx.entered(raw=True), _plain(graph):
                    _set_back_edge(b_merge, apply_op("NextIteration", [zeros], name="b_zeros"))


def maybe_create_state(graph, between: set):
    """A ControlFlowState when the ops between xs and ys include loop Exits, else None.
    Adds every Exit of those loops to ``between``."""
    exits = [op for op in between if _is_loop_exit(op)]
    if not exits:
        return None
    for op in exits:
        if op._control_flow_context.grad_state is not None:
            raise errors.UnimplementedError(
                f"tw.gradients through Exit node '{op.name}' of the backward loop of a tw.while_loop: "
                "second-order gradients of while loops are not supported")

    def depth(op):
        d, ctx = 0, op._control_flow_context
        while ctx is not None:
            d += 1
            ctx = ctx.outer_context
        return d

    state = ControlFlowState(graph, graph._get_control_flow_context())
    for op in sorted(exits, key=lambda o: (depth(o), o._id)):
        state._add_while_context(op, between)
    return state
