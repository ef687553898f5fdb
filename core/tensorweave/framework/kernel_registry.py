"""The kernel registry: (op type, device type, dtype constraints) -> kernel.

Kernels are resolved once per execution plan, never per step. A kernel is registered either
as a plain compute function of its inputs (``registry.register("Add", "CPU", np.add)``) or as
a *factory* called once per node when the plan is built, which reads the node's attrs and
returns the compute function (TensorFlow's OpKernel construction / Compute split)::

    @registry.kernel("MatMul", "CPU")
    def matmul(ctx):
        ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
        return np.matmul if not (ta or tb) else lambda a, b: np.matmul(a.T if ta else a, b.T if tb else b)

Calling conventions of the returned compute function:
- sync: ``compute(*inputs) -> output`` (a tuple for several outputs, None for none);
- ``takes_context=True``: ``compute(step, *inputs)`` where ``step`` is the StepContext;
- ``is_async=True``: ``compute(step, done, *inputs)``; call ``done(outputs)`` or
  ``done(None, error)`` exactly once, from any thread.

``host_memory=("shape",)`` names inputs the kernel wants as host ndarrays even on an
accelerator (TensorFlow's HostMemory): shapes, axes, sizes. The executor hands them over
as host values (constants directly; computed values through ``device.to_host``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tensorweave.framework import dtypes, errors
from tensorweave.framework.registry import Registry


@dataclasses.dataclass(frozen=True)
class KernelDef:
    op: str
    device_type: str
    factory: Callable
    constraints: tuple = ()            # ((attr_name, frozenset(dtypes)), ...)
    is_async: bool = False
    takes_context: bool = False
    cost: Callable | None = None       # cost(ctx) -> estimated seconds, for the cost model
    priority: int = 0
    source: str = "<unknown>"
    override: bool = False             # registered to replace another plugin's kernel
    host_memory: tuple = ()            # input arg names the kernel wants as host ndarrays

    def host_inputs(self, op) -> list[bool]:
        """For each flat input of ``op``, whether this kernel takes it in host memory."""
        if not self.host_memory:
            return [False] * len(op.inputs)
        return [arg.name in self.host_memory for arg in op.op_def.flat_inputs(op._attrs)]

    def matches(self, attrs: dict) -> bool:
        for name, allowed in self.constraints:
            v = attrs.get(name)
            if isinstance(v, list):
                if not all(dtypes.as_dtype(x) in allowed for x in v):
                    return False
            elif v is None or dtypes.as_dtype(v) not in allowed:
                return False
        return True

    def describe(self) -> str:
        cons = _describe_constraints(self.constraints)
        return f"{self.device_type}" + (f" [{cons}]" if cons else "")


class KernelContext:
    """What a kernel factory sees of its node (TensorFlow's OpKernelConstruction)."""

    __slots__ = ("op", "device", "resources", "session")

    def __init__(self, op, device, resources, session=None):
        self.op = op
        self.device = device
        self.resources = resources
        self.session = session

    @property
    def node_name(self) -> str:
        return self.op.name

    @property
    def op_type(self) -> str:
        return self.op.type

    @property
    def attrs(self) -> dict:
        return self.op._attrs

    def get_attr(self, name):
        return self.op.get_attr(name)

    @property
    def input_dtypes(self):
        return [t.dtype for t in self.op.inputs]

    @property
    def output_dtypes(self):
        return [t.dtype for t in self.op.outputs]

    @property
    def input_shapes(self):
        return [t.shape for t in self.op.inputs]

    @property
    def output_shapes(self):
        return [t.shape for t in self.op.outputs]

    def ref_input(self, index: int):
        """The persistent state (e.g. VariableStore) behind ref input ``index``."""
        t = self.op.inputs[index]
        return self.resources.state_for_op(t.op)

    def error(self, cls, message: str):
        return cls(f"{self.op.type} node '{self.op.name}' on {self.device.name}: {message}",
                   node_def=self.op.name, op=self.op)


def _describe_constraints(constraints: tuple) -> str:
    return ", ".join(f"{n} in {{{', '.join(sorted(d.name for d in a))}}}" for n, a in constraints)


def _normalise_constraints(constraints) -> tuple:
    if not constraints:
        return ()
    out = []
    for name, allowed in sorted(constraints.items()):
        if isinstance(allowed, dtypes.DType | str):
            allowed = [allowed]
        out.append((name, frozenset(dtypes.as_dtype(d) for d in allowed)))
    return tuple(out)


class KernelRegistry(Registry):
    """All kernels, filled through ``tensorweave_register_kernels``.

    A kernel's key is (op, device type, dtype constraints): two distributions registering the
    same key conflict unless one overrides (``framework/registry.py``). Several kernels of one
    op and device type with different constraints coexist; ``lookup`` takes the first whose
    constraints the node's attrs meet, highest ``priority`` first.
    """

    def __init__(self):
        super().__init__("kernel for op")
        self._by_op_device: dict[tuple[str, str], list[KernelDef]] = {}

    def describe(self, key) -> str:
        op, device_type, constraints = key
        cons = _describe_constraints(constraints)
        return f"{op!r} on device {device_type}" + (f" ({cons})" if cons else "")

    def register(self, op: str, device_type: str, fn: Callable | None = None, *, factory: Callable | None = None,
                 constraints: dict | None = None, is_async: bool = False, takes_context: bool = False,
                 cost: Callable | None = None, priority: int = 0, override: bool = False,
                 host_memory: tuple | list = ()) -> KernelDef:
        if (fn is None) == (factory is None):
            raise errors.InvalidArgumentError(
                f"kernel {op}/{device_type} from {self.source}: pass exactly one of fn= or factory=")
        if factory is None:
            def factory(ctx, _fn=fn):
                return _fn
        kd = KernelDef(op, device_type.upper(), factory, _normalise_constraints(constraints), is_async,
                       takes_context, cost, priority, self.source, override, tuple(host_memory))
        in_place = self.claim((op, kd.device_type, kd.constraints), kd, override)
        if in_place is kd:
            same = self._by_op_device.setdefault((op, kd.device_type), [])
            same[:] = [k for k in same if k.constraints != kd.constraints] + [kd]
            same.sort(key=lambda k: -k.priority)
        return in_place

    def kernel(self, op: str, device_type: str, **kw):
        """Decorator form of ``register`` for a kernel factory ``factory(ctx) -> compute``."""
        def deco(factory):
            self.register(op, device_type, factory=factory, **kw)
            return factory
        return deco

    def lookup(self, op_type: str, device_type: str, attrs: dict) -> KernelDef | None:
        """The kernel for the device type, else one registered for every device type ("*")."""
        for kd in self._by_op_device.get((op_type, device_type), ()):
            if kd.matches(attrs):
                return kd
        for kd in self._by_op_device.get((op_type, "*"), ()):
            if kd.matches(attrs):
                return kd
        return None

    def find(self, op, device_type: str) -> KernelDef:
        """The kernel for node ``op`` on ``device_type`` or a NotFoundError saying what exists."""
        kd = self.lookup(op.type, device_type, op._attrs)
        if kd is not None:
            return kd
        have = [k.describe() for (o, _), ks in self._by_op_device.items() if o == op.type for k in ks]
        types = {k: v.name for k, v in op._attrs.items() if isinstance(v, dtypes.DType)}
        raise errors.NotFoundError(
            f"no kernel for op {op.type} (node '{op.name}') on device type {device_type}"
            + (f" with {types}" if types else "")
            + (f"; registered kernels: {'; '.join(have)}" if have else
               "; no device has a kernel for it: install a plugin that provides one (see `tensorweave plugins`)"),
            node_def=op.name, op=op)

    def device_types_for(self, op_type: str, attrs: dict | None = None) -> list[str]:
        return [dt for (o, dt), ks in self._by_op_device.items() if o == op_type
                and (attrs is None or any(k.matches(attrs) for k in ks))]

    def ops_for_device(self, device_type: str) -> list[str]:
        return sorted({o for (o, dt) in self._by_op_device if dt in (device_type.upper(), "*")})

    def items(self):
        return [((kd.op, kd.device_type), kd) for ks in self._by_op_device.values() for kd in ks]


def passthrough(x):
    """The kernel of Identity and StopGradient on every device: the input is the output.
    Known by identity to the executor, which runs an Identity of a variable (``w/read``) as
    the read itself (runtime/executor.py)."""
    return x


def call_kernel_factory(kd: KernelDef, ctx: KernelContext) -> Any:
    try:
        return kd.factory(ctx)
    except errors.OpError:
        raise
    except Exception as e:
        raise errors.InvalidArgumentError(
            f"{ctx.op_type} node '{ctx.node_name}': kernel from {kd.source} rejected the node on "
            f"{ctx.device.name}: {type(e).__name__}: {e}", node_def=ctx.node_name, op=ctx.op) from e
