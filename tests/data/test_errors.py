"""Bad input to tw.data: each a clear tw.errors.* (or the exception TF raises there) that
names the dataset op and says what was expected."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import data as tw_data
from tensorweave.ops import dataset_ops

Dataset = tw_data.Dataset


def first(dataset, feed=None):
    it = dataset.make_initializable_iterator()
    with tw.Session() as sess:
        sess.run(it.initializer, feed)
        return sess.run(it.get_next())


def run_all(dataset):
    nxt = dataset.make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        while True:
            try:
                sess.run(nxt)
            except tw.errors.OutOfRangeError:
                return


# -- structures -------------------------------------------------------------------------------
def test_zip_needs_a_structure_of_datasets():
    a = Dataset.range(3)
    with pytest.raises(TypeError, match="nested structure .* of Dataset objects"):
        Dataset.zip([a, a])  # a list is one component in tf.data, not a structure
    with pytest.raises(TypeError, match="holding a int"):
        Dataset.zip((a, 1))
    with pytest.raises(tw.errors.InvalidArgumentError):
        Dataset.zip((a, 1))  # the same error is also a tw.errors.InvalidArgumentError


def test_padded_batch_structure_must_match_the_elements():
    ds = Dataset.from_tensor_slices(([[1, 2]], [[3]]))
    with pytest.raises(TypeError, match="padded_shapes do not have the same nested structure"):
        ds.padded_batch(2, padded_shapes=[None])
    with pytest.raises(TypeError, match="padding_values"):
        ds.padded_batch(2, padded_shapes=([None], [None]), padding_values=0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="different rank"):
        ds.padded_batch(2, padded_shapes=([None, None], [None]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="larger than its padded shape"):
        ds.padded_batch(2, padded_shapes=([1], [None]))


def test_padded_batch_element_larger_than_the_padded_shape_at_run_time():
    ds = Dataset.from_generator(lambda: iter([[1], [1, 2, 3]]), tw.int32, [None]).padded_batch(2, [2])
    with pytest.raises(tw.errors.InvalidArgumentError, match="PaddedBatchDatasetV2 .* element 1 has shape \\[3\\], "
                                                             "larger than its padded shape \\[2\\]"):
        first(ds)


def test_concatenate_of_other_types():
    with pytest.raises(TypeError, match="element types do not match"):
        Dataset.range(3).concatenate(Dataset.from_tensors(1.0))


def test_map_function_structure_is_fixed_when_traced():
    # A function whose structure would depend on the element cannot be traced.
    with pytest.raises(tw.errors.InvalidArgumentError, match="structure"):
        Dataset.range(3).map(lambda x: tw.cond(x > 1, lambda: (x, x), lambda: x))
    with pytest.raises(tw.errors.InvalidArgumentError, match="returned None"):
        Dataset.range(3).map(lambda x: None)
    with pytest.raises(tw.errors.InvalidArgumentError, match="Dataset cannot be a component"):
        Dataset.range(3).map(lambda x: Dataset.range(x))
    with pytest.raises(TypeError, match="must return a Dataset"):
        Dataset.range(3).flat_map(lambda x: x)
    g = tw.get_default_graph()
    assert not [op for op in g.get_operations() if "/fn/" in op.name]  # failed traces leave nothing behind


def test_map_output_of_another_shape_at_run_time_names_the_op():
    ds = Dataset.from_generator(lambda: iter([[1, 2], [1, 2, 3]]), tw.int32, [None])
    ds = ds.map(lambda x: tw.placeholder_with_default(x, [2]))  # claims shape [2]; the second is [3]
    assert ds.output_shapes == tw.TensorShape([2])
    nxt = ds.make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        assert sess.run(nxt).tolist() == [1, 2]
        with pytest.raises(tw.errors.InvalidArgumentError,
                           match="MapDataset 'MapDataset'.*shape \\(3,\\) for component 0, where shape \\(2,\\)"):
            sess.run(nxt)


def test_kernel_errors_inside_a_map_function_name_the_dataset():
    ds = Dataset.from_generator(lambda: iter([[4.0]]), tw.float32, [None]).map(lambda x: tw.reshape(x, [2]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="MapDataset 'MapDataset': in its function .*Reshape"):
        first(ds)


def test_functions_cannot_create_or_update_variables():
    with pytest.raises(tw.errors.InvalidArgumentError, match="cannot create variables"):
        Dataset.range(3).map(lambda x: x + tw.Variable(np.int64(1)))
    v = tw.Variable(np.int64(0))
    with pytest.raises(tw.errors.InvalidArgumentError, match="cannot change variables"):
        Dataset.range(3).map(lambda x: tw.assign_add(v, x))


def test_filter_predicate_must_be_a_bool_scalar():
    with pytest.raises(tw.errors.InvalidArgumentError, match="must return a scalar bool"):
        Dataset.range(3).filter(lambda x: x)
    with pytest.raises(tw.errors.InvalidArgumentError, match="must return a scalar bool"):
        Dataset.range(3).filter(lambda x: tw.stack([x > 0, x > 1]))


# -- run time ----------------------------------------------------------------------------------
def test_batch_of_different_shapes_suggests_padded_batch():
    ds = Dataset.from_generator(lambda: iter([[1, 2], [3]]), tw.int32, [None]).batch(2)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match="BatchDatasetV2 'BatchDatasetV2': cannot batch tensors of different shapes in component 0"
                             ".*element 1 has shape \\[1\\].*use padded_batch"):
        first(ds)


@pytest.mark.parametrize("values, types, shapes, message", [
    (["abc"], tw.int64, None, "yielded 'abc' .*component 0.*expected type int64"),
    ([[1, 2, 3]], tw.int64, [2], "shape \\(3,\\) for component 0, where shape \\(2,\\) was expected"),
    ([(1, 2, 3)], (tw.int64, tw.int64), None, "yielded \\(1, 2, 3\\).*structure of output_types \\(int64, int64\\)"),
    ([{"a": 1}], {"b": tw.int64}, None, "structure of output_types \\{'b': int64\\}"),
    ([1.5j], tw.float32, None, "cannot be converted to the expected type float32"),
])
def test_from_generator_values_must_match_types_and_shapes(values, types, shapes, message):
    ds = Dataset.from_generator(lambda: iter(values), types, shapes)
    with pytest.raises(tw.errors.InvalidArgumentError, match="GeneratorDataset 'GeneratorDataset'.*" + message):
        first(ds)


def test_from_generator_checks_its_arguments():
    with pytest.raises(TypeError, match="callable"):
        Dataset.from_generator([1, 2], tw.int64)
    with pytest.raises(TypeError, match="output_types and output_shapes"):
        Dataset.from_generator(lambda: iter([]), (tw.int64, tw.int64), [None])


def test_from_generator_elsewhere_than_its_process_is_refused():
    # What a worker process sees: the op names a generator this process does not have.
    v = dataset_ops.dataset_op("GeneratorDataset", [[]], [tw.int64], [[]], {"generator": "generator-elsewhere"})
    iterator = tw_data.Iterator.from_structure(tw.int64, [])
    init = iterator.make_initializer(Dataset(v, tw.int64, tw.TensorShape([])))
    with tw.Session() as sess, pytest.raises(tw.errors.FailedPreconditionError,
                                             match="only in the Python process that built the graph.*remote worker"):
        sess.run(init)


def test_reading_past_the_end_keeps_raising_out_of_range():
    nxt = Dataset.range(1).make_one_shot_iterator().get_next()
    with tw.Session() as sess:
        sess.run(nxt)
        for _ in range(3):
            with pytest.raises(tw.errors.OutOfRangeError, match="IteratorGetNext.*End of sequence"):
                sess.run(nxt)


def test_missing_file_names_the_file_and_dataset(tmp_path):
    missing = str(tmp_path / "nope.tfrecord")
    with pytest.raises(tw.errors.NotFoundError, match="TFRecordDataset 'TFRecordDataset'.*nope.tfrecord"):
        run_all(tw_data.TFRecordDataset(missing))
    with pytest.raises(tw.errors.NotFoundError, match="TextLineDataset"):
        run_all(tw_data.TextLineDataset(missing))


def test_damaged_record_file_is_data_loss(tmp_path):
    p = tmp_path / "bad.tfrecord"
    with tw.python_io.TFRecordWriter(str(p)) as w:
        w.write(b"x" * 100)
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(tw.errors.DataLossError, match="TFRecordDataset.*truncated"):
        run_all(tw_data.TFRecordDataset(str(p)))


@pytest.mark.parametrize("make, message", [
    (lambda: Dataset.range(3).batch(0), "batch_size must be positive"),
    (lambda: Dataset.range(3).shuffle(0), "buffer_size must be positive"),
    (lambda: Dataset.range(0, 3, 0), "step must not be 0"),
    (lambda: Dataset.range(3).interleave(lambda x: Dataset.range(x), cycle_length=0), "cycle_length"),
])
def test_bad_parameters_at_run_time_name_the_op(make, message):
    with pytest.raises(tw.errors.InvalidArgumentError, match=message):
        first(make())


def test_from_tensor_slices_needs_matching_first_dimensions():
    with pytest.raises(tw.errors.InvalidArgumentError, match="same size in dimension 0"):
        Dataset.from_tensor_slices(([1, 2], [1, 2, 3]))
    a = tw.placeholder(tw.int32, [None])
    ds = Dataset.from_tensor_slices((a, [1, 2]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="TensorSliceDataset.*component 0 has 3 and component 1 has 2"):
        first(ds, {a: [1, 2, 3]})
    with pytest.raises(tw.errors.InvalidArgumentError, match="scalar"):
        Dataset.from_tensor_slices(3)


def test_datasets_are_not_python_iterables():
    with pytest.raises(RuntimeError, match="not iterable"):
        iter(Dataset.range(3))


@pytest.mark.parametrize("parallel", [None, 2])
def test_an_error_ends_the_pass_and_the_initializer_starts_again(parallel):
    bad = tw.placeholder(tw.int64, [])
    # Reshape fails for element `bad` (to shape [0]) and gives a vector [x] for the others.
    ds = Dataset.range(5).map(lambda x: tw.reshape(x, tw.reshape(tw.cast(tw.not_equal(x, bad), tw.int32), [1])),
                              num_parallel_calls=parallel)
    it = ds.make_initializable_iterator()
    nxt = it.get_next()
    with tw.Session() as sess:
        sess.run(it.initializer, {bad: 2})
        assert [int(sess.run(nxt)[0]), int(sess.run(nxt)[0])] == [0, 1]
        with pytest.raises(tw.errors.InvalidArgumentError, match="MapDataset.*in its function.*Reshape"):
            sess.run(nxt)
        with pytest.raises(tw.errors.OutOfRangeError):
            sess.run(nxt)
        sess.run(it.initializer, {bad: 99})
        assert [int(sess.run(nxt)[0]) for _ in range(5)] == [0, 1, 2, 3, 4]


def test_shared_iterator_declared_twice_differently():
    with tw.container("data_test_conflict"):
        a = tw_data.Iterator.from_structure(tw.int64, [], shared_name="it")
        b = tw_data.Iterator.from_structure(tw.float32, [], shared_name="it")
    try:
        with tw.Session() as sess:
            sess.run(a.make_initializer(Dataset.range(2)))
            with pytest.raises(tw.errors.InvalidArgumentError, match="shared iterator 'it'.*already exists"):
                sess.run(b.make_initializer(Dataset.from_tensors(1.0)))
    finally:
        tw.Session.reset("", ["data_test_conflict"])
