"""tw.feature_column: dense and categorical columns in input_layer and linear_model, checked
against NumPy, and the errors for what is missing or wrong (sparse inputs, hashing, embeddings:
test_sparse_feature_columns.py)."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import feature_column as fc


def _run(t, init=False):
    with tw.Session() as sess:
        if init:
            sess.run(tw.global_variables_initializer())
        return sess.run(t)


def test_numeric_columns_concatenate_sorted_by_name():
    x = np.arange(12, dtype=np.float64).reshape(3, 2, 2)
    features = {"b_age": tw.constant([31, 45, 12]), "a_img": tw.constant(x)}
    out = fc.input_layer(features, [fc.numeric_column("b_age"), fc.numeric_column("a_img", shape=(2, 2))])
    assert out.dtype is tw.float32 and out.shape.as_list() == [3, 5]
    np.testing.assert_array_equal(_run(out), np.concatenate([x.reshape(3, 4), [[31], [45], [12]]], axis=1))


def test_numeric_column_normalizer_and_shape_mismatch():
    col = fc.numeric_column("v", normalizer_fn=lambda t: (t - 10.0) / 2.0)
    np.testing.assert_allclose(_run(fc.input_layer({"v": tw.constant([[10.0], [14.0]])}, [col])), [[0.0], [2.0]])
    with pytest.raises(tw.errors.InvalidArgumentError, match="has shape \\(3,\\)"):
        fc.input_layer({"v": tw.constant(np.zeros((2, 2), np.float32))}, [fc.numeric_column("v", shape=3)])


def test_bucketized_column_dense_and_in_linear_model():
    age = fc.numeric_column("age")
    buckets = fc.bucketized_column(age, [18.0, 65.0])
    values = np.array([[5.0], [18.0], [40.0], [65.0], [90.0]], np.float32)
    features = {"age": tw.constant(values)}
    dense = _run(fc.input_layer(features, [buckets]))
    expected = np.eye(3)[np.searchsorted([18.0, 65.0], values[:, 0], side="right")]
    np.testing.assert_array_equal(dense, expected)
    cols_to_vars = {}
    logits = fc.linear_model(features, [buckets], units=1, cols_to_vars=cols_to_vars)
    (w,) = cols_to_vars[buckets]
    assert w.op.name == "linear_model/age_bucketized/weights" and w.shape.as_list() == [3, 1]
    assert cols_to_vars["bias"][0].op.name == "linear_model/bias_weights"
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run([w.assign([[1.0], [2.0], [3.0]]), cols_to_vars["bias"][0].assign([0.5])])
        np.testing.assert_allclose(sess.run(logits)[:, 0], expected @ [1.0, 2.0, 3.0] + 0.5)


def test_vocabulary_and_identity_columns_as_indicators():
    color = fc.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"])
    code = fc.categorical_column_with_identity("code", num_buckets=4)
    features = {"color": tw.constant(["blue", "red", "purple", ""]), "code": tw.constant([[3], [0], [-1], [2]])}
    out = _run(fc.input_layer(features, [fc.indicator_column(color), fc.indicator_column(code)]))
    # sorted by name: code_indicator, then color_indicator; unknown and missing values give zero rows
    np.testing.assert_array_equal(out[:, :4], [[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(out[:, 4:], [[0, 0, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    # "" is a missing value, dropped before the lookup whatever the default_value (as TF1)
    with_default = fc.categorical_column_with_vocabulary_list("color", ["red", "green"], default_value=1)
    np.testing.assert_array_equal(_run(fc.input_layer(features, [fc.indicator_column(with_default)])),
                                  [[0, 1], [1, 0], [0, 1], [0, 0]])


def test_identity_column_out_of_range_fails_the_step():
    code = fc.categorical_column_with_identity("code", num_buckets=3)
    out = fc.input_layer({"code": tw.constant([1, 7])}, [fc.indicator_column(code)])
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"'code': ids must be in \[0, 3\)"):
        _run(out)
    ok = fc.categorical_column_with_identity("code", num_buckets=3, default_value=0)
    np.testing.assert_array_equal(_run(fc.input_layer({"code": tw.constant([1, 7])}, [fc.indicator_column(ok)])),
                                  [[0, 1, 0], [1, 0, 0]])


def test_vocabulary_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("cat\ndog\nbird\n")
    col = fc.categorical_column_with_vocabulary_file("pet", str(path), vocabulary_size=2)
    assert col.num_buckets == 2
    np.testing.assert_array_equal(_run(fc.input_layer({"pet": tw.constant(["dog", "bird"])},
                                                      [fc.indicator_column(col)])), [[0, 1], [0, 0]])


def test_linear_model_combines_numeric_and_categorical_with_combiners():
    x = fc.numeric_column("x", shape=2)
    tags = fc.categorical_column_with_identity("tags", num_buckets=3)
    features = {"x": tw.constant([[1.0, 2.0], [3.0, 4.0]]), "tags": tw.constant([[0, 2], [1, -1]])}
    cols_to_vars = {}
    sums = fc.linear_model(features, [x, tags], units=2, cols_to_vars=cols_to_vars)
    with tw.variable_scope("other"):
        means = fc.linear_model(features, [x, tags], units=2, sparse_combiner="mean")
    wx, wt = np.arange(4.0).reshape(2, 2), np.arange(6.0).reshape(3, 2) * 10
    assigns = [cols_to_vars[x][0].assign(wx), cols_to_vars[tags][0].assign(wt)]
    others = {v.op.name: v for v in tw.global_variables() if v.op.name.startswith("other/")}
    assigns += [others["other/linear_model/x/weights"].assign(wx), others["other/linear_model/tags/weights"].assign(wt)]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(assigns)
        got_sum, got_mean = sess.run([sums, means])
    xs = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(got_sum, xs @ wx + np.array([wt[0] + wt[2], wt[1]]))
    np.testing.assert_allclose(got_mean, xs @ wx + np.array([(wt[0] + wt[2]) / 2, wt[1]]))


def test_errors_name_what_was_expected():
    with pytest.raises(tw.errors.InvalidArgumentError, match="wrap categorical column 'c' in indicator_column"):
        fc.input_layer({"c": tw.constant([1])}, [fc.categorical_column_with_identity("c", 2)])
    with pytest.raises(tw.errors.InvalidArgumentError, match="feature 'missing' is not in the features dict"):
        fc.input_layer({"x": tw.constant([1.0])}, [fc.numeric_column("missing")])
    with pytest.raises(tw.errors.InvalidArgumentError, match="strictly increasing"):
        fc.bucketized_column(fc.numeric_column("a"), [3.0, 1.0])
    with pytest.raises(tw.errors.InvalidArgumentError, match="made by numeric_column"):
        fc.bucketized_column("a", [1.0])
    with pytest.raises(tw.errors.InvalidArgumentError, match="duplicate keys in the vocabulary"):
        fc.categorical_column_with_vocabulary_list("c", ["a", "b", "a"])
    with pytest.raises(tw.errors.InvalidArgumentError, match="duplicate feature column name"):
        fc.input_layer({"a": tw.constant([1.0])}, [fc.numeric_column("a"), fc.numeric_column("a")])
    with pytest.raises(tw.errors.InvalidArgumentError, match="dtype must be convertible to float"):
        fc.numeric_column("s", dtype=tw.string)
    with pytest.raises(tw.errors.InvalidArgumentError, match="invalid dimension 0"):
        fc.embedding_column(fc.categorical_column_with_identity("c", 2), dimension=0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="hash_bucket_size must be an int >= 1"):
        fc.categorical_column_with_hash_bucket("c", 0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="both num_oov_buckets and default_value"):
        fc.categorical_column_with_vocabulary_list("c", ["a"], default_value=0, num_oov_buckets=2)


def test_columns_are_hashable_values():
    a, b = fc.numeric_column("a"), fc.numeric_column("a")
    assert a == b and hash(a) == hash(b) and a.name == "a"
    ind = fc.indicator_column(fc.categorical_column_with_identity("c", 3))
    assert ind.name == "c_indicator" and ind.dimension == 3
