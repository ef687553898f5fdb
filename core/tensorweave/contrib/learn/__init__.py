"""``tw.contrib.learn``: only ``datasets`` (the MNIST reader and small data sets). The rest
of ``tf.contrib.learn`` (Experiment, the old Estimators) is not provided; ``tw.estimator``
is TF's replacement for it."""

from tensorweave.contrib.learn import datasets

__all__ = ["datasets"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.learn.{name} is not provided by tensorweave (only tf.contrib.learn.datasets "
                         "is; for estimators use tw.estimator)")
