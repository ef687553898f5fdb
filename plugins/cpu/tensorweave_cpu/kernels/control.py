"""NoOp."""

from __future__ import annotations

CPU = "CPU"


def _noop():
    return None


def register(reg):
    reg.register("NoOp", CPU, _noop)
