"""``Limits``: what one task keeps for its clients, at most (docs/distributed.md, "Limits and
hardening").

Its own module because two layers read it: the worker and the master service enforce it, and
the cluster configuration fills it from a config file's ``[limits]`` table (the field names
below are the table's keys).
"""

from __future__ import annotations

import dataclasses

# How long a RecvTensor waits for its value before giving up, and a step nothing touched is
# kept (a step's own timeout or an abort normally ends the wait much earlier).
RECV_TIMEOUT = 600.0


@dataclasses.dataclass
class Limits:
    """What one task keeps for its clients, at most. Every table is bounded: past a bound,
    entries nothing uses any more give way, and when none does the request is refused with
    ``ResourceExhaustedError`` naming the limit — a client that floods a task cannot grow its
    memory, threads or CPU without bound.
    """

    max_steps: int = 4096              # steps with state on this worker at once
    max_ended_steps: int = 4096        # steps remembered as ended or aborted (late requests fail at once)
    step_idle_seconds: float = RECV_TIMEOUT  # a step nothing touched this long is forgotten
    max_graphs: int = 1024             # registered graphs (RegisterGraph without DeregisterGraph)
    max_graph_bytes: int = 4 << 30     # their RegisterGraph messages, together
    graph_idle_seconds: float = 600.0  # a graph not run this long gives way to a new one when full
    max_sessions: int = 256            # master-service sessions (CreateSession without CloseSession)
    session_idle_seconds: float = 600.0  # a master-service session unused this long is closed


def limit_fields() -> dict[str, type]:
    """Field name -> int or float: the keys of a config's ``[limits]`` table and their types."""
    return {f.name: (int if f.type in (int, "int") else float) for f in dataclasses.fields(Limits)}
