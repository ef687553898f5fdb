"""Training: optimizers, Saver, checkpoint/restore. Filled in by the training issue."""
