"""``tw.contrib.learn.datasets.base``: TF1's data-set containers (``Dataset``: data and
target arrays; ``Datasets``: train, validation and test splits) and ``load_iris``."""

from __future__ import annotations

import collections

import numpy as np

__all__ = ["Dataset", "Datasets", "load_iris"]

Dataset = collections.namedtuple("Dataset", ["data", "target"])
Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])


def load_iris(data_path=None):
    """The 150 iris flowers: ``Dataset(data=float32 [150, 4], target=int [150])``, from the
    copy that ships with scikit-learn (TF1 shipped its own CSV). ``data_path`` is accepted
    for TF1 compatibility and must be None."""
    if data_path is not None:
        raise ValueError("load_iris: data_path is not supported; the data comes from scikit-learn")
    try:
        from sklearn.datasets import load_iris as sk_load_iris  # optional: only this loader needs it
    except ImportError:
        raise ImportError("tw.contrib.learn.datasets.load_iris needs scikit-learn, which ships the iris data "
                          "(pip install scikit-learn)") from None
    iris = sk_load_iris()
    return Dataset(data=np.asarray(iris.data, np.float32), target=np.asarray(iris.target, np.int64))
