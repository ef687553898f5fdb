"""Entry point of the UCX transport plugin. A skeleton: it registers no transport and says so.

ucxx is looked for without importing it (importing initialises UCX), because this probe runs
whenever a process loads its plugins.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util

from tensorweave.plugins import hookimpl


def ucxx_version() -> str | None:
    for dist in ("ucxx-cu12", "ucxx-cu13", "ucxx-cu11", "ucxx"):
        try:
            return f"{dist} {md.version(dist)}"
        except md.PackageNotFoundError:
            continue
    if importlib.util.find_spec("ucxx") is not None:
        return "ucxx"
    return None


def status() -> str:
    v = ucxx_version()
    return ("skeleton: UCX transport not implemented yet, registers no transport "
            f"({v + ' installed' if v else 'ucxx not installed'})")


@hookimpl
def tensorweave_plugin_status():
    return status()
