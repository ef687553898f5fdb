"""``tw.distribute``: TensorFlow's ``tf.distribute`` names that tensorweave implements — so far
``tw.distribute.cluster_resolver`` (docs/distributed.md, "Cluster managers")."""

from tensorweave.distribute import cluster_resolver

__all__ = ["cluster_resolver"]
