"""Random ops: uniform, normal, truncated normal, shuffle, with graph- and op-level seeds."""

from __future__ import annotations

__all__: list[str] = []


def register_ops(reg):
    pass
