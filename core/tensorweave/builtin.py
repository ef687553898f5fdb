"""The core's own plugin: registers the built-in ops, graph passes and placer.

It goes through exactly the hooks a third-party plugin uses (like pytest's built-in
plugins), so the core has no private back door into the registries.
"""

from __future__ import annotations

import importlib

from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_ops(registry):
    from tensorweave import ops

    for family in ops.FAMILIES:
        importlib.import_module(f"tensorweave.ops.{family}").register_ops(registry)
    for module in ops.GRADIENTS:
        mod = importlib.import_module(f"tensorweave.ops.{module}")
        mod.register_ops(registry)
        mod.register_gradients(registry)


@hookimpl
def tensorweave_register_passes(registry):
    from tensorweave.passes.prune import prune_pass

    registry.register("prune", prune_pass, order=0)


@hookimpl
def tensorweave_register_placers(registry):
    from tensorweave.passes.placement import DefaultPlacer

    registry.register("default", DefaultPlacer())
