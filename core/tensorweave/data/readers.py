"""File sources of ``tw.data``: ``TextLineDataset``, ``TFRecordDataset``,
``FixedLengthRecordDataset`` (TF 1.4+). Each is a Dataset of scalar strings read from a
file name, a vector of them or a Dataset of them, one file after the other; the files are opened when an
iterator reaches them (a missing file is a ``NotFoundError`` then, naming it)."""

from __future__ import annotations

from tensorweave.data.dataset import Dataset
from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor, convert_to_tensor
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.ops import dataset_ops

__all__ = ["TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset"]


def _file_dataset(filenames, what, read_one, cycle_length=None):
    """``filenames`` given as a Dataset of file names (TF 1.5+): each file read by
    ``read_one(name)``, one after the other (or ``cycle_length`` at once, interleaved);
    None when ``filenames`` is not a Dataset."""
    if not isinstance(filenames, Dataset):
        return None
    if filenames.output_types is not dtypes_mod.string or filenames.output_shapes.ndims != 0:
        raise errors.InvalidArgumentError(
            f"{what}: a Dataset of file names must have scalar string elements, got types "
            f"{filenames.output_types} and shapes {filenames.output_shapes}")
    if cycle_length is not None and (isinstance(cycle_length, Tensor) or cycle_length > 1):
        return filenames.interleave(read_one, cycle_length=cycle_length)
    return filenames.flat_map(read_one)


def _filenames(filenames):
    if isinstance(filenames, Tensor):
        return filenames
    return convert_to_tensor(filenames, dtype=dtypes_mod.string, name="filenames")


def _string(v, name):
    return v if isinstance(v, Tensor) else convert_to_tensor(v or "", dtype=dtypes_mod.string, name=name)


def _int64(v, default, name):
    if isinstance(v, Tensor):
        return v
    return convert_to_tensor(default if v is None else v, dtype=dtypes_mod.int64, name=name)


def _compression(value):
    """TF accepts None, "", "ZLIB", "GZIP"."""
    return _string("" if value is None else value, "compression_type")


class TextLineDataset(Dataset):
    """The lines of text files, without their ``\\n`` or ``\\r\\n`` (``compression_type``
    "GZIP"/"ZLIB" for compressed files)."""

    def __init__(self, filenames, compression_type=None, buffer_size=None):
        ds = _file_dataset(filenames, "TextLineDataset",
                           lambda f: TextLineDataset(f, compression_type, buffer_size))
        if ds is not None:
            super().__init__(ds._variant, dtypes_mod.string, TensorShape([]))
            return
        v = dataset_ops.dataset_op("TextLineDataset", [_filenames(filenames), _compression(compression_type),
                                                       _int64(buffer_size, 256 * 1024, "buffer_size")],
                                   [dtypes_mod.string], [[]])
        super().__init__(v, dtypes_mod.string, TensorShape([]))


class TFRecordDataset(Dataset):
    """The records of TFRecord files (as written by ``tw.python_io.TFRecordWriter``). With
    ``num_parallel_reads`` n > 1, n files are read at once and their records interleaved one
    by one (TF's order for it, deterministic)."""

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None):
        ds = _file_dataset(filenames, "TFRecordDataset",
                           lambda f: TFRecordDataset(f, compression_type, buffer_size), num_parallel_reads)
        if ds is not None:
            super().__init__(ds._variant, dtypes_mod.string, TensorShape([]))
            return
        files = _filenames(filenames)
        if num_parallel_reads is not None and (isinstance(num_parallel_reads, Tensor) or num_parallel_reads > 1):
            one = Dataset.from_tensor_slices(files if files.shape.ndims != 0 else [files])
            ds = one.interleave(lambda f: TFRecordDataset(f, compression_type, buffer_size),
                                cycle_length=num_parallel_reads)
            super().__init__(ds._variant, dtypes_mod.string, TensorShape([]))
            return
        v = dataset_ops.dataset_op("TFRecordDataset", [files, _compression(compression_type),
                                                       _int64(buffer_size, 256 * 1024, "buffer_size")],
                                   [dtypes_mod.string], [[]])
        super().__init__(v, dtypes_mod.string, TensorShape([]))


class FixedLengthRecordDataset(Dataset):
    """Records of ``record_bytes`` bytes from binary files, after ``header_bytes`` and before
    ``footer_bytes``; a file whose body is not a whole number of records is a
    ``DataLossError``."""

    def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None, buffer_size=None):
        ds = _file_dataset(filenames, "FixedLengthRecordDataset", lambda f: FixedLengthRecordDataset(
            f, record_bytes, header_bytes, footer_bytes, buffer_size))
        if ds is not None:
            super().__init__(ds._variant, dtypes_mod.string, TensorShape([]))
            return
        v = dataset_ops.dataset_op("FixedLengthRecordDataset", [
            _filenames(filenames), _int64(header_bytes, 0, "header_bytes"), _int64(record_bytes, 0, "record_bytes"),
            _int64(footer_bytes, 0, "footer_bytes"), _int64(buffer_size, 256 * 1024, "buffer_size")],
            [dtypes_mod.string], [[]])
        super().__init__(v, dtypes_mod.string, TensorShape([]))
