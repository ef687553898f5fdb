"""Resource handles: how a tensor names state kept in a process's containers.

A queue, reader or accumulator op outputs a handle — a 0-d object array holding
``b"<container>:<name>"`` — and the ops that use the resource look it up in the session's (or
worker's) resources. A handle is plain data, never a Python object, so graphs that carry
handles can be shipped between processes (the distributed runtime) without pickling.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors


def make_handle(container: str, name: str, kind: str = "resource") -> np.ndarray:
    """The handle value of resource ``name`` in ``container``."""
    if ":" in container:
        raise errors.InvalidArgumentError(f"{kind} container name {container!r} must not contain ':'")
    return np.array(f"{container}:{name}".encode(), dtype=object)


def parse_handle(handle, kind: str = "resource") -> tuple[str, str]:
    """(container, name) of a handle value (bytes, str or a 0-d array of either)."""
    v = handle.item() if isinstance(handle, np.ndarray) else handle
    if isinstance(v, bytes):
        v = v.decode()
    if not isinstance(v, str) or ":" not in v:
        raise errors.InvalidArgumentError(f"{handle!r} is not a {kind} handle (expected b'<container>:<name>')")
    container, _, name = v.partition(":")
    return container, name


def lookup(resources, handle, cls, kind: str):
    """The ``cls`` instance a handle names in ``resources`` (a ``SessionResources``)."""
    container, name = parse_handle(handle, kind)
    try:
        r = resources.manager_for(container).lookup(container, name)
    except errors.NotFoundError:
        raise errors.NotFoundError(
            f"{kind} {name!r} not found in container {container!r}: its {kind} op has not run in this "
            "session (or the container was reset)") from None
    if not isinstance(r, cls):
        raise errors.InvalidArgumentError(f"resource {name!r} in container {container!r} is not a {kind}")
    return r
