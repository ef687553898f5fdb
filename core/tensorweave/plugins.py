"""Plugin hooks, the hookimpl marker, and the plugin manager.

Everything tensorweave can do is registered through the hooks declared here: the core's own
ops, placers and passes come from a built-in plugin (``tensorweave.builtin``), exactly like a
third-party plugin. Distributions advertise a module in the entry-point group ``tensorweave``::

    [project.entry-points.tensorweave]
    cpu = "tensorweave_cpu.plugin"

and implement any subset of the hooks with ``@tensorweave.plugins.hookimpl``. Plugins are
loaded lazily, once per process, on first use (``registry()``). A plugin that fails to import
is reported and the others still load; two distributions registering the same op, kernel key,
device type, allocator or transport is a ``PluginConflictError`` naming both, unless the
later one passes ``override=True``. ``TENSORWEAVE_DISABLE_PLUGINS=cpu,opencl`` (or ``*``)
skips entry points by name.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import threading
import traceback
import warnings
from typing import Any

import pluggy

from tensorweave.framework import errors
from tensorweave.framework.op_def import OpRegistry

PROJECT = "tensorweave"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Hookspecs:
    """The hooks a tensorweave plugin may implement. Each receives a registry to fill."""

    @hookspec
    def tensorweave_register_ops(self, registry):
        """Declare op definitions: ``registry.op(name, inputs=[...], outputs=[...], attrs=[...],
        shape_fn=..., stateful=...)``; see :class:`tensorweave.framework.op_def.OpRegistry`.
        Gradients are attached with ``registry.gradient(op_name)(fn)`` once autodiff exists."""

    @hookspec
    def tensorweave_register_kernels(self, registry):
        """Register kernels: ``registry.register(op, device_type, fn)`` for a plain function of
        the inputs, or ``@registry.kernel(op, device_type, constraints={"T": [...]})`` on a
        factory ``factory(ctx) -> compute`` that is called once per node when a plan is built
        (``ctx`` carries the node's attrs, dtypes, static shapes and device). Async kernels pass
        ``is_async=True`` and get ``compute(step, done, *inputs)``. See
        :class:`tensorweave.runtime.kernel_registry.KernelRegistry`."""

    @hookspec
    def tensorweave_device_factories(self):
        """Return a list of :class:`tensorweave.runtime.device.DeviceFactory` objects, one per
        device type the plugin provides. A factory enumerates the physical devices and creates
        ``Device`` objects with full names such as ``/job:localhost/replica:0/task:0/device:CPU:0``."""

    @hookspec
    def tensorweave_register_allocators(self, registry):
        """Register named allocators for a device type:
        ``registry.register(device_type, name, factory)``; selectable in the session config."""

    @hookspec
    def tensorweave_register_transports(self, registry):
        """Register named transports (``grpc``, ``ucx``, ...): ``registry.register(name, transport_cls)``
        giving the server and client side of the worker service and the tensor channel."""

    @hookspec
    def tensorweave_register_placers(self, registry):
        """Register placement algorithms: ``registry.register(name, placer)``; the core registers
        its default placer under ``"default"``."""

    @hookspec
    def tensorweave_register_passes(self, registry):
        """Register graph rewrite passes: ``registry.register(name, fn, order=..., stage=...)``;
        ``fn(plan)`` runs on every new execution plan at its stage (``"prune"``,
        ``"pre_placement"`` (default), ``"post_placement"``, ``"post_partition"``), in
        increasing ``order`` within a stage. See :class:`PassRegistry` and docs/plugins.md."""

    @hookspec
    def tensorweave_plugin_status(self):
        """Return a one-line status to show in ``tensorweave plugins`` (e.g. why a GPU plugin
        registered nothing on this machine), or None."""


class NamedRegistry:
    """A name -> object table that remembers which distribution registered each entry."""

    def __init__(self, kind: str):
        self.kind = kind
        self.source = PROJECT
        self._items: dict[Any, Any] = {}
        self._sources: dict[Any, str] = {}
        self._overrides: set = set()

    def register(self, name, obj, override: bool = False):
        if name in self._overrides and not override:
            return self._items[name]  # an override loaded first keeps its place
        if override:
            self._overrides.add(name)
        if name in self._items and not override:
            raise errors.PluginConflictError(
                f"{self.kind} {name!r} is registered twice: by {self._sources[name]} and by "
                f"{self.source}; pass override=True in the plugin that means to replace it")
        self._items[name] = obj
        self._sources[name] = self.source
        return obj

    def get(self, name):
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(map(str, sorted(self._items, key=str))) or "none"
            raise errors.NotFoundError(
                f"no {self.kind} named {name!r} is installed (known: {known}); see `tensorweave plugins`"
            ) from None

    def source_of(self, name) -> str:
        return self._sources[name]

    def __contains__(self, name):
        return name in self._items

    def items(self):
        return self._items.items()

    def names(self):
        return list(self._items)

    def __len__(self):
        return len(self._items)


class AllocatorRegistry(NamedRegistry):
    def register(self, device_type, name=None, factory=None, override: bool = False):  # noqa: D401
        return super().register((str(device_type).upper(), name), factory, override)

    def for_device(self, device_type: str) -> dict:
        return {n: f for (dt, n), f in self._items.items() if dt == device_type.upper()}


class PassRegistry(NamedRegistry):
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
        return super().register(name, (order, fn, stage), override)

    def ordered(self, stage: str | None = None):
        """[(name, fn)] of one stage (all stages, in stage order, when None), in run order."""
        rank = {s: i for i, s in enumerate(self.STAGES)}
        items = [(name, v) for name, v in self._items.items() if stage is None or v[2] == stage]
        items.sort(key=lambda kv: (rank[kv[1][2]], kv[1][0], kv[0]))
        return [(name, v[1]) for name, v in items]

    def stage_of(self, name) -> str:
        return self._items[name][2]


@dataclasses.dataclass
class PluginInfo:
    """What the loader knows about one plugin (shown by ``tensorweave plugins``)."""

    name: str
    distribution: str
    version: str
    module: str
    status: str = "loaded"          # loaded | failed | disabled
    error: str | None = None
    note: str | None = None
    registered: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".strip()


class Registries:
    """Everything plugins registered, by kind; built once per process by ``registry()``."""

    def __init__(self):
        from tensorweave.runtime.kernel_registry import KernelRegistry

        self.ops = OpRegistry()
        self.kernels = KernelRegistry()
        self.device_factories: dict[str, Any] = {}
        self.device_factory_sources: dict[str, str] = {}
        self.allocators = AllocatorRegistry("allocator")
        self.transports = NamedRegistry("transport")
        self.placers = NamedRegistry("placer")
        self.passes = PassRegistry("graph pass")
        self.plugins: list[PluginInfo] = []

    def _targets(self):
        return {
            "tensorweave_register_ops": self.ops,
            "tensorweave_register_kernels": self.kernels,
            "tensorweave_register_allocators": self.allocators,
            "tensorweave_register_transports": self.transports,
            "tensorweave_register_placers": self.placers,
            "tensorweave_register_passes": self.passes,
        }

    def _sizes(self):
        return {
            "ops": len(self.ops), "kernels": len(self.kernels), "devices": len(self.device_factories),
            "allocators": len(self.allocators), "transports": len(self.transports),
            "placers": len(self.placers), "passes": len(self.passes),
        }

    def add_plugin(self, pm: pluggy.PluginManager, plugin, info: PluginInfo) -> None:
        """Run one plugin's hooks against these registries, attributing what it adds."""
        before = self._sizes()
        label = info.label
        impls = {hc.name: impl.function
                 for hc in (pm.get_hookcallers(plugin) or [])
                 for impl in hc.get_hookimpls() if impl.plugin is plugin}
        try:
            for hook_name, target in self._targets().items():
                fn = impls.get(hook_name)
                if fn is None:
                    continue
                target.source = label
                fn(registry=target)
            fn = impls.get("tensorweave_device_factories")
            for factory in (fn() if fn else None) or []:
                dt = factory.device_type.upper()
                if dt in self.device_factories:
                    raise errors.PluginConflictError(
                        f"device type {dt!r} is provided twice: by {self.device_factory_sources[dt]} "
                        f"and by {label}")
                self.device_factories[dt] = factory
                self.device_factory_sources[dt] = label
            fn = impls.get("tensorweave_plugin_status")
            info.note = fn() if fn else None
        except errors.PluginConflictError:
            raise
        except Exception as e:  # a broken plugin must not take the others down
            info.status = "failed"
            info.error = f"{type(e).__name__}: {e}"
            warnings.warn(f"tensorweave plugin {info.name!r} ({label}) failed while registering: {info.error}",
                          RuntimeWarning, stacklevel=2)
        after = self._sizes()
        info.registered = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        self.plugins.append(info)


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


def plugin_manager() -> pluggy.PluginManager:
    registry()
    return _pm


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
    from tensorweave import builtin

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(Hookspecs)
    reg = Registries()
    core_version = _core_version()
    pm.register(builtin, name=PROJECT)
    reg.add_plugin(pm, builtin, PluginInfo(PROJECT, PROJECT, core_version, builtin.__name__))

    disabled = _disabled()
    eps = sorted(md.entry_points(group=PROJECT), key=lambda e: e.name)
    for ep in eps:
        dist, version = _dist_of(ep)
        info = PluginInfo(ep.name, dist, version, ep.value)
        if "*" in disabled or ep.name in disabled:
            info.status = "disabled"
            info.note = "disabled by TENSORWEAVE_DISABLE_PLUGINS"
            reg.plugins.append(info)
            continue
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
        except Exception as e:  # report which plugin and why, keep loading the rest
            info.status = "failed"
            info.error = f"{type(e).__name__}: {e}"
            info.note = traceback.format_exception_only(type(e), e)[-1].strip()
            warnings.warn(f"tensorweave plugin {ep.name!r} ({dist}) failed to load: {info.error}",
                          RuntimeWarning, stacklevel=3)
            reg.plugins.append(info)
            continue
        reg.add_plugin(pm, module, info)
    return reg, pm


def register_plugin(plugin, name: str | None = None, distribution: str | None = None) -> PluginInfo:
    """Register a plugin object (module or instance with hookimpls) at run time.

    Useful for tests and notebooks; installed distributions are found by entry points.
    """
    reg = registry()
    name = name or getattr(plugin, "__name__", type(plugin).__name__)
    with _lock:
        _pm.register(plugin, name=name)
        info = PluginInfo(name, distribution or name, "", getattr(plugin, "__name__", name))
        reg.add_plugin(_pm, plugin, info)
    return info


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
