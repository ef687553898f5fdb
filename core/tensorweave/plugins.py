"""Plugin hooks, the hookimpl marker, and the plugin manager.

Everything tensorweave can do is registered through the hooks declared here: the core's own
ops, kernels, passes, placer and in-process transport come from its built-in plugins
(``tensorweave.builtin.*``, loaded first, like pytest's default plugins), exactly like a
third-party plugin. Distributions advertise a module in the entry-point group
``tensorweave``::

    [project.entry-points.tensorweave]
    cpu = "tensorweave_cpu.plugin"

and implement any subset of the hooks with ``@tensorweave.plugins.hookimpl``. Plugins are
loaded lazily, once per process, on first use (``registry()``). Each hook is called through
pluggy once per plugin, in load order, so everything a plugin registers is recorded under its
distribution. A plugin that fails to import, or whose hooks do not match the hookspecs (a
misspelled hook name, ``wrapper=True``), is reported — naming the plugin and the hook — and
the others still load; two distributions registering the same op, kernel key, device type,
allocator, transport, placer, pass or element-wise fuser is a ``PluginConflictError`` naming both, unless one
passes ``override=True`` (``framework/registry.py``). ``TENSORWEAVE_DISABLE_PLUGINS=cpu,opencl``
(or ``*``) skips entry points by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata as md
import logging
import os
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pluggy

from tensorweave.framework import errors
from tensorweave.framework.kernel_registry import KernelRegistry
from tensorweave.framework.op_def import OpRegistry
from tensorweave.framework.registry import CORE, Registry

if TYPE_CHECKING:  # the hookspecs' parameter and return types
    from tensorweave.runtime.device import DeviceFactory

PROJECT = "tensorweave"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

log = logging.getLogger(__name__)

# The core's own plugins, registered before any entry point, through the same hooks.
CORE_PLUGINS = ("tensorweave.builtin.ops", "tensorweave.builtin.kernels", "tensorweave.builtin.passes",
                "tensorweave.builtin.placer", "tensorweave.builtin.transport")


class AllocatorRegistry(Registry):
    """Named allocators per device type: ``register("CPU", "pool", factory)``, where
    ``factory(device) -> Allocator``; chosen with ``ConfigProto(allocator={"CPU": "pool"})``."""

    def register(self, device_type, name=None, factory=None, override: bool = False):
        return self.claim((str(device_type).upper(), name), factory, override)

    def for_device(self, device_type: str) -> dict:
        return {n: f for (dt, n), f in self.items() if dt == device_type.upper()}


class NamedRegistry(Registry):
    """Transports and placers by name: ``register(name, obj)``."""

    def register(self, name, obj, override: bool = False):
        return self.claim(name, obj, override)


class PassRegistry(Registry):
    """Graph passes by name: ``register(name, fn, order=100, stage="pre_placement")``.

    ``fn(plan)`` runs on every new execution plan, at its ``stage``: ``"prune"`` (choose the
    user's nodes the plan needs), ``"pre_placement"`` (rewrite the plan's private graph:
    CSE, constant folding), ``"post_placement"`` (``plan.device_of`` is known: edges across
    devices) or ``"post_partition"`` (``plan.graph_parts``: Send/Recv transfers). Within a
    stage, passes run in increasing ``order``, then by name.
    """

    STAGES = ("prune", "pre_placement", "post_placement", "post_partition")

    def register(self, name, fn=None, order: int = 100, override: bool = False, stage: str = "pre_placement"):
        if stage not in self.STAGES:
            raise errors.InvalidArgumentError(
                f"graph pass {name!r} from {self.source}: unknown stage {stage!r}; stages are {list(self.STAGES)}")
        return self.claim(name, (order, fn, stage), override)

    def ordered(self, stage: str | None = None):
        """[(name, fn)] of one stage (all stages, in stage order, when None), in run order."""
        rank = {s: i for i, s in enumerate(self.STAGES)}
        items = [(name, v) for name, v in self.items() if stage is None or v[2] == stage]
        items.sort(key=lambda kv: (rank[kv[1][2]], kv[1][0], kv[0]))
        return [(name, v[1]) for name, v in items]

    def stage_of(self, name) -> str:
        return self.get(name)[2]


class FuserRegistry(Registry):
    """Element-wise fusers by device type: ``register("CPU", fuser)``.

    The element-wise fusion pass (``passes/fusion.py``) fuses only on devices whose type has
    a fuser. A fuser is any object with two methods:

    - ``supports(op_type, operand_types, result_type, num_elements) -> bool``: whether a
      fused kernel can compute this op (one of ``ops.fusion_ops.FUSABLE``) with these dtypes
      (``DType``s) exactly as the device's own kernel does; ``num_elements`` is the static
      element count of the op's output, or None when not known;
    - ``compile(expr, ctx) -> compute``: a kernel computing ``expr`` (a
      ``fusion_ops.FusedExpression``) for the ``_FusedElementwise`` node of ``ctx`` (a
      ``KernelContext``): ``compute(*inputs) -> output``, inputs broadcast as NumPy does. It
      may return None (then the node runs the device's own kernels one step at a time).

    and optionally ``compile_after`` (an int): how many times a fused node runs step by step,
    on the device's own kernels, before its next run compiles it (a fuser whose compiler is
    slow may wait for nodes that run often; default ``passes.fusion.COMPILE_AFTER``).
    """

    def register(self, device_type, fuser=None, override: bool = False):
        return self.claim(str(device_type).upper(), fuser, override)

    def for_device(self, device_type: str):
        """The fuser of ``device_type``, or None."""
        key = str(device_type).upper()
        return self.get(key) if key in self else None


class Hookspecs:
    """The hooks a tensorweave plugin may implement.

    Each registration hook receives a registry to fill and is called once per plugin, when
    plugins load (first use of ``registry()``). A plugin implements any subset, as module-level
    functions (or methods of a registered object) marked with ``@hookimpl`` and named exactly
    as below; a function named ``tensorweave_*`` that matches no hook is an error naming the
    plugin. ``wrapper``/``hookwrapper``/``tryfirst``/``trylast`` do not apply: what a plugin
    registers is attributed to it alone, and conflicts are resolved by ``override=True``,
    never by call order.
    """

    @hookspec
    def tensorweave_register_ops(self, registry: OpRegistry) -> None:
        """Declare ops (TensorFlow's ``REGISTER_OP`` notation) and their gradients.

        Example::

            @hookimpl
            def tensorweave_register_ops(registry):
                registry.op("TimesThree", inputs=["x: T"], outputs=["y: T"],
                            attrs=["T: {float32, float64}"],
                            shape_fn=lambda op: [op.inputs[0].shape])
                registry.gradient("TimesThree")(lambda op, grad: [grad * 3.0])

        See :class:`tensorweave.framework.op_def.OpRegistry` for the argument and attr syntax.
        """

    @hookspec
    def tensorweave_register_kernels(self, registry: KernelRegistry) -> None:
        """Register kernels: (op, device type, dtype constraints) -> implementation.

        Example::

            @hookimpl
            def tensorweave_register_kernels(registry):
                registry.register("TimesThree", "CPU", lambda x: x * 3)   # a plain function

                @registry.kernel("MatMul", "MYDEV", constraints={"T": ["float32"]})
                def matmul(ctx):                    # a factory, called once per node per plan
                    ta = ctx.attrs["transpose_a"]
                    return lambda a, b: my_gemm(a, b, ta)

        ``is_async=True`` kernels get ``compute(step, done, *inputs)``; ``host_memory=("shape",)``
        names inputs taken as host arrays on an accelerator; device type ``"*"`` means every
        device. See :class:`tensorweave.framework.kernel_registry.KernelRegistry`.
        """

    @hookspec
    def tensorweave_device_factories(self) -> list[DeviceFactory]:
        """Return the device factories this plugin provides, one per device type.

        Example::

            @hookimpl
            def tensorweave_device_factories():
                return [MyDeviceFactory()]   # device_type = "MYDEV"

        A factory enumerates the physical devices and creates ``Device`` objects with full
        names such as ``/job:localhost/replica:0/task:0/device:MYDEV:0``
        (:class:`tensorweave.runtime.device.DeviceFactory`). Return ``[]`` when the machine has
        none (and say why in ``tensorweave_plugin_status``).
        """

    @hookspec
    def tensorweave_register_allocators(self, registry: AllocatorRegistry) -> None:
        """Register named allocators for a device type, selectable in the session config.

        Example::

            @hookimpl
            def tensorweave_register_allocators(registry):
                registry.register("MYDEV", "default", MyAllocator.for_device)
                registry.register("MYDEV", "pool", MyPoolAllocator.for_device)

        ``tw.ConfigProto(allocator={"MYDEV": "pool"})`` then picks the pool.
        """

    @hookspec
    def tensorweave_register_transports(self, registry: NamedRegistry) -> None:
        """Register named transports: the bytes layer of the worker service between processes.

        Example::

            @hookimpl
            def tensorweave_register_transports(registry):
                registry.register("mynet", MyNetTransport)

        A transport implements :class:`tensorweave.distributed.transport.Transport`; a cluster
        config names it (``transport = "mynet"``) and target strings use it (``mynet://host:port``).
        """

    @hookspec
    def tensorweave_register_placers(self, registry: NamedRegistry) -> None:
        """Register placement algorithms; ``ConfigProto(placer="name")`` picks one.

        Example::

            @hookimpl
            def tensorweave_register_placers(registry):
                registry.register("round_robin", RoundRobinPlacer())

        A placer has ``place(nodes, devices, kernels, config, cost_model=..., feeds=...)`` returning
        ``{node: device}``; the core registers the whitepaper's greedy placer as ``"default"``.
        """

    @hookspec
    def tensorweave_register_passes(self, registry: PassRegistry) -> None:
        """Register graph rewrite passes, run on every new execution plan at their stage.

        Example::

            @hookimpl
            def tensorweave_register_passes(registry):
                registry.register("fold_my_ops", fold_my_ops, order=50, stage="pre_placement")

        ``fn(plan)`` rewrites the plan's private graph; stages are ``"prune"``,
        ``"pre_placement"``, ``"post_placement"`` and ``"post_partition"`` (:class:`PassRegistry`,
        docs/plugins.md).
        """

    @hookspec
    def tensorweave_register_fusers(self, registry: FuserRegistry) -> None:
        """Say how this plugin's device type fuses element-wise ops (docs/optimizations.md).

        Example::

            @hookimpl
            def tensorweave_register_fusers(registry):
                if my_compiler_available():
                    registry.register("MYDEV", MyFuser())

        The element-wise fusion pass replaces groups of element-wise nodes placed on a device
        of that type by one ``_FusedElementwise`` node, which the fuser compiles
        (:class:`FuserRegistry` says what a fuser provides). Register nothing (or nothing for
        that type) and the pass leaves the device's nodes alone.
        """

    @hookspec
    def tensorweave_plugin_status(self) -> str | None:
        """A one-line status shown by ``tensorweave plugins``, or None.

        Example::

            @hookimpl
            def tensorweave_plugin_status():
                return None if driver_found() else "no CUDA driver: libcuda.so.1 not found"
        """

    @hookspec
    def tensorweave_doctor(self) -> list[tuple[str, str]]:
        """Lines for ``tensorweave doctor`` about what this plugin needs from the machine.

        Example::

            @hookimpl
            def tensorweave_doctor():
                return [("OpenCL", "ICDs in /etc/OpenCL/vendors: pocl.icd; pyopencl 2024.2"),
                        ("hint", "no OpenCL ICD: `apt-get install pocl-opencl-icd` ...")]

        Each entry is (label, text); the label ``"hint"`` marks advice printed after the table.
        Never change the machine here: report only.
        """


# hook name -> the Registries attribute its registry argument is
_REGISTRATION_HOOKS = {
    "tensorweave_register_ops": "ops",
    "tensorweave_register_kernels": "kernels",
    "tensorweave_register_allocators": "allocators",
    "tensorweave_register_transports": "transports",
    "tensorweave_register_placers": "placers",
    "tensorweave_register_passes": "passes",
    "tensorweave_register_fusers": "fusers",
}
_HOOK_NAMES = [name for name in vars(Hookspecs) if name.startswith(f"{PROJECT}_")]


@dataclasses.dataclass
class PluginInfo:
    """What the loader knows about one plugin (shown by ``tensorweave plugins``)."""

    name: str
    distribution: str
    version: str
    module: str
    status: str = "loaded"          # loaded | failed (import or registration) | invalid (hooks) | disabled
    error: str | None = None
    note: str | None = None
    registered: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".strip()


class Registries:
    """Everything plugins registered, by kind; built once per process by ``registry()``."""

    def __init__(self):
        self.ops = OpRegistry()
        self.kernels = KernelRegistry()
        self.device_factories = Registry("device type")
        self.allocators = AllocatorRegistry("allocator")
        self.transports = NamedRegistry("transport")
        self.placers = NamedRegistry("placer")
        self.passes = PassRegistry("graph pass")
        self.fusers = FuserRegistry("element-wise fuser for device type")
        self.plugins: list[PluginInfo] = []

    def _tables(self) -> list[Registry]:
        return [self.ops, self.kernels, self.device_factories, self.allocators, self.transports,
                self.placers, self.passes, self.fusers]

    def _sizes(self) -> dict[str, int]:
        return {
            "ops": len(self.ops), "kernels": len(self.kernels), "devices": len(self.device_factories),
            "allocators": len(self.allocators), "transports": len(self.transports),
            "placers": len(self.placers), "passes": len(self.passes), "fusers": len(self.fusers),
        }

    @contextmanager
    def registering_as(self, source: str) -> Iterator[None]:
        """Attribute whatever is registered inside to ``source`` (a distribution label)."""
        for table in self._tables():
            table.source = source
        try:
            yield
        finally:
            for table in self._tables():
                table.source = CORE

    def run_hooks(self, pm: pluggy.PluginManager, plugin, info: PluginInfo) -> None:
        """Call one plugin's hooks, through pluggy, recording what it adds under its name."""
        before = self._sizes()
        others = [p for p in pm.get_plugins() if p is not plugin]

        def call(hook_name, **kwargs):
            return pm.subset_hook_caller(hook_name, others)(**kwargs)

        try:
            with self.registering_as(info.label):
                for hook_name, attr in _REGISTRATION_HOOKS.items():
                    call(hook_name, registry=getattr(self, attr))
                for factories in call("tensorweave_device_factories"):
                    for factory in factories or ():
                        self.device_factories.claim(factory.device_type.upper(), factory)
            notes = [n for n in call("tensorweave_plugin_status") if n]
            info.note = notes[0] if notes else None
        except errors.PluginConflictError:
            raise
        except Exception as e:  # a broken plugin must not take the others down
            info.status = "failed"
            info.error = f"{type(e).__name__}: {e}"
            log.warning("tensorweave plugin %r (%s) failed while registering: %s", info.name, info.label, info.error)
            log.debug("traceback of plugin %r", info.name, exc_info=True)
        after = self._sizes()
        info.registered = {k: after[k] - before[k] for k in after if after[k] != before[k]}


class _PluginManager(pluggy.PluginManager):
    def parse_hookimpl_opts(self, plugin, name: str):
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(f"{PROJECT}_") and callable(getattr(plugin, name, None)):
            # As pytest does: a function named like a hook is an implementation even without the
            # marker, so a misspelled one is reported (check_pending) instead of silently ignored.
            opts = {}
        return opts


def _hook_problem(pm: pluggy.PluginManager, plugin) -> str | None:
    """Why ``plugin``'s hook implementations cannot be used, or None."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        bad = next((hc.name for hc in pm.get_hookcallers(plugin) or () if not hc.has_spec()), None)
        if bad is None:
            return str(e)
        near = difflib.get_close_matches(bad, _HOOK_NAMES, n=1)
        return f"unknown hook {bad!r}" + (f" (did you mean {near[0]!r}?)" if near else "") + \
            f"; tensorweave's hooks are: {', '.join(_HOOK_NAMES)}"
    for hc in pm.get_hookcallers(plugin) or ():
        for impl in hc.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            for opt in ("wrapper", "hookwrapper", "tryfirst", "trylast"):
                if getattr(impl, opt, False):
                    return (f"hook {hc.name!r} is marked {opt}=True; tensorweave calls each plugin's "
                            "hooks once, on their own, so wrappers and call order do not apply "
                            "(use override=True to replace another plugin's registration)")
    return None


def _add(pm: pluggy.PluginManager, reg: Registries, plugin, info: PluginInfo) -> PluginInfo:
    """Register ``plugin`` with pluggy, check its hooks, and run them into ``reg``."""
    try:
        pm.register(plugin, name=info.name)
    except (pluggy.PluginValidationError, ValueError) as e:  # bad hook arguments, or a name taken
        return _reject(reg, info, "invalid", str(e))
    problem = _hook_problem(pm, plugin)
    if problem is not None:
        pm.unregister(plugin)
        return _reject(reg, info, "invalid", f"{info.name} ({info.label}): {problem}")
    reg.run_hooks(pm, plugin, info)
    reg.plugins.append(info)
    return info


def _reject(reg: Registries, info: PluginInfo, status: str, error: str) -> PluginInfo:
    info.status, info.error = status, error
    log.warning("tensorweave plugin %r (%s) is not loaded: %s", info.name, info.label, error)
    reg.plugins.append(info)
    return info


_lock = threading.RLock()
_registries: Registries | None = None
_pm: pluggy.PluginManager | None = None
_load_error: Exception | None = None


def _dist_of(ep) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is not None:
        return dist.metadata["Name"], dist.version
    return "?", ""


def _disabled() -> set[str]:
    raw = os.environ.get("TENSORWEAVE_DISABLE_PLUGINS", "")
    return {x.strip() for x in raw.split(",") if x.strip()}


def registry() -> Registries:
    """The process-wide registries, loading all plugins on first call."""
    global _registries, _pm, _load_error
    reg = _registries
    if reg is not None:
        return reg
    with _lock:
        if _registries is not None:
            return _registries
        if _load_error is not None:
            raise _load_error
        try:
            _registries, _pm = _load()
        except errors.PluginConflictError as e:
            _load_error = e
            raise
        return _registries


def _load() -> tuple[Registries, pluggy.PluginManager]:
    pm = _PluginManager(PROJECT)
    pm.add_hookspecs(Hookspecs)
    reg = Registries()
    core_version = _core_version()
    for module_name in CORE_PLUGINS:
        module = importlib.import_module(module_name)
        _add(pm, reg, module, PluginInfo(module_name.replace(".builtin.", "."), PROJECT,
                                         core_version, module_name))

    disabled = _disabled()
    for ep in sorted(md.entry_points(group=PROJECT), key=lambda e: e.name):
        dist, version = _dist_of(ep)
        info = PluginInfo(ep.name, dist, version, ep.value)
        if "*" in disabled or ep.name in disabled:
            info.status = "disabled"
            info.note = "disabled by TENSORWEAVE_DISABLE_PLUGINS"
            reg.plugins.append(info)
            continue
        try:
            module = ep.load()
        except Exception as e:  # report which plugin and why, keep loading the rest
            info.status = "failed"
            info.error = f"{type(e).__name__}: {e}"
            info.note = traceback.format_exception_only(type(e), e)[-1].strip()
            log.warning("tensorweave plugin %r (%s) failed to load: %s", ep.name, dist, info.error)
            log.debug("traceback of plugin %r", ep.name, exc_info=True)
            reg.plugins.append(info)
            continue
        _add(pm, reg, module, info)
    return reg, pm


def each_plugin(hook_name: str, **kwargs) -> list[tuple[PluginInfo, list]]:
    """Call a hook on every loaded plugin separately: ``[(plugin info, its results)]``, in load
    order (``tensorweave doctor`` asks each plugin for its lines this way)."""
    registry()
    with _lock:
        plugins = {pm_name: p for pm_name, p in _pm.list_name_plugin()}
        out = []
        for info in _registries.plugins:
            plugin = plugins.get(info.name)
            if info.status != "loaded" or plugin is None:
                continue
            others = [p for p in plugins.values() if p is not plugin]
            out.append((info, _pm.subset_hook_caller(hook_name, others)(**kwargs)))
        return out


def register_plugin(plugin, name: str | None = None, distribution: str | None = None) -> PluginInfo:
    """Register a plugin object (module or instance with hookimpls) at run time.

    Useful for tests and notebooks; installed distributions are found by entry points.
    """
    reg = registry()
    name = name or getattr(plugin, "__name__", type(plugin).__name__)
    with _lock:
        info = PluginInfo(name, distribution or name, "", getattr(plugin, "__name__", name))
        return _add(_pm, reg, plugin, info)


def _core_version() -> str:
    try:
        return md.version(PROJECT)
    except md.PackageNotFoundError:
        return "0+unknown"


def _reset_for_tests() -> None:
    """Forget loaded plugins so the next ``registry()`` loads again (test helper)."""
    global _registries, _pm, _load_error
    with _lock:
        _registries = _pm = _load_error = None
