"""Entry point of the gRPC transport plugin. A skeleton: it registers no transport and says so.

grpcio is looked up in the installed distributions, not imported: importing it is slow and
this probe runs whenever a process loads its plugins.
"""

from __future__ import annotations

import importlib.metadata as md

from tensorweave.plugins import hookimpl


def grpcio_version() -> str | None:
    try:
        return md.version("grpcio")
    except md.PackageNotFoundError:
        return None


def status() -> str:
    v = grpcio_version()
    return ("skeleton: gRPC transport not implemented yet, registers no transport "
            f"({'grpcio ' + v + ' installed' if v else 'grpcio not installed'})")


@hookimpl
def tensorweave_plugin_status():
    return status()
