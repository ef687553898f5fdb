"""``tw.train``: optimizers, global step (and later Saver, checkpoints)."""
