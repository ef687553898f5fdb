"""Element-wise fusion: each group of connected element-wise nodes on one device becomes one
``_FusedElementwise`` node, computed by one kernel that the device's fuser compiles.

Runs on the plan graph after placement (stage ``post_placement``, after the bfloat16
compression pass, so it sees each device's final nodes), for devices whose type has a fuser
(``tensorweave_register_fusers``; ``plugins.FuserRegistry`` says what a fuser provides).
``GraphOptions.enable_elementwise_fusion`` turns it off, and the environment variable
``TENSORWEAVE_ELEMENTWISE_FUSION=0``/``1`` overrides the config (benchmarks).

**Grouping.** A node is a candidate when its op is element-wise (``fusion_ops.FUSABLE``, plus
AddN of inputs of one static shape, BiasAdd in NHWC with a matching 1-D bias, Identity and
StopGradient), it is not stateful, has one output, no control inputs, no control dependents,
no reference input, is not a target, its output is not fed, and its device's fuser supports
each of its steps for their dtypes. In reverse topological order, a candidate joins the
group of its consumers when every consumer of its output is in that one group (so on the
same device) and its output is not fetched; otherwise it starts a group of its own, as its
*root*. Each group thus has one output, the root's, and computes every other member's value
only for itself, so replacing it by one node changes no value anyone else reads and adds no
cycle. A value used twice inside a group is computed once. Groups never span devices, and
never control-flow frames: an edge between frames always passes through a control-flow
primitive, which is not a candidate. A group needs two nodes or more.

**The fused node.** The group's operands from outside become the node's inputs; scalar
``Const`` nodes without control inputs become literals of the expression (an int64 beyond
2**53, which a float attr cannot hold exactly, stays an input). A group whose operands would
all be literals is left alone (constant folding's job). The node takes the root's name (its
output the root's tensor name), place in the schedule and device, so errors, traces and
fetches name the user's node; it is told apart by its type, ``_FusedElementwise``. Its attrs
are the expression as data (``ops/fusion_ops.py``), with the node each step came from.

**The kernel** (``fused_kernel``, registered for every device type): the node's first
``COMPILE_AFTER`` runs (one; ``fuser.compile_after``, or the environment variable
``TENSORWEAVE_FUSION_COMPILE_AFTER``) go one step at a time through the device's own
kernels — exactly the values of the unfused nodes — and the next run compiles it with the
fuser and uses the compiled kernel from then on, as TensorFlow's XLA auto-clustering
compiles a cluster only once it runs again: a plan run once (most plans of a test suite, a
one-off evaluation) never pays for a compiler, and a loop compiles in its second step. A
device type without a fuser (a worker process without the CPU's numba, say) runs fused
nodes step by step for good.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.kernel_registry import KernelContext, call_kernel_factory
from tensorweave.framework.op_def import flat_input_is_ref
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops.fusion_ops import FUSABLE, FUSED, FusedExpression, Step
from tensorweave.passes import graph_option, plan_graph

log = logging.getLogger(__name__)

ENV_SWITCH = "TENSORWEAVE_ELEMENTWISE_FUSION"
ENV_COMPILE_AFTER = "TENSORWEAVE_FUSION_COMPILE_AFTER"

# Runs of a fused node, step by step, before its fuser compiles it (at the next run; a fuser
# may say otherwise with ``compile_after``). See the module docstring.
COMPILE_AFTER = 1

# Node types that fuse by being rewritten into FUSABLE steps (see ``_recipe``).
_PASS_THROUGH = frozenset({"Identity", "StopGradient"})
_EXACT_FLOAT_INT = 2 ** 53


def enabled(config) -> bool:
    """Whether fusion runs for a session with ``config`` (the environment variable wins)."""
    return graph_option(config, "enable_elementwise_fusion", ENV_SWITCH)


# ---------------------------------------------------------------------------------------
# which nodes, as which steps
def _recipe(op):
    """How node ``op`` computes its output as FUSABLE steps: ``(steps, out)`` where each step
    is ``(op type, operands, dtype)``, an operand ``("in", i)`` (the node's input ``i``) or
    ``("step", k)`` (its own step ``k``), and ``out`` the operand that is its output. None
    when it is not element-wise (or not provably so from its static shapes)."""
    t = op.type
    out_dt = op._outputs[0].dtype if len(op._outputs) == 1 else None
    if out_dt is None:
        return None
    ins = op._inputs
    if t in FUSABLE:
        if len(ins) != FUSABLE[t].arity:
            return None
        return [(t, [("in", i) for i in range(len(ins))], out_dt)], ("step", 0)
    if t in _PASS_THROUGH and len(ins) == 1:
        return [], ("in", 0)
    if t == "AddN" and len(ins) >= 2:
        # The CPU kernel adds left to right; Add does not check shapes, AddN does: only when
        # every input's static shape is the same and fully defined.
        s0 = ins[0].shape
        if not s0.is_fully_defined() or any(x.shape.as_tuple() != s0.as_tuple() for x in ins[1:]):
            return None
        steps = [("Add", [("in", 0), ("in", 1)], out_dt)]
        for i in range(2, len(ins)):
            steps.append(("Add", [("step", len(steps) - 1), ("in", i)], out_dt))
        return steps, ("step", len(steps) - 1)
    if t == "BiasAdd" and op._attrs.get("data_format", "NHWC") == "NHWC":
        v, b = ins[0].shape, ins[1].shape
        if v.ndims is None or v.ndims < 2 or b.ndims != 1 or v.dims[-1] is None or v.dims[-1] != b.dims[0]:
            return None  # let the BiasAdd kernel check (and report) the shapes
        return [("Add", [("in", 0), ("in", 1)], out_dt)], ("step", 0)
    return None


def _num_elements(t) -> int | None:
    return t.shape.num_elements() if t.shape.is_fully_defined() else None


def _supported(op, recipe, fuser) -> bool:
    steps, _out = recipe
    n = _num_elements(op._outputs[0])
    types: list = []
    for step_op, operands, dt in steps:
        operand_types = tuple(op._inputs[i].dtype if kind == "in" else types[i] for kind, i in operands)
        try:
            ok = fuser.supports(step_op, operand_types, dt, n)
        except Exception:  # noqa: BLE001 - a fuser's bug must not break plans: do not fuse
            log.exception("fuser %r failed in supports(%s)", fuser, step_op)
            ok = False
        if not ok:
            return False
        types.append(dt)
    return True


def _inlinable_const(t, fed) -> bool:
    """A scalar constant that can become a literal of the expression."""
    op = t.op
    if op.type != "Const" or op._control_inputs or t in fed or t.shape.ndims != 0:
        return False
    dt = t.dtype
    if not (dt.is_floating or dt.is_integer or dt.is_bool):
        return False
    v = np.asarray(op._attrs["value"])
    if v.shape != () or v.dtype != dt.np_dtype:
        return False
    return not (dt.is_integer and abs(int(v)) > _EXACT_FLOAT_INT)


# ---------------------------------------------------------------------------------------
def find_groups(plan, fusers) -> list[list]:
    """The groups to fuse: lists of plan nodes in topological order, the root last."""
    nodes = plan.nodes
    device_of = plan.device_of
    fed = set(plan.feeds)
    fetched = set(plan.fetches)
    targets = set(plan.targets)
    consumers: dict = {}
    control_dependents = set()
    for op in nodes:
        for t in op._inputs:
            consumers.setdefault(t, []).append(op)
        control_dependents.update(op._control_inputs)

    recipes: dict = {}
    for op in nodes:
        dev = device_of.get(op)
        fuser = fusers.get(dev.device_type) if dev is not None else None
        if fuser is None or op in targets or op in control_dependents or op._control_inputs:
            continue
        if op._op_def.stateful or len(op._outputs) != 1 or op._outputs[0] in fed:
            continue
        if any(flat_input_is_ref(op)):
            continue
        r = _recipe(op)
        if r is not None and _supported(op, r, fuser):
            recipes[op] = r

    group_of: dict = {}
    groups: dict = {}  # root -> members (reverse topological order)
    for op in reversed(plan_graph.topological(nodes)):
        if op not in recipes:
            continue
        out = op._outputs[0]
        users = consumers.get(out, ())
        target = None
        if users and out not in fetched:
            gs = {group_of.get(u) for u in users}
            if len(gs) == 1:
                target = next(iter(gs))
        if target is not None and device_of[target] is device_of[op]:
            group_of[op] = target
            groups[target].append(op)
        else:
            group_of[op] = op
            groups[op] = [op]
    return [list(reversed(members)) for members in groups.values() if len(members) >= 2]


def build_expression(members, recipes_of, fed):
    """(expression, input tensors) of a group (topological order, root last), or None when
    it computes nothing of its own (only pass-throughs) or reads nothing but literals."""
    inside = set(members)
    inputs: list = []
    input_ref: dict = {}
    literals: list = []
    literal_ref: dict = {}
    raw_steps: list = []   # (op type, operand keys, dtype); a key is ("x", tensor) or ("s", k)
    step_names: list = []  # the node each step comes from
    value_of: dict = {}    # tensor computed in the group -> its operand key

    def key_of(t):
        if t.op in inside:
            return value_of[t]
        return ("x", t)

    for op in members:
        steps, out = recipes_of(op)
        local = []
        for step_op, operands, dt in steps:
            keys = [key_of(op._inputs[i]) if kind == "in" else local[i] for kind, i in operands]
            raw_steps.append((step_op, keys, dt))
            step_names.append(op.name)
            local.append(("s", len(raw_steps) - 1))
        kind, i = out
        value_of[op._outputs[0]] = key_of(op._inputs[i]) if kind == "in" else local[i]
    root_key = value_of[members[-1]._outputs[0]]
    if root_key[0] != "s" or not raw_steps:
        return None
    for _step_op, keys, _dt in raw_steps:
        for k in keys:
            if k[0] == "x":
                t = k[1]
                if _inlinable_const(t, fed):
                    if t not in literal_ref:
                        literal_ref[t] = len(literals)
                        v = np.asarray(t.op._attrs["value"])
                        literals.append((float(v), t.dtype))
                elif t not in input_ref:
                    input_ref[t] = len(inputs)
                    inputs.append(t)
    if not inputs:
        return None
    n_in, n_lit = len(inputs), len(literals)

    def ref(k):
        if k[0] == "s":
            return n_in + n_lit + k[1]
        t = k[1]
        return input_ref[t] if t in input_ref else n_in + literal_ref[t]

    steps = tuple(Step(op_t, tuple(ref(k) for k in keys), dt) for op_t, keys, dt in raw_steps)
    if root_key[1] != len(raw_steps) - 1:
        return None  # the root is a pass-through of an earlier step: cannot happen with one output
    expr = FusedExpression(tuple(t.dtype for t in inputs), tuple(literals), steps, tuple(step_names))
    return expr, inputs


def fuse(plan, fusers: dict) -> int:
    """Replace each group (``find_groups``) by one ``_FusedElementwise`` node; returns how many."""
    groups = find_groups(plan, fusers)
    if not groups:
        return 0
    fed = set(plan.feeds)
    fused_count = 0
    replacements = {}
    removed = set()
    for members in groups:
        built = build_expression(members, _recipe, fed)
        if built is None:
            continue
        expr, inputs = built
        root = members[-1]
        out = root._outputs[0]
        if expr.output_type is not out.dtype:
            continue
        node = plan_graph.add_node(plan, FUSED, [list(inputs)], expr.to_attrs(), name=f"{root.name}/fused",
                                   device=root._device, order=root._id)
        stand_in(plan, node, root)
        replacements[out] = node._outputs[0]
        removed.update(members)
        fused_count += 1
    if fused_count:
        put_in_place(plan, removed, replacements)  # (constants only fused nodes read are literals now)
    return fused_count


def has_float_kernel(plan, op, fused_type: str, cache: dict) -> bool:
    """Whether ``op`` is float32 or float64 and placed on a device whose type has a kernel
    for ``fused_type`` at that dtype (``cache``: the answers so far, kept by the pass)."""
    dev, dtype = plan.device_of.get(op), op._attrs.get("T")
    if dev is None or dtype is None or dtype.name not in ("float32", "float64"):
        return False
    key = (fused_type, dev.device_type, dtype)
    if key not in cache:
        cache[key] = plan.kernels.lookup(fused_type, dev.device_type, {"T": dtype}) is not None
    return cache[key]


def put_in_place(plan, removed, replacements, ops=None) -> None:
    """The end of a fusion pass: the ``removed`` nodes leave the plan, their readers take
    the fused nodes' outputs (``replacements``) and control edges (``ops``), and what only
    they read is pruned."""
    plan.nodes = [op for op in plan.nodes if op not in removed]
    plan_graph.replace(plan, replacements, ops)
    plan_graph.reprune(plan)


def stand_in(plan, node, root) -> None:
    """``node``, just added to the plan to compute what ``root`` (the last node of a group it
    replaces) computed, takes its place: its name (``take_name``), its device, what its
    output's shape was known to be, and its origin (errors name the user's node). The
    fusion passes then reroute ``root``'s readers to it (``plan_graph.replace``)."""
    take_name(plan.graph, node, root)
    plan.device_of[node] = plan.device_of[root]
    new_out, out = node._outputs[0], root._outputs[0]
    try:
        new_out._shape = new_out._shape.merge_with(out._shape)
    except errors.InvalidArgumentError:
        new_out._shape = out._shape if out._shape.ndims is not None else TensorShape(None)
    if hasattr(plan, "origin") and root in plan.origin:
        plan.origin[node] = plan.origin[root]


def take_name(graph, node, root) -> None:
    """Give the fused node its root's name (and its output the root's tensor name): errors,
    traces, fetch names and partition graphs then name the user's node. The root stays in
    the plan graph's node list, nameless, until the plan goes."""
    del graph._by_name[node._name]
    node._name = root._name
    graph._by_name[root._name] = node
    for t in node._outputs:
        t._name = f"{root._name}:{t._value_index}"


def fusion_pass(plan) -> None:
    """Registered as ``elementwise_fusion`` (stage ``post_placement``)."""
    if not enabled(plan.config):
        return
    reg = plugins.registry().fusers
    fusers = {}
    for dev in set(plan.device_of.values()):
        f = reg.for_device(dev.device_type)
        if f is not None:
            fusers[dev.device_type] = f
    if fusers:
        fuse(plan, fusers)


# ---------------------------------------------------------------------------------------
# the kernel
class _StepOp:
    """What a device kernel's factory sees of one step of a fused node (KernelContext.op)."""

    __slots__ = ("name", "type", "_attrs", "_op_def", "inputs", "outputs", "_inputs", "_outputs")

    def __init__(self, name, op_type, attrs, op_def, in_types, out_type, shape):
        self.name, self.type, self._attrs, self._op_def = name, op_type, attrs, op_def
        self.inputs = self._inputs = [_StepTensor(dt, shape) for dt in in_types]
        self.outputs = self._outputs = [_StepTensor(out_type, shape)]

    @property
    def op_def(self):
        return self._op_def

    @property
    def control_inputs(self):
        return []

    def get_attr(self, name):
        return self._attrs[name]


class _StepTensor:
    __slots__ = ("dtype", "shape")

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, shape


def stepwise(expr: FusedExpression, ctx) -> callable:
    """A kernel computing ``expr`` one step at a time with the device's own kernels for the
    steps' ops: the values the unfused nodes give, on any device that has those kernels."""
    device = ctx.device
    reg = plugins.registry()
    on_host = getattr(device, "host_tensors", True)
    shape = TensorShape(None)  # steps broadcast: their own shapes are not known statically
    fns = []
    for k, step in enumerate(expr.steps):
        op_def = reg.ops.get(step.op)
        attrs = expr.step_attrs(step)
        for name, a in op_def.attrs.items():
            if name not in attrs and a.has_default:
                attrs[name] = a.default
        name = expr.names[k] if expr.names else ctx.op.name
        sop = _StepOp(name, step.op, attrs, op_def, expr.operand_types(step), step.dtype, shape)
        kd = reg.kernels.lookup(step.op, device.device_type, attrs)
        if kd is None or kd.is_async or kd.takes_context:
            raise errors.UnimplementedError(
                f"{FUSED} node '{ctx.node_name}' on {device.name}: step {k} ({step.op} of "
                f"{[t.name for t in expr.operand_types(step)]}) has no synchronous kernel on "
                f"{device.device_type}")
        fn = call_kernel_factory(kd, KernelContext(sop, device, ctx.resources, ctx.session))
        host_in = kd.host_inputs(sop) if not on_host else None
        if host_in and any(host_in):
            fn = _with_host_inputs(fn, host_in, device)
        fns.append((fn, step.args, _node_named(ctx.op, name)))
    lits = [expr.literal_value(k) for k in range(len(expr.literals))]
    if not on_host:
        lits = [device.to_device(v) for v in lits]
    n_in = expr.n_inputs
    fused_op = ctx.op

    def run(*xs):
        vals = list(xs) + lits
        if len(xs) != n_in:
            raise errors.InvalidArgumentError(f"{FUSED} node '{fused_op.name}': {len(xs)} inputs, expected {n_in}")
        for fn, args, node in fns:
            try:
                vals.append(fn(*[vals[r] for r in args]))
            except errors.OpError as e:
                e.op = node  # the plan's node the step came from: Plan.user_error names the user's
                raise
        return vals[-1]
    return run


def _node_named(fused_op, name):
    """The plan-graph node ``name`` (a step's origin) if the fused node's graph still has it
    (not on a worker, which imports only the fused node), else the fused node."""
    graph = getattr(fused_op, "_graph", None)
    op = getattr(graph, "_by_name", {}).get(name) if graph is not None else None
    return op if op is not None else fused_op


def _with_host_inputs(fn, host_in, device):
    def call(*xs):
        return fn(*[device.to_host(x) if h else x for x, h in zip(xs, host_in)])
    return call


class _CompileLater:
    """Runs ``first`` for the first ``after`` calls; the next call compiles (``compile()``)
    and runs the compiled kernel from then on (or ``first`` for good when compile gives None
    or fails)."""

    __slots__ = ("_fn", "_first", "_compile", "_left", "_lock", "_name", "compiled")

    def __init__(self, first, compile_, after: int, name: str):
        self._first, self._compile, self._left = first, compile_, after
        self._fn = self._counting
        self._lock = threading.Lock()
        self._name = name
        self.compiled = None

    def __call__(self, *xs):
        return self._fn(*xs)

    def _counting(self, *xs):
        if self._left > 0:
            self._left -= 1
            return self._first(*xs)
        with self._lock:
            if self._fn == self._counting:
                self._fn = self._build()
        return self._fn(*xs)

    def _build(self):
        try:
            k = self._compile()
        except Exception:  # noqa: BLE001 - a compiler's failure costs speed, never a result
            log.warning("compiling fused node %r failed; it runs step by step", self._name, exc_info=True)
            k = None
        self.compiled = k
        return k if k is not None else self._first


def compile_after(fuser) -> int:
    env = os.environ.get(ENV_COMPILE_AFTER, "").strip()
    if env:
        try:
            return int(env)
        except ValueError:
            raise errors.InvalidArgumentError(
                f"{ENV_COMPILE_AFTER}={env!r}: expected a number of runs (0 compiles at once)") from None
    return int(getattr(fuser, "compile_after", COMPILE_AFTER))


def fused_kernel(ctx):
    """The kernel factory of ``_FusedElementwise`` on every device type (see the module
    docstring): step by step first, then the fuser's compiled kernel."""
    expr = FusedExpression.from_attrs(ctx.attrs, f"{FUSED} node '{ctx.node_name}' on {ctx.device.name}")
    first = stepwise(expr, ctx)
    fuser = plugins.registry().fusers.for_device(ctx.device.device_type)
    if fuser is None:
        return first
    after = compile_after(fuser)

    def compile_():
        return fuser.compile(expr, ctx)

    lazy = _CompileLater(first, compile_, after, ctx.node_name)
    if after <= 0:
        lazy._fn = lazy._build()
    return lazy
