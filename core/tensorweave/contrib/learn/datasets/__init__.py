"""``tw.contrib.learn.datasets``: TF1's data-set loaders where the data can be had without
a download: ``mnist.read_data_sets`` reads the four standard MNIST files from a directory
(and says which files to download, and from where, when they are missing);
``load_iris`` uses the copy shipped with scikit-learn (if installed). ``load_dataset(name)``
dispatches to them by name."""

from tensorweave.contrib.learn.datasets import base, mnist
from tensorweave.contrib.learn.datasets.base import Dataset, Datasets, load_iris

__all__ = ["base", "mnist", "Dataset", "Datasets", "load_iris", "load_dataset", "DATASETS"]


def _load_mnist():
    raise ValueError("load_dataset('mnist') would download MNIST; read local files with "
                     "tw.contrib.learn.datasets.mnist.read_data_sets(train_dir) instead")


DATASETS = {"iris": load_iris, "mnist": _load_mnist}


def load_dataset(name, size="small", test_with_fake_data=False):
    """The data set ``name``: ``"iris"`` (from scikit-learn); ``"mnist"`` needs files (see
    ``mnist.read_data_sets``); others (``boston``, ``dbpedia``) are not provided."""
    if name not in DATASETS:
        raise ValueError(f"load_dataset: data set {name!r} is not provided by tensorweave; available: "
                         f"{sorted(DATASETS)} (boston and dbpedia would need a download)")
    return DATASETS[name]()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.learn.datasets.{name} is not provided by tensorweave (available: "
                         f"{', '.join(__all__)})")
