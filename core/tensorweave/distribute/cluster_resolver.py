"""``tw.distribute.cluster_resolver``: TF1's cluster resolvers, as
``tf.distribute.cluster_resolver.SlurmClusterResolver`` and friends. They live in
``tensorweave.distributed.resolvers``; see docs/distributed.md ("Cluster managers")."""

from tensorweave.distributed.resolvers import (
    ClusterResolver,
    KubernetesClusterResolver,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    config_from_resolver,
    expand_hostlist,
    expand_tasks_per_node,
    format_master_url,
)

__all__ = ["ClusterResolver", "KubernetesClusterResolver", "SimpleClusterResolver", "SlurmClusterResolver",
           "TFConfigClusterResolver", "config_from_resolver", "expand_hostlist", "expand_tasks_per_node",
           "format_master_url"]
