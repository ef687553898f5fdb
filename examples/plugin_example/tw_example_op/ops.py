"""The Python wrapper: what users call to add a ScaledSoftsign node to the graph."""

from __future__ import annotations

from tensorweave.framework.graph import apply_op


def scaled_softsign(x, scale=1.0, name=None):
    """``scale * x / (1 + |x|)``, element-wise; ``x`` is a float16/32/64 tensor (or a value
    convertible to one). ``scale`` must not be 0: that fails when the node is built."""
    return apply_op("ScaledSoftsign", [x], {"scale": float(scale)}, name=name)
