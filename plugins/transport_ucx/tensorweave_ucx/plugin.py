"""Entry point of the UCX transport plugin: registers transport ``ucx`` and reports which ucxx
is installed — looked up in the installed distributions, not imported: importing ucxx loads
UCX, and this runs whenever a process loads its plugins (without ucxx, starting a ``ucx``
server or channel is an UnavailableError that says so)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util

from tensorweave.plugins import hookimpl

from .transport import UcxTransport


def ucxx_version() -> str | None:
    for dist in ("ucxx-cu12", "ucxx-cu13", "ucxx-cu11", "ucxx"):
        try:
            return f"{dist} {md.version(dist)}"
        except md.PackageNotFoundError:
            continue
    if importlib.util.find_spec("ucxx") is not None:
        return "ucxx"
    return None


@hookimpl
def tensorweave_register_transports(registry):
    registry.register(UcxTransport.name, UcxTransport)


@hookimpl
def tensorweave_plugin_status():
    v = ucxx_version()
    return ("transport ucx (" + (v if v else "ucxx NOT installed: `pip install ucxx-cu12` (Linux); "
                                 "starting a ucx server or channel fails until then") + ")")
