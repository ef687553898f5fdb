"""What a workload provides: one step function per implementation, and a correctness check."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass
class Workload:
    name: str
    description: str
    tensorweave: Callable[[], object]          # one step through tensorweave
    numpy: Callable[[], object] | None         # the same step written directly in NumPy (None: not written)
    others: dict = dataclasses.field(default_factory=dict)  # e.g. {"torch": fn} when installed
    check: Callable[[], None] | None = None    # raises if tensorweave and NumPy disagree
    notes: str = ""
    close: Callable[[], None] | None = None
