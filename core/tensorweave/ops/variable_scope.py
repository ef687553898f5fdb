"""``tw.get_variable`` and ``tw.variable_scope``."""

from __future__ import annotations

__all__: list[str] = []
