"""``tw.contrib.learn.datasets.mnist``: TF1's MNIST reader, for files you already have.

``read_data_sets(train_dir)`` reads the four standard MNIST files (IDX format, gzipped or
not) from ``train_dir`` with NumPy and returns ``Datasets(train, validation, test)`` of
``DataSet``s with TF1's ``next_batch``. It never downloads: when a file is missing it raises
``tw.errors.NotFoundError`` naming the files, where to get them and where to put them.
``fake_data=True`` gives TF1's fake data sets (for tests), with no files.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

from tensorweave.contrib.learn.datasets.base import Datasets
from tensorweave.framework import dtypes, errors

__all__ = ["DataSet", "read_data_sets", "extract_images", "extract_labels", "dense_to_one_hot", "load_mnist",
           "FILES", "SOURCE_URL"]

SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"
FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)


def _read_idx(f, magic_expected, what, path):
    header = np.frombuffer(f.read(4), dtype=">u4")
    if header.size != 1 or int(header[0]) != magic_expected:
        raise errors.InvalidArgumentError(
            f"invalid magic number {int(header[0]) if header.size else None} in MNIST {what} file {path} "
            f"(expected {magic_expected}); is it an uncorrupted IDX file?")
    ndims = 3 if magic_expected == 2051 else 1
    dims = [int(d) for d in np.frombuffer(f.read(4 * ndims), dtype=">u4")]
    data = np.frombuffer(f.read(), dtype=np.uint8)
    if data.size != int(np.prod(dims)):
        raise errors.DataLossError(f"MNIST {what} file {path} is truncated: expected {int(np.prod(dims))} bytes of "
                                   f"data for shape {dims}, got {data.size}")
    return data.reshape(dims)


def _open(path):
    with open(path, "rb") as raw:
        head = raw.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def extract_images(f):
    """Images from an IDX image file object (or path): uint8 ``[n, rows, cols, 1]``."""
    path = getattr(f, "name", f)
    if isinstance(f, str | os.PathLike):
        with _open(f) as fh:
            return _read_idx(fh, 2051, "image", path)[..., None]
    return _read_idx(f, 2051, "image", path)[..., None]


def extract_labels(f, one_hot=False, num_classes=10):
    """Labels from an IDX label file object (or path): uint8 ``[n]``, or one-hot rows."""
    path = getattr(f, "name", f)
    if isinstance(f, str | os.PathLike):
        with _open(f) as fh:
            labels = _read_idx(fh, 2049, "label", path)
    else:
        labels = _read_idx(f, 2049, "label", path)
    return dense_to_one_hot(labels, num_classes) if one_hot else labels


def dense_to_one_hot(labels_dense, num_classes):
    """Class indices to one-hot rows (float64, as TF1)."""
    labels_dense = np.asarray(labels_dense)
    out = np.zeros((labels_dense.shape[0], num_classes))
    out[np.arange(labels_dense.shape[0]), labels_dense.astype(np.int64)] = 1
    return out


class DataSet:
    """Images and labels with ``next_batch``: batches walk through a permutation of the
    examples, reshuffled each epoch (``shuffle=True``); a batch that crosses the end of an
    epoch takes the rest of it and the start of the next."""

    def __init__(self, images, labels, fake_data=False, one_hot=False, dtype=dtypes.float32, reshape=True,
                 seed=None):
        dtype = dtypes.as_dtype(dtype)
        if dtype not in (dtypes.uint8, dtypes.float32):
            raise TypeError(f"DataSet: invalid image dtype {dtype.name}; expected uint8 or float32")
        self._rng = np.random.RandomState(seed)
        if fake_data:
            self._num_examples = 10000
            self.one_hot = one_hot
        else:
            images, labels = np.asarray(images), np.asarray(labels)
            if images.shape[0] != labels.shape[0]:
                raise errors.InvalidArgumentError(
                    f"DataSet: images.shape {images.shape} and labels.shape {labels.shape} differ in examples")
            self._num_examples = images.shape[0]
            if reshape and images.ndim == 4:
                if images.shape[3] != 1:
                    raise errors.InvalidArgumentError(f"DataSet: reshape needs 1-channel images, got {images.shape}")
                images = images.reshape(images.shape[0], images.shape[1] * images.shape[2])
            if dtype is dtypes.float32:
                images = images.astype(np.float32) * np.float32(1.0 / 255.0)
        self._images, self._labels = images, labels
        self._epochs_completed = 0
        self._index_in_epoch = 0

    images = property(lambda self: self._images)
    labels = property(lambda self: self._labels)
    num_examples = property(lambda self: self._num_examples)
    epochs_completed = property(lambda self: self._epochs_completed)

    def _shuffle(self):
        perm = self._rng.permutation(self._num_examples)
        self._images, self._labels = self._images[perm], self._labels[perm]

    def next_batch(self, batch_size, fake_data=False, shuffle=True):
        """The next ``batch_size`` (images, labels)."""
        if fake_data:
            image = [1.0] * 784
            label = [1] + [0] * 9 if self.one_hot else 0
            return [image] * batch_size, [label] * batch_size
        if self._num_examples == 0:
            raise errors.OutOfRangeError("DataSet.next_batch: the data set is empty")
        start = self._index_in_epoch
        if self._epochs_completed == 0 and start == 0 and shuffle:
            self._shuffle()
        if start + batch_size <= self._num_examples:
            self._index_in_epoch = start + batch_size
            return self._images[start:self._index_in_epoch], self._labels[start:self._index_in_epoch]
        # Finish this epoch, then start the next one.
        self._epochs_completed += 1
        images_rest, labels_rest = self._images[start:], self._labels[start:]
        if shuffle:
            self._shuffle()
        self._index_in_epoch = batch_size - (self._num_examples - start)
        end = self._index_in_epoch
        return (np.concatenate([images_rest, self._images[:end]], axis=0),
                np.concatenate([labels_rest, self._labels[:end]], axis=0))


def _find(train_dir, name):
    for candidate in (name, name[:-3]):  # gzipped or not
        path = os.path.join(train_dir, candidate)
        if os.path.exists(path):
            return path
    return None


def read_data_sets(train_dir, fake_data=False, one_hot=False, dtype=dtypes.float32, reshape=True,
                   validation_size=5000, seed=None, source_url=SOURCE_URL):
    """MNIST from the files in ``train_dir`` (see the module docstring): the first
    ``validation_size`` training images become the validation set."""
    if fake_data:
        def fake():
            return DataSet([], [], fake_data=True, one_hot=one_hot, dtype=dtype, seed=seed)
        return Datasets(train=fake(), validation=fake(), test=fake())
    paths = {name: _find(train_dir, name) for name in FILES}
    missing = [name for name, p in paths.items() if p is None]
    if missing:
        raise errors.NotFoundError(
            f"MNIST: {', '.join(missing)} not found in {os.path.abspath(train_dir)!r}. tensorweave does not download "
            f"data: download the four files {', '.join(FILES)} (from {source_url} or http://yann.lecun.com/exdb/mnist/) "
            f"into that directory, gzipped as they come, then run again.")
    train_images = extract_images(paths[TRAIN_IMAGES])
    train_labels = extract_labels(paths[TRAIN_LABELS], one_hot=one_hot)
    test_images = extract_images(paths[TEST_IMAGES])
    test_labels = extract_labels(paths[TEST_LABELS], one_hot=one_hot)
    if not 0 <= validation_size <= len(train_images):
        raise errors.InvalidArgumentError(
            f"read_data_sets: validation size should be between 0 and {len(train_images)}, got {validation_size}")
    options = {"dtype": dtype, "reshape": reshape, "seed": seed}
    return Datasets(train=DataSet(train_images[validation_size:], train_labels[validation_size:], **options),
                    validation=DataSet(train_images[:validation_size], train_labels[:validation_size], **options),
                    test=DataSet(test_images, test_labels, **options))


def load_mnist(train_dir="MNIST-data"):
    """``read_data_sets(train_dir)``."""
    return read_data_sets(train_dir)
