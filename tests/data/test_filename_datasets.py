"""File sources given a Dataset of file names (TF 1.5+): each file read in turn, or several
at once with num_parallel_reads; a Dataset of anything but scalar strings is refused."""

import pytest

import tensorweave as tw
from tensorweave import errors
from tensorweave.testing.datasets import elements


def test_text_tfrecord_and_fixed_length_datasets_read_a_dataset_of_names(tmp_path):
    for i in range(3):
        (tmp_path / f"t{i}.txt").write_text(f"a{i}\nb{i}\n")
        with tw.python_io.TFRecordWriter(str(tmp_path / f"r{i}.tfrecord")) as w:
            w.write(f"rec{i}")
        (tmp_path / f"f{i}.bin").write_bytes(bytes([i, i, i, i]))
    files = lambda pattern: tw.data.Dataset.list_files(str(tmp_path / pattern), shuffle=False)  # noqa: E731
    assert elements(tw.data.TextLineDataset(files("t*.txt"))) == [b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"]
    assert elements(tw.data.TFRecordDataset(files("r*.tfrecord"))) == [b"rec0", b"rec1", b"rec2"]
    assert sorted(elements(tw.data.TFRecordDataset(files("r*.tfrecord"), num_parallel_reads=2))) == [
        b"rec0", b"rec1", b"rec2"]
    assert elements(tw.data.FixedLengthRecordDataset(files("f*.bin"), record_bytes=2)) == [
        b"\x00\x00", b"\x00\x00", b"\x01\x01", b"\x01\x01", b"\x02\x02", b"\x02\x02"]


def test_a_dataset_of_anything_but_scalar_strings_is_refused():
    with pytest.raises(errors.InvalidArgumentError, match="TFRecordDataset: a Dataset of file names must have scalar string"):
        tw.data.TFRecordDataset(tw.data.Dataset.range(3))
    with pytest.raises(errors.InvalidArgumentError, match="TextLineDataset"):
        tw.data.TextLineDataset(tw.data.Dataset.from_tensors(["a", "b"]))
