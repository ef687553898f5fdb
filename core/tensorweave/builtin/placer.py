"""Built-in plugin: the whitepaper's greedy simulated placer, as ``"default"``."""

from __future__ import annotations

from tensorweave.passes.placement import DefaultPlacer
from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_placers(registry):
    registry.register("default", DefaultPlacer())
