"""Built-in plugin: the in-process transport (``inproc``): every request still goes through
the wire format, so tests exercise everything but the network."""

from __future__ import annotations

from tensorweave.distributed.transport import InProcTransport
from tensorweave.plugins import hookimpl


@hookimpl
def tensorweave_register_transports(registry):
    registry.register("inproc", InProcTransport)
