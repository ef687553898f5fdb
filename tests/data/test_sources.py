"""tw.data sources against TF 1.x's documented behaviour: from_tensors, from_tensor_slices,
range, zip, concatenate, from_generator, the file datasets and list_files."""

from __future__ import annotations

import collections
import gzip
import itertools
import os
import zlib

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import data as tw_data
from tensorweave.testing.datasets import elements as values

Dataset = tw_data.Dataset


def test_from_tensors_is_one_element():
    ds = Dataset.from_tensors(([1, 2, 3], np.float64(2.5)))
    assert ds.output_types == (tw.int32, tw.float64)
    assert ds.output_shapes == (tw.TensorShape([3]), tw.TensorShape([]))
    out = values(ds)
    assert len(out) == 1
    np.testing.assert_array_equal(out[0][0], [1, 2, 3])
    assert out[0][1] == 2.5


def test_from_tensor_slices_tuple_dict_and_nested():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([b"a", b"b", b"c"], dtype=object)
    ds = Dataset.from_tensor_slices((x, {"label": [0, 1, 2], "name": y}))
    assert ds.output_types == (tw.float32, {"label": tw.int32, "name": tw.string})
    assert ds.output_shapes == (tw.TensorShape([2]), {"label": tw.TensorShape([]), "name": tw.TensorShape([])})
    assert ds.output_classes == (tw.Tensor, {"label": tw.Tensor, "name": tw.Tensor})
    out = values(ds)
    assert [o[1]["name"] for o in out] == [b"a", b"b", b"c"]
    assert [int(o[1]["label"]) for o in out] == [0, 1, 2]
    np.testing.assert_array_equal(np.stack([o[0] for o in out]), x)


def test_a_list_is_one_tensor_a_tuple_is_a_structure():
    # tf.data's rule: lists are tensors, tuples are structures.
    assert Dataset.from_tensor_slices([[1, 2], [3, 4]]).output_shapes == tw.TensorShape([2])
    assert Dataset.from_tensor_slices(([1, 2], [3, 4])).output_shapes == (tw.TensorShape([]), tw.TensorShape([]))
    assert [list(v) for v in values(Dataset.from_tensor_slices([[1, 2], [3, 4]]))] == [[1, 2], [3, 4]]


def test_namedtuple_elements_keep_their_type():
    Point = collections.namedtuple("Point", "x y")
    ds = Dataset.from_tensor_slices(Point([1, 2], [3, 4])).map(lambda p: Point(p.y, p.x))
    assert isinstance(ds.output_types, Point)
    out = values(ds)
    assert isinstance(out[0], Point) and (int(out[0].x), int(out[0].y)) == (3, 1)


@pytest.mark.parametrize("args, expected", [
    ((5,), [0, 1, 2, 3, 4]), ((2, 5), [2, 3, 4]), ((1, 5, 2), [1, 3]), ((1, 5, -1), []), ((5, 1, -2), [5, 3]),
])
def test_range_is_like_python_range(args, expected):
    ds = Dataset.range(*args)
    assert ds.output_types == tw.int64 and ds.output_shapes == tw.TensorShape([])
    assert values(ds) == expected


def test_range_with_a_fed_stop():
    n = tw.placeholder(tw.int64, [])
    ds = Dataset.range(n)
    with tw.Session() as sess:
        assert values(ds, sess, {n: 3}) == [0, 1, 2]
        assert values(ds, sess, {n: 1}) == [0]


def test_zip_stops_at_the_shortest_and_keeps_structure():
    a, b, c = Dataset.range(1, 4), Dataset.range(4, 7), Dataset.range(7, 20)
    assert values(Dataset.zip((a, b))) == [(1, 4), (2, 5), (3, 6)]
    out = values(Dataset.zip({"a": a, "nested": (b, c)}))
    assert out == [{"a": 1, "nested": (4, 7)}, {"a": 2, "nested": (5, 8)}, {"a": 3, "nested": (6, 9)}]
    assert Dataset.zip((a, (b, c))).output_types == (tw.int64, (tw.int64, tw.int64))


def test_concatenate_and_most_specific_shape():
    a = Dataset.from_tensor_slices([[1, 2], [3, 4]])
    b = Dataset.from_tensor_slices([[5, 6, 7]])
    ds = a.concatenate(b)
    assert ds.output_shapes == tw.TensorShape([None])
    assert [list(v) for v in values(ds)] == [[1, 2], [3, 4], [5, 6, 7]]


def test_from_generator_documented_example():
    def gen():
        for i in itertools.count(1):
            yield (i, [1] * i)

    ds = Dataset.from_generator(gen, (tw.int64, tw.int64), (tw.TensorShape([]), tw.TensorShape([None])))
    value = ds.make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        a, b = sess.run(value)
        assert a == 1 and list(b) == [1]
        a, b = sess.run(value)
        assert a == 2 and list(b) == [1, 1]


def test_from_generator_args_dicts_and_restart():
    calls = []

    def gen(n, prefix):
        calls.append((int(n), prefix))
        for i in range(int(n)):
            yield {"i": i, "s": prefix + str(i).encode()}

    n = tw.placeholder(tw.int32, [])
    ds = Dataset.from_generator(gen, {"i": tw.int32, "s": tw.string}, args=(n, b"x"))
    with tw.Session() as sess:
        assert values(ds, sess, {n: 2}) == [{"i": 0, "s": b"x0"}, {"i": 1, "s": b"x1"}]
        assert values(ds, sess, {n: 1}) == [{"i": 0, "s": b"x0"}]
    assert calls == [(2, b"x"), (1, b"x")]  # the generator is called again for each pass


def test_tfrecord_dataset_reads_what_tfrecordwriter_wrote(tmp_path):
    paths = []
    for f in range(2):
        p = str(tmp_path / f"data{f}.tfrecord")
        with tw.python_io.TFRecordWriter(p) as w:
            for i in range(3):
                w.write(b"file%d-record%d" % (f, i))
        paths.append(p)
    gz = str(tmp_path / "data.tfrecord.gz")
    with tw.python_io.TFRecordWriter(gz, tw.python_io.TFRecordOptions("GZIP")) as w:
        w.write(b"compressed")
    assert values(tw_data.TFRecordDataset(paths)) == [b"file%d-record%d" % (f, i) for f in range(2) for i in range(3)]
    assert values(tw_data.TFRecordDataset(gz, compression_type="GZIP")) == [b"compressed"]
    # file names may come from a tensor fed at initialisation
    names = tw.placeholder(tw.string, [None])
    ds = tw_data.TFRecordDataset(names)
    assert values(ds, feed={names: paths[1:]}) == [b"file1-record%d" % i for i in range(3)]


def test_text_line_dataset_strips_line_ends(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"first\nsecond\r\n\nlast")
    q = tmp_path / "b.txt.gz"
    q.write_bytes(gzip.compress(b"g1\ng2\n"))
    z = tmp_path / "c.txt.z"
    z.write_bytes(zlib.compress(b"z1\r\nz2"))
    assert values(tw_data.TextLineDataset([str(p)])) == [b"first", b"second", b"", b"last"]
    assert values(tw_data.TextLineDataset(str(q), compression_type="GZIP")) == [b"g1", b"g2"]
    assert values(tw_data.TextLineDataset(str(z), compression_type="ZLIB")) == [b"z1", b"z2"]


def test_fixed_length_record_dataset(tmp_path):
    p = tmp_path / "r.bin"
    p.write_bytes(b"HDR" + b"aabbcc" + b"F")
    ds = tw_data.FixedLengthRecordDataset(str(p), record_bytes=2, header_bytes=3, footer_bytes=1)
    assert values(ds) == [b"aa", b"bb", b"cc"]
    bad = tw_data.FixedLengthRecordDataset(str(p), record_bytes=4, header_bytes=3, footer_bytes=1)
    with pytest.raises(tw.errors.DataLossError, match="not a whole number of 4-byte records"):
        values(bad)


def test_list_files_sorted_or_shuffled_with_a_seed(tmp_path):
    for name in ("c.txt", "a.txt", "b.txt", "skip.bin"):
        (tmp_path / name).write_bytes(b"")
    pattern = os.path.join(str(tmp_path), "*.txt")
    names = [os.path.join(str(tmp_path), n).encode() for n in ("a.txt", "b.txt", "c.txt")]
    assert values(Dataset.list_files(pattern, shuffle=False)) == names
    first = values(Dataset.list_files(pattern, seed=7))
    assert sorted(first) == names
    tw.reset_default_graph()
    assert values(Dataset.list_files(pattern, seed=7)) == first  # same seed, same order


def test_tfrecord_dataset_num_parallel_reads_interleaves_files(tmp_path):
    paths = []
    for f in range(3):
        p = str(tmp_path / f"f{f}.tfrecord")
        with tw.python_io.TFRecordWriter(p) as w:
            for i in range(f + 1):
                w.write(b"%d-%d" % (f, i))
        paths.append(p)
    ds = tw_data.TFRecordDataset(paths, num_parallel_reads=2)
    # file 0 ends first; file 2 takes its place in the cycle
    assert values(ds) == [b"0-0", b"1-0", b"1-1", b"2-0", b"2-1", b"2-2"]


def test_function_forms_of_tf_1_13():
    ds = Dataset.range(3)
    assert tw_data.get_output_types(ds) == tw.int64
    assert tw_data.get_output_shapes(ds) == tw.TensorShape([])
    assert tw_data.get_output_classes(ds) is tw.Tensor
    it = tw_data.make_initializable_iterator(ds)
    one = tw_data.make_one_shot_iterator(ds).get_next()
    with tw.Session() as sess:
        sess.run(it.initializer)
        assert int(sess.run(it.get_next())) == 0 and int(sess.run(one)) == 0
