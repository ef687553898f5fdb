"""Constant folding: evaluate, once, the nodes whose inputs are all constants.

Runs on the plan graph before placement (stage ``pre_placement``, after CSE so merged
constants fold once); ``GraphOptions.enable_constant_folding`` turns it off. In topological
order, a node folds when every input is a constant (a ``Const`` without control inputs, or
an output folded before) and it is an ordinary computation: not stateful (random ops,
variables, queues), not a control-flow primitive, no control inputs, no reference inputs
or outputs, not pinned to a device type other than the CPU (``tw.device("/device:GPU:0")``
means: compute it there), with a synchronous CPU kernel. The kernel is looked up in the kernel registry
and called on the host, exactly as a plan would call it. Its outputs become ``Const`` nodes
(named ``<node>/folded``, read-only like every constant, with the node's device request)
that its remaining consumers read; pruning then drops what nothing needs any more.

Shape, Size and Rank of a tensor whose static shape is fully defined fold too, whatever
their input (the shape is known without computing it): gradient graphs are full of them,
and a plan specialised to the shapes fed (client/plan.py) has every shape it can. So do
OnesLike and ZerosLike of such a tensor (a value made of its shape alone: the gradients'
``grad_ys`` is ``ones_like(loss)``, which otherwise keeps the loss computed in a training
step that does not fetch it).

Values computed from shapes fold on every device: a node pinned to a device type other than
the CPU folds when one of its inputs came from a shape (the Reshape/BroadcastTo/RealDiv a
mean's gradient builds from its input's shape, under the user's ``tw.device``), so the
device does not spend launches on what the plan already knows. A node pinned elsewhere whose
inputs are only the user's constants is computed there, as asked.

In plans with control flow, a folded value keeps its place in the frames: its Const waits
(control inputs) for the ops whose shapes it read and for the control inputs of the
constants it read (a constant inside a loop body waits for the loop's pivot). So it runs in
the same frame and iteration as what it replaces, and is dead where that would be; inside a
compiled loop (runtime/loops.py) such a constant is computed once per loop.

Not folded: outputs over ``MAX_BYTES`` (10 MB), values whose dtype or shape is not what the
graph declares, and fetched tensors themselves (a fetch still returns a fresh array each
step; what consumes the fetched tensor still sees the constant). A fed tensor is not a
constant. When the kernel raises, the node is left alone: the same error then surfaces at
run time, naming the node.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework.device_spec import DeviceSpec
from tensorweave.framework.graph import constant_value
from tensorweave.framework.kernel_registry import KernelContext
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops.control_flow_primitives import CONTROL_FLOW_OPS
from tensorweave.passes import plan_graph

MAX_BYTES = 10 * 2**20
NEVER_FOLD = frozenset(CONTROL_FLOW_OPS) | {
    "Const", "Placeholder", "PlaceholderWithDefault", "Variable", "VariableV2", "_Send", "_Recv",
    "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration",
}


def foldable(op, from_shapes: bool = False) -> bool:
    """Whether ``op`` may be computed once on the host. ``from_shapes``: one of its inputs is
    a value computed from shapes (see the module docstring)."""
    d = op.op_def
    if d.stateful or op.type in NEVER_FOLD or d.outputs_ref or not op.outputs or not op._inputs:
        return False
    if op._control_inputs or any(a.is_ref for a in d.inputs):
        return False
    # A node pinned to another device type is computed there, as asked (device kernel tests
    # and benchmarks build their inputs from constants); unpinned and CPU nodes fold, and so
    # does arithmetic on shapes wherever it was placed.
    dev_type = _device_type(op._device)
    return from_shapes or dev_type in ("", "CPU")


_dev_types: dict = {}


def _device_type(spec: str) -> str:
    t = _dev_types.get(spec)
    if t is None:
        t = _dev_types[spec] = (DeviceSpec.from_string(spec).device_type or "").upper() if spec else ""
    return t


def _as_outputs(op, res) -> list | None:
    n = len(op._outputs)
    if n == 1:
        if op.op_def.outputs[0].is_list and isinstance(res, tuple | list):
            res = res[0]
        return [res]
    if not isinstance(res, tuple | list) or len(res) != n:
        return None
    return list(res)


def _fits(t, v) -> bool:
    if not isinstance(v, np.ndarray):
        return False
    want = np.dtype(object) if t.dtype.is_string else t.dtype.np_dtype
    if v.dtype != want or v.nbytes > MAX_BYTES:
        return False
    return t._shape.is_compatible_with(TensorShape(list(v.shape)))


# Ops whose output follows from their input's static shape alone (when fully defined).
SHAPE_OPS = frozenset({"Shape", "Size", "Rank"})
# Ops whose value is made of their input's shape and dtype alone.
LIKE_OPS = {"OnesLike": np.ones, "ZerosLike": np.zeros}
_VARIABLE_OPS = frozenset({"Variable", "VariableV2"})


def fold_constants(nodes, kernels, host_device, resources=None, fed=(), fetched=(), shapes=True,
                   anchors=None) -> dict:
    """{tensor: value} for the tensors of ``nodes`` that can be replaced by constants.
    ``shapes``: also the outputs of Shape/Size/Rank of tensors whose static shape is fully
    defined (their inputs need not be constant).

    ``anchors`` (a dict, for plans with control-flow frames): filled with, per folded tensor,
    the ops its value was computed after: the tensors whose shapes it read and the control
    inputs of the constants it read (a constant inside a loop waits for the loop's pivot).
    Its replacement then waits for them too, so it runs in their frame and iteration, and
    is dead where they are, as the ops it replaces would be."""
    fed = set(fed)
    value: dict = {}
    out: dict = {}
    from_shapes: set = set()  # folded tensors computed from shapes (foldable on any device)
    frames = anchors is not None
    anchor: dict = {}  # tensor -> frozenset of ops its value waits for (frames only)
    # Creation order: inputs come first (a loop's back edge only means less folding).
    for op in nodes:
        if op._op_def.name == "Const":
            t = op._outputs[0]
            if t not in fed and (not op._control_inputs or frames):
                value[t] = op._attrs["value"]
                if op._control_inputs:
                    anchor[t] = frozenset(op._control_inputs)
            continue
        if shapes and (op._op_def.name in SHAPE_OPS or op._op_def.name in LIKE_OPS) and not op._control_inputs:
            t = op._outputs[0]
            # not of a variable: assign(validate_shape=False) may change its shape
            v = None
            if t not in fed and op._inputs[0].op.type not in _VARIABLE_OPS:
                if op._op_def.name not in LIKE_OPS:
                    v = constant_value(t)
                elif not (frames and op._inputs[0].op._op_def.name in CONTROL_FLOW_OPS):
                    # (a Switch's control edge is live on both branches: the zeros a cond's
                    # gradient makes for the branch not taken must stay dead with it)
                    v = _like(op)
            if v is not None:
                value[t] = v
                from_shapes.add(t)
                if frames and op._inputs[0] not in fed:  # a fed value is there from the start
                    anchor[t] = frozenset((op._inputs[0].op,))
                if t not in fetched:
                    out[t] = v
                continue
        if any(t not in value for t in op._inputs) or not foldable(op, any(t in from_shapes for t in op._inputs)):
            continue
        kd = kernels.lookup(op.type, host_device.device_type, op._attrs)
        if kd is None or kd.is_async or kd.takes_context:
            continue
        try:
            fn = kd.factory(KernelContext(op, host_device, resources, None))
            with np.errstate(all="ignore"):
                res = fn(*[value[t] for t in op._inputs])
        except Exception:  # noqa: BLE001 - left unfolded: the run reports it, naming the node
            continue
        outs = _as_outputs(op, res)
        if outs is None:
            continue
        outs = [np.asarray(v) if isinstance(v, np.generic) else v for v in outs]
        if not all(_fits(t, v) for t, v in zip(op._outputs, outs)) or any(t in fed for t in op._outputs):
            continue
        waits = frozenset().union(*(anchor.get(t, ()) for t in op._inputs)) if frames else None
        derived = any(t in from_shapes for t in op._inputs)
        for t, v in zip(op._outputs, outs):
            value[t] = v
            if derived:
                from_shapes.add(t)
            if waits:
                anchor[t] = waits
            if t not in fetched:
                out[t] = v
    if frames:
        anchors.update((t, anchor[t]) for t in out if t in anchor)
    return out


def _like(op):
    """The value of OnesLike/ZerosLike ``op`` when its input's shape is known, else None."""
    x = op._inputs[0]
    if not x._shape.is_fully_defined():
        return None
    try:
        dtype = np.dtype(op._outputs[0].dtype.as_numpy_dtype)
    except Exception:  # noqa: BLE001 - a dtype NumPy cannot hold: computed at run time
        return None
    shape = x._shape.as_tuple()
    if dtype.kind not in "biufc" or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > MAX_BYTES:
        return None
    return LIKE_OPS[op._op_def.name](shape, dtype)


def constant_folding_pass(plan) -> None:
    """Registered as ``constant_folding`` (stage ``pre_placement``)."""
    opts = getattr(plan.config, "graph_options", None)
    if opts is not None and not getattr(opts, "enable_constant_folding", True):
        return
    host = next((d for d in plan.devices if d.device_type == "CPU"), None)
    if host is None:
        return
    frames = any(op._op_def.name in CONTROL_FLOW_OPS for op in plan.nodes)
    anchors = {} if frames else None
    folded = fold_constants(plan.nodes, plan.kernels, host, plan.session._resources,
                            plan.feeds, set(plan.fetches), anchors=anchors)
    _drop_no_ops(plan, folded)
    if not folded:
        return
    # Only tensors something that stays still reads need a Const.
    node_set = set(plan.nodes)
    used = set()
    for op in plan.nodes:
        if op.type == "Const":
            continue
        if all(t in folded for t in op._outputs) and op._outputs:
            continue  # folded itself
        for t in op._inputs:
            if t in folded and t.op in node_set:
                used.add(t)
    if not used:
        return
    replacements = {}
    for t in sorted(used, key=lambda t: (t.op._id, t.value_index)):
        v = folded[t]
        if v.flags.writeable:
            v = v.copy() if v.base is not None else v
            v.flags.writeable = False  # a constant's value must never change under a kernel
        src = t.op
        name = f"{src.name}/folded" if len(src._outputs) == 1 else f"{src.name}/folded_{t.value_index}"
        const = plan_graph.add_node(plan, "Const", [], {"value": v, "dtype": t.dtype}, name=name,
                                    device=src._device, order=src._id + 0.5)
        for w in sorted((anchors or {}).get(t, ()), key=lambda op: op._id):
            const._add_control_input(w)
        replacements[t] = const._outputs[0]
    plan_graph.replace(plan, replacements)


def _drop_no_ops(plan, folded) -> None:
    """Reroute around the reductions and reshapes that folding showed to change nothing:
    a Sum over no axes, a Reshape to the shape its input already has. Gradients of
    broadcasting ops are full of both (``Sum(grad, BroadcastGradientArgs(...))`` then
    ``Reshape(.., Shape(x))``) once the shapes fed tell that nothing was broadcast."""
    fetched = set(plan.fetches)

    def const(t):
        if t in folded:
            return folded[t]
        return t.op._attrs["value"] if t.op._op_def.name == "Const" and t not in plan.feeds else None
    tensors, ops = {}, {}
    for op in plan.nodes:
        name = op._op_def.name
        if name not in ("Sum", "Reshape") or op._control_inputs or op._outputs[0] in fetched:
            continue
        x, arg = tensors.get(op._inputs[0], op._inputs[0]), const(op._inputs[1])
        if arg is None or x.dtype is not op._outputs[0].dtype or x in plan.feeds:
            continue
        if name == "Sum":
            same = np.size(arg) == 0
        else:
            same = x._shape.is_fully_defined() and list(np.reshape(arg, -1)) == list(x._shape.as_tuple())
        if same:
            tensors[op._outputs[0]] = x
            ops[op] = x.op
    plan_graph.replace(plan, tensors, ops)
