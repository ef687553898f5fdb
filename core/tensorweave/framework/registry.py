"""The one rule every plugin registration follows: who registered what, and conflicts.

Ops, gradients, kernels, device types, allocators, transports, placers and graph passes are
all kept in ``Registry`` tables. Each entry remembers the distribution that registered it
(``registry.source``, set by the plugin loader around each plugin's hook call), and a key
registered twice is a ``PluginConflictError`` naming both distributions — unless one of them
passed ``override=True``. An override wins whatever the load order: a plain registration
that arrives after it leaves the override in place.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from tensorweave.framework import errors

CORE = "tensorweave"  # the source of what the core itself registers


class Registry:
    """A key -> entry table that remembers each entry's distribution (see the module docstring).

    ``kind`` names the entries in messages ("op", "transport", ...); ``describe(key)`` turns
    a key into the words after it (default: ``repr(key)``).
    """

    def __init__(self, kind: str):
        self.kind = kind
        self.source = CORE
        self._entries: dict[Hashable, Any] = {}
        self._sources: dict[Hashable, str] = {}
        self._overrides: set = set()

    def describe(self, key) -> str:
        return repr(key)

    def claim(self, key, entry, override: bool = False):
        """Put ``entry`` under ``key`` for ``self.source``; return the entry in place after it
        (an earlier override stays). Raises PluginConflictError for a second plain claim."""
        if key in self._overrides and not override:
            return self._entries[key]
        if key in self._entries and not override:
            raise errors.PluginConflictError(
                f"{self.kind} {self.describe(key)} is registered twice: by {self._sources[key]} and by "
                f"{self.source}; pass override=True in the plugin that means to replace it")
        if override:
            self._overrides.add(key)
        self._entries[key] = entry
        self._sources[key] = self.source
        return entry

    def get(self, key):
        try:
            return self._entries[key]
        except KeyError:
            known = ", ".join(map(str, sorted(self._entries, key=str))) or "none"
            raise errors.NotFoundError(
                f"no {self.kind} named {key!r} is installed (known: {known}); see `tensorweave plugins`"
            ) from None

    __getitem__ = get

    def source_of(self, key) -> str:
        """The distribution that registered ``key``."""
        return self._sources[key]

    def __contains__(self, key) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def items(self):
        return self._entries.items()

    def names(self) -> list:
        return list(self._entries)
