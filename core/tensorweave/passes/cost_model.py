"""The cost model (whitepaper 3.2.1): estimated compute time and output size per node and
device type, from static heuristics, kernel-supplied estimates, and measurements of earlier
runs fed back from traced steps."""

from __future__ import annotations


class CostModel:
    """Per-session cost model. ``record(step_stats)`` feeds measured node times back."""

    def __init__(self):
        self.measured: dict = {}

    def record(self, step_stats) -> None:
        for s in step_stats:
            self.measured[(s["node"], s["device"])] = s["end"] - s["start"]
