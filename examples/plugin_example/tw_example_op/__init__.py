"""tw_example_op: an example third-party tensorweave plugin.

It adds one op, ``ScaledSoftsign(x) = scale * x / (1 + |x|)``, with its shape function,
gradient and CPU kernel (``tw_example_op.plugin``, found through the ``tensorweave``
entry point), and a Python wrapper, :func:`scaled_softsign`.
"""

from tw_example_op.ops import scaled_softsign

__all__ = ["scaled_softsign"]
__version__ = "0.1.0"
