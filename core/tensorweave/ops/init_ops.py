"""Weight initialisers (``tw.zeros_initializer``, ``tw.glorot_uniform_initializer``, ...)."""

from __future__ import annotations

__all__: list[str] = []
