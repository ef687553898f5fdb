"""Sparse feature columns (issue 11): hash buckets, vocabularies with out-of-vocabulary
buckets, identity ids, weights, crosses, embeddings (shared, partitioned, from a checkpoint)
and indicators, from dense and SparseTensor inputs, through input_layer and linear_model,
checked against NumPy and the documented hash; the string ops under them; canned DNN and
linear estimators trained on categorical features; and the errors for bad inputs."""

import hashlib
import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import feature_column as fc
from tensorweave.ops.string_ops import vocabulary_lookup

E = tw.errors.InvalidArgumentError


# the documented hash (tensorweave.ops.string_ops), written out independently
def fp(b):
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little")


def bucket(value, n):
    b = value.encode() if isinstance(value, str) else str(value).encode() if isinstance(value, int) else value
    return fp(b) % n


def cross_bucket(values, n, key=0xDECAFCAFFE):
    h = key
    for v in values:
        b = v.encode() if isinstance(v, str) else str(v).encode()
        h = fp(h.to_bytes(8, "little") + fp(b).to_bytes(8, "little"))
    return h % n


def _run(fetches, feed=None, init=True):
    with tw.Session() as sess:
        if init:
            sess.run(tw.global_variables_initializer())
        return sess.run(fetches, feed)


def multi_hot(rows, n, weights=None):
    out = np.zeros((len(rows), n), np.float32)
    for r, ids in enumerate(rows):
        for k, i in enumerate(ids):
            if i >= 0:
                out[r, i] += 1.0 if weights is None else weights[r][k]
    return out


# ----------------------------------------------------------------------------------------
# the ops
def test_string_to_hash_bucket_fast_is_the_documented_hash():
    words = np.array([["cat", "dog"], ["", "élan"]], dtype=object)
    got = _run(tw.string_to_hash_bucket_fast(tw.constant(words), 1000), init=False)
    np.testing.assert_array_equal(got, [[bucket(w, 1000) for w in row] for row in words])
    assert got.dtype == np.int64
    with pytest.raises(E, match="num_buckets must be an int >= 1"):
        tw.string_to_hash_bucket_fast(tw.constant(["a"]), 0)
    with pytest.raises(E, match="must be a string tensor"):
        tw.string_to_hash_bucket_fast(tw.constant([1]), 4)


def test_as_string_formats_like_printf():
    got = _run([tw.as_string(tw.constant([3, -4])), tw.as_string(tw.constant([3, -4]), width=4, fill="0"),
                tw.as_string(tw.constant([1.5, 0.25])), tw.as_string(tw.constant([1.5]), precision=2),
                tw.as_string(tw.constant([1234.5]), shortest=True), tw.as_string(tw.constant([1234.5]), scientific=True),
                tw.as_string(tw.constant([True, False]))], init=False)
    assert [list(x) for x in got] == [[b"3", b"-4"], [b"0003", b"-004"], [b"1.500000", b"0.250000"], [b"1.50"],
                                      [b"1234.5"], [b"1.234500e+03"], [b"true", b"false"]]
    with pytest.raises(E, match="both scientific and shortest"):
        tw.as_string(tw.constant([1.0]), scientific=True, shortest=True)
    with pytest.raises(E, match="precision is not supported for int32"):
        tw.as_string(tw.constant([1]), precision=2)


def test_sparse_cross_joins_and_hashes_every_combination_per_row():
    a = tw.SparseTensor([[0, 0], [0, 1], [1, 0]], ["a", "b", "c"], [3, 2])
    b = tw.constant([[1], [2], [3]], tw.int64)
    joined, hashed = _run([tw.sparse_cross([a, b]), tw.sparse_cross_hashed([a, b], 10, hash_key=7)], init=False)
    np.testing.assert_array_equal(joined.indices, [[0, 0], [0, 1], [1, 0]])
    assert list(joined.values) == [b"a_X_1", b"b_X_1", b"c_X_2"] and list(joined.dense_shape) == [3, 2]
    np.testing.assert_array_equal(hashed.values, [cross_bucket(["a", 1], 10, 7), cross_bucket(["b", 1], 10, 7),
                                                  cross_bucket(["c", 2], 10, 7)])
    with pytest.raises(E, match="batch sizes"):
        _run(tw.sparse_cross([a, tw.constant([[1]], tw.int64)]), init=False)


def test_vocabulary_lookup_op():
    keys = tw.constant(["b", "zz", "a", "q"])
    ids = _run([vocabulary_lookup(keys, ["a", "b"]), vocabulary_lookup(keys, ["a", "b"], num_oov_buckets=3),
                vocabulary_lookup(tw.constant([7, 3], tw.int32), [3, 5, 7], default_value=9)], init=False)
    np.testing.assert_array_equal(ids[0], [1, -1, 0, -1])
    np.testing.assert_array_equal(ids[1], [1, 2 + bucket("zz", 3), 0, 2 + bucket("q", 3)])
    np.testing.assert_array_equal(ids[2], [2, 0])
    dup = vocabulary_lookup(keys, tw.constant(["a", "a"]))
    with pytest.raises(E, match="twice"):
        _run(dup, init=False)


# ----------------------------------------------------------------------------------------
# categorical columns through indicator_column
def test_hash_bucket_column_from_dense_strings_integers_and_sparse():
    words = [["cat", "dog"], ["fish", ""], ["", ""]]
    col = fc.categorical_column_with_hash_bucket("w", 10)
    icol = fc.categorical_column_with_hash_bucket("i", 10, dtype=tw.int64)
    features = {"w": tw.constant(words), "i": tw.constant([12, -1, 7]),
                "s": tw.SparseTensor([[0, 0], [2, 1]], ["cat", "emu"], [3, 2])}
    scol = fc.categorical_column_with_hash_bucket("s", 10)
    got = _run(fc.input_layer(features, [fc.indicator_column(c) for c in (col, icol, scol)]))
    # sorted by name: i, s, w
    np.testing.assert_array_equal(got[:, :10], multi_hot([[bucket(12, 10)], [], [bucket(7, 10)]], 10))
    np.testing.assert_array_equal(got[:, 10:20], multi_hot([[bucket("cat", 10)], [], [bucket("emu", 10)]], 10))
    np.testing.assert_array_equal(got[:, 20:], multi_hot([[bucket(w, 10) for w in r if w] for r in words], 10))


def test_identity_column_from_sparse_input_and_default_value():
    sp = tw.SparseTensor([[0, 0], [0, 1], [2, 0]], np.array([3, 1, 9], np.int64), [3, 2])
    col = fc.categorical_column_with_identity("n", 4, default_value=0)
    np.testing.assert_array_equal(_run(fc.input_layer({"n": sp}, [fc.indicator_column(col)])),
                                  multi_hot([[3, 1], [], [0]], 4))
    strict = fc.categorical_column_with_identity("n", 4)
    out = fc.input_layer({"n": sp}, [fc.indicator_column(strict)])
    with pytest.raises(E, match=r"'n': ids must be in \[0, 4\)"):
        _run(out)


def test_vocabulary_list_with_oov_buckets_and_default_value():
    feats = {"c": tw.constant([["red", "mauve"], ["blue", ""], ["teal", "red"]])}
    vocab = ["red", "green", "blue"]
    oov = fc.categorical_column_with_vocabulary_list("c", vocab, num_oov_buckets=4)
    assert oov.num_buckets == 7
    got = _run(fc.input_layer(feats, [fc.indicator_column(oov)]))
    np.testing.assert_array_equal(got, multi_hot([[0, 3 + bucket("mauve", 4)], [2], [3 + bucket("teal", 4), 0]], 7))
    # without oov buckets an unknown value has no id (-1, dropped) or the default id
    ignore = fc.categorical_column_with_vocabulary_list("c", vocab)
    default = fc.categorical_column_with_vocabulary_list("c", vocab, default_value=1)
    got_ignore, got_default = _run([fc.input_layer(feats, [fc.indicator_column(ignore)]),
                                    fc.input_layer(feats, [fc.indicator_column(default)])])
    np.testing.assert_array_equal(got_ignore, multi_hot([[0], [2], [0]], 3))
    np.testing.assert_array_equal(got_default, multi_hot([[0, 1], [2], [1, 0]], 3))


def test_integer_vocabulary_and_vocabulary_file_with_oov(tmp_path):
    ints = fc.categorical_column_with_vocabulary_list("k", [10, 20, 30], num_oov_buckets=1)
    got = _run(fc.input_layer({"k": tw.constant([[30], [11], [-1]], tw.int32)}, [fc.indicator_column(ints)]))
    np.testing.assert_array_equal(got, multi_hot([[2], [3], []], 4))
    path = tmp_path / "vocab.txt"
    path.write_text("cat\ndog\nbird\n")
    col = fc.categorical_column_with_vocabulary_file("pet", str(path), vocabulary_size=3, num_oov_buckets=2)
    assert col.num_buckets == 5
    got = _run(fc.input_layer({"pet": tw.constant(["bird", "yak"])}, [fc.indicator_column(col)]))
    np.testing.assert_array_equal(got, multi_hot([[2], [3 + bucket("yak", 2)]], 5))


def test_weighted_column_in_indicator_and_linear_model():
    ids = fc.categorical_column_with_identity("ids", 4)
    weighted = fc.weighted_categorical_column(ids, "w")
    assert weighted.name == "ids_weighted_by_w" and weighted.num_buckets == 4
    sp_ids = tw.SparseTensor([[0, 0], [0, 1], [1, 0]], np.array([1, 3, 1], np.int64), [3, 2])
    sp_w = tw.SparseTensor([[0, 0], [0, 1], [1, 0]], [0.5, 2.0, 3.0], [3, 2])
    feats = {"ids": sp_ids, "w": sp_w}
    dense = fc.input_layer(feats, [fc.indicator_column(weighted)])
    cols_to_vars = {}
    lin = fc.linear_model(feats, [weighted], units=1, sparse_combiner="mean", cols_to_vars=cols_to_vars)
    (wvar,) = cols_to_vars[weighted]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(wvar.assign([[1.0], [10.0], [100.0], [1000.0]]))
        got_dense, got_lin = sess.run([dense, lin])
    np.testing.assert_array_equal(got_dense, multi_hot([[1, 3], [1], []], 4, [[0.5, 2.0], [3.0], []]))
    # mean: weighted sum / sum of weights; an example without ids gives 0
    np.testing.assert_allclose(got_lin[:, 0], [(0.5 * 10 + 2.0 * 1000) / 2.5, 10.0, 0.0], rtol=1e-6)
    # weights whose indices differ from the ids' fail the step, naming the column
    bad = fc.input_layer({"ids": sp_ids, "w": tw.SparseTensor([[0, 0], [2, 1], [1, 0]], [1.0, 1.0, 1.0], [3, 2])},
                         [fc.indicator_column(weighted)])
    with pytest.raises(E, match="ids_weighted_by_w.*same indices"):
        _run(bad)


def test_crossed_column_of_feature_names_and_columns():
    age = fc.bucketized_column(fc.numeric_column("age"), [30.0])
    cross = fc.crossed_column(["city", age], hash_bucket_size=16)
    assert cross.name == "age_bucketized_X_city" and cross.num_buckets == 16
    feats = {"city": tw.SparseTensor([[0, 0], [0, 1], [1, 0]], ["oslo", "rome", "lima"], [2, 2]),
             "age": tw.constant([[25.0], [40.0]])}
    got = _run(fc.input_layer(feats, [fc.indicator_column(cross)]))
    want = [[cross_bucket(["oslo", 0], 16), cross_bucket(["rome", 0], 16)], [cross_bucket(["lima", 1], 16)]]
    np.testing.assert_array_equal(got, multi_hot(want, 16))
    keyed = fc.crossed_column(["a", "b"], 100, hash_key=5)
    got = _run(fc.input_layer({"a": tw.constant([["x"]]), "b": tw.constant([[3]])}, [fc.indicator_column(keyed)]))
    np.testing.assert_array_equal(got, multi_hot([[cross_bucket(["x", 3], 100, 5)]], 100))


# ----------------------------------------------------------------------------------------
# embeddings
def _combine(table, rows, combiner, weights=None):
    out = np.zeros((len(rows), table.shape[1]), np.float64)
    for r, ids in enumerate(rows):
        if not ids:
            continue
        w = np.ones(len(ids)) if weights is None else np.asarray(weights[r], np.float64)
        total = (table[ids] * w[:, None]).sum(0)
        out[r] = {"sum": total, "mean": total / w.sum(), "sqrtn": total / np.sqrt((w * w).sum())}[combiner]
    return out


@pytest.mark.parametrize("combiner", ["mean", "sum", "sqrtn"])
def test_embedding_column_combiners_against_numpy(combiner):
    col = fc.categorical_column_with_vocabulary_list("w", ["a", "b", "c", "d"])
    emb = fc.embedding_column(col, 3, combiner=combiner)
    assert emb.name == "w_embedding" and emb.dimension == 3
    sp = tw.sparse_placeholder(tw.string, shape=[None, 3])
    cols_to_vars = {}
    out = fc.input_layer({"w": sp}, [emb], cols_to_vars=cols_to_vars)
    (table_var,) = cols_to_vars[emb]
    assert table_var.op.name == "input_layer/w_embedding/embedding_weights"
    assert table_var.shape.as_list() == [4, 3] and table_var in tw.trainable_variables()
    feed = tw.SparseTensorValue(np.array([[0, 0], [0, 2], [1, 0], [3, 1]], np.int64),
                                np.array([b"b", b"d", b"zz", b"c"], object), np.array([4, 3], np.int64))
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got, table = sess.run([out, table_var], {sp: feed})
    # "zz" is not in the vocabulary (no id): example 1 has no ids left, like example 2
    np.testing.assert_allclose(got, _combine(table, [[1, 3], [], [], [2]], combiner), rtol=1e-5, atol=1e-6)
    # the default initializer: truncated normal with stddev 1/sqrt(3)
    assert np.abs(table).max() <= 2 / np.sqrt(3) + 1e-6


def test_embedding_column_weights_max_norm_initializer_and_trainable():
    ids = fc.categorical_column_with_identity("i", 3)
    weighted = fc.weighted_categorical_column(ids, "w")
    table = np.array([[3.0, 4.0], [0.3, 0.4], [1.0, 0.0]], np.float32)
    emb = fc.embedding_column(weighted, 2, combiner="sum", initializer=tw.constant_initializer(table),
                              max_norm=1.0, trainable=False)
    feats = {"i": tw.constant([[0, 1], [2, -1]]), "w": tw.constant([[2.0, 1.0], [0.5, 0.0]])}
    got = _run(fc.input_layer(feats, [emb]))
    clipped = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1.0)
    np.testing.assert_allclose(got, [2.0 * clipped[0] + clipped[1], 0.5 * clipped[2]], rtol=1e-6)
    assert not tw.trainable_variables()


def test_embedding_gradient_is_sparse_and_partitioned_tables_agree():
    col = fc.categorical_column_with_hash_bucket("w", 20)
    feats = {"w": tw.constant([["a", "b"], ["c", ""]])}
    emb = fc.embedding_column(col, 4, initializer=tw.random_uniform_initializer(-1.0, 1.0, seed=3))
    cols_to_vars = {}
    whole = fc.input_layer(feats, [emb], cols_to_vars=cols_to_vars)
    (table,) = cols_to_vars[emb]
    (grad,) = tw.gradients(tw.reduce_sum(whole), [table])
    assert isinstance(grad, tw.IndexedSlices)
    with tw.variable_scope("parts", partitioner=tw.fixed_size_partitioner(3)):
        parts_vars = {}
        parted = fc.input_layer(feats, [emb], cols_to_vars=parts_vars)
    shards = parts_vars[emb]
    assert [s.shape.as_list() for s in shards] == [[7, 4], [7, 4], [6, 4]]
    assert shards[0].op.name == "parts/input_layer/w_embedding/embedding_weights/part_0"
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        full = sess.run(table)
        sess.run([s.assign(full[a:b]) for s, (a, b) in zip(shards, [(0, 7), (7, 14), (14, 20)])])
        got_whole, got_parted, g = sess.run([whole, parted, grad])
    np.testing.assert_allclose(got_parted, got_whole, rtol=1e-6)
    want = _combine(full, [[bucket("a", 20), bucket("b", 20)], [bucket("c", 20)]], "mean")
    np.testing.assert_allclose(got_whole, want, rtol=1e-5)
    assert sorted(set(g.indices.tolist())) == sorted({bucket(w, 20) for w in "abc"})


def test_shared_embedding_columns_use_one_table():
    a = fc.categorical_column_with_identity("a", 5)
    b = fc.categorical_column_with_identity("b", 5)
    ea, eb = fc.shared_embedding_columns([a, b], 2, combiner="sum")
    assert (ea.name, eb.name) == ("a_shared_embedding", "b_shared_embedding")
    assert ea.shared_embedding_collection_name == "a_b_shared_embedding"
    out = fc.input_layer({"a": tw.constant([[1], [4]]), "b": tw.constant([[1], [0]])}, [ea, eb])
    (table_var,) = tw.get_collection("a_b_shared_embedding")
    assert [v.op.name for v in tw.global_variables()] == ["input_layer/a_shared_embedding/embedding_weights"]
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got, table = sess.run([out, table_var])
    np.testing.assert_allclose(got, np.concatenate([table[[1, 4]], table[[1, 0]]], axis=1))
    with pytest.raises(E, match="same number of buckets"):
        fc.shared_embedding_columns([a, fc.categorical_column_with_identity("c", 6)], 2)


def test_embedding_column_from_checkpoint(tmp_path):
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    with tw.Graph().as_default():
        v = tw.get_variable("old/table", initializer=table)
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            tw.train.Saver([v]).save(sess, str(tmp_path / "model.ckpt"))
    for ckpt, partitioner in ((str(tmp_path / "model.ckpt"), None), (str(tmp_path), tw.fixed_size_partitioner(2))):
        with tw.Graph().as_default():
            col = fc.categorical_column_with_identity("i", 6)
            emb = fc.embedding_column(col, 2, combiner="sum", ckpt_to_load_from=ckpt, tensor_name_in_ckpt="old/table")
            with tw.variable_scope("m", partitioner=partitioner):
                out = fc.input_layer({"i": tw.constant([[5], [0]])}, [emb])
            np.testing.assert_allclose(_run(out), table[[5, 0]])
    with pytest.raises(E, match="both ckpt_to_load_from and tensor_name_in_ckpt"):
        fc.embedding_column(fc.categorical_column_with_identity("i", 6), 2, ckpt_to_load_from=str(tmp_path))
    assert os.path.exists(tmp_path / "checkpoint")


# ----------------------------------------------------------------------------------------
# linear_model
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_linear_model_with_sparse_columns_against_numpy(combiner):
    words = fc.categorical_column_with_hash_bucket("words", 8)
    code = fc.categorical_column_with_identity("code", 3)
    sp = tw.sparse_placeholder(tw.string)
    feats = {"words": sp, "code": tw.constant([[2], [-1], [0]])}
    cols_to_vars = {}
    logits = fc.linear_model(feats, [words, code], units=2, sparse_combiner=combiner, cols_to_vars=cols_to_vars)
    ww, wc = np.arange(16.0).reshape(8, 2), np.arange(6.0).reshape(3, 2) * 100
    feed = {sp: (np.array([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]], np.int64),
                 np.array([b"x", b"y", b"x", b"x", b"z"], object), np.array([3, 3], np.int64))}
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run([cols_to_vars[words][0].assign(ww), cols_to_vars[code][0].assign(wc),
                  cols_to_vars["bias"][0].assign([0.5, -0.5])])
        got = sess.run(logits, feed)
    rows = [[bucket("x", 8), bucket("y", 8)], [], [bucket("x", 8), bucket("x", 8), bucket("z", 8)]]
    want = _combine(ww, rows, combiner) + _combine(wc, [[2], [], [0]], combiner) + [0.5, -0.5]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_linear_model_partitioned_weights_match_whole_ones():
    col = fc.categorical_column_with_vocabulary_list("c", [str(i) for i in range(10)], num_oov_buckets=2)
    feats = {"c": tw.constant([["3", "11"], ["9", "x"]])}
    whole_vars, part_vars = {}, {}
    whole = fc.linear_model(feats, [col], cols_to_vars=whole_vars)
    with tw.variable_scope("p", partitioner=tw.fixed_size_partitioner(4)):
        parted = fc.linear_model(feats, [col], cols_to_vars=part_vars)
    assert len(part_vars[col]) == 4
    w = np.arange(12.0).reshape(12, 1)
    sizes = [s.shape.as_list()[0] for s in part_vars[col]]
    starts = np.cumsum([0] + sizes)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run([whole_vars[col][0].assign(w)] + [s.assign(w[a:b]) for s, a, b in
                                                    zip(part_vars[col], starts, starts[1:])])
        got_whole, got_parted = sess.run([whole, parted])
    np.testing.assert_allclose(got_parted, got_whole)
    np.testing.assert_allclose(got_whole[:, 0], [3 + 10 + bucket("11", 2), 9 + 10 + bucket("x", 2)])


# ----------------------------------------------------------------------------------------
# canned estimators
def _synthetic(n=400, seed=0):
    rng = np.random.RandomState(seed)
    words = np.array([f"w{i}" for i in range(20)])
    w = words[rng.randint(0, 20, size=(n, 2))]
    code = rng.randint(0, 5, size=n).astype(np.int64)
    y = (np.isin(w, words[:10]).sum(1) + (code >= 3) >= 2).astype(np.int64)
    return words, w, code, y


def test_dnn_classifier_with_embedded_hash_bucket_column(tmp_path):
    _, w, code, y = _synthetic()
    emb = fc.embedding_column(fc.categorical_column_with_hash_bucket("w", 50), 4)
    ind = fc.indicator_column(fc.categorical_column_with_identity("code", 5))
    clf = tw.estimator.DNNClassifier([8], [emb, ind], model_dir=str(tmp_path), optimizer=tw.train.AdagradOptimizer(0.3),
                                     input_layer_partitioner=tw.fixed_size_partitioner(2))
    clf.train(tw.estimator.inputs.numpy_input_fn({"w": w, "code": code}, y, batch_size=40, num_epochs=15,
                                                 shuffle=True))
    result = clf.evaluate(tw.estimator.inputs.numpy_input_fn({"w": w, "code": code}, y, shuffle=False))
    assert result["accuracy"] > 0.9, result
    names = clf.get_variable_names()
    assert "dnn/input_from_feature_columns/input_layer/w_embedding/embedding_weights" in names
    assert "dnn/input_from_feature_columns/input_layer/w_embedding/embedding_weights/part_1/Adagrad" in names


def test_linear_classifier_with_categorical_columns(tmp_path):
    words, w, code, y = _synthetic(seed=1)
    columns = [fc.categorical_column_with_vocabulary_list("w", list(words)),
               fc.categorical_column_with_identity("code", 5),
               fc.crossed_column(["w", fc.categorical_column_with_identity("code", 5)], 64)]
    clf = tw.estimator.LinearClassifier(columns, model_dir=str(tmp_path), partitioner=tw.fixed_size_partitioner(2))
    clf.train(tw.estimator.inputs.numpy_input_fn({"w": w, "code": code}, y, batch_size=40, num_epochs=10,
                                                 shuffle=True))
    result = clf.evaluate(tw.estimator.inputs.numpy_input_fn({"w": w, "code": code}, y, shuffle=False))
    assert result["accuracy"] > 0.9, result
    assert "linear/linear_model/w/weights/part_1/Ftrl" in clf.get_variable_names()
    assert clf.get_variable_value("linear/linear_model/w/weights").shape == (20, 1)


def test_linear_classifier_on_sparse_tensor_features(tmp_path):
    rng = np.random.RandomState(2)
    n = 200
    lengths = rng.randint(0, 4, size=n)
    indices = np.array([[r, k] for r in range(n) for k in range(lengths[r])], np.int64).reshape(-1, 2)
    values = rng.randint(0, 6, size=len(indices)).astype(np.int64)
    y = np.array([int((values[indices[:, 0] == r] < 3).sum() >= 1) for r in range(n)], np.int64)

    def input_fn():
        return {"ids": tw.SparseTensor(indices, values, [n, 3])}, tw.constant(y)

    clf = tw.estimator.LinearClassifier([fc.categorical_column_with_identity("ids", 6)], model_dir=str(tmp_path),
                                        optimizer=tw.train.FtrlOptimizer(0.5))
    clf.train(input_fn, steps=60)
    result = clf.evaluate(input_fn, steps=1)
    assert result["accuracy"] > 0.9, result


def test_partitioner_arguments_are_checked():
    cols = [fc.numeric_column("x")]
    with pytest.raises(E, match="input_layer_partitioner must be a partitioner"):
        tw.estimator.DNNClassifier([4], cols, input_layer_partitioner=3)
    with pytest.raises(E, match="partitioner must be a partitioner"):
        tw.estimator.LinearRegressor(cols, partitioner="two")


# ----------------------------------------------------------------------------------------
# bad input
def test_wrong_dtypes_and_arguments_are_clear_errors():
    hashed = fc.categorical_column_with_hash_bucket("w", 10)
    with pytest.raises(E, match="'w'.*column's dtype is string but the feature is int32"):
        fc.input_layer({"w": tw.constant([1, 2])}, [fc.indicator_column(hashed)])
    with pytest.raises(E, match="identity 'n': the feature must be integer ids, got string"):
        fc.input_layer({"n": tw.constant(["1"])}, [fc.indicator_column(fc.categorical_column_with_identity("n", 3))])
    vocab = fc.categorical_column_with_vocabulary_list("v", ["a", "b"])
    with pytest.raises(E, match="must hold strings or integers, got float32"):
        fc.input_layer({"v": tw.constant([1.5])}, [fc.indicator_column(vocab)])
    with pytest.raises(E, match="column's dtype is string but the feature is int64"):
        fc.input_layer({"v": tw.constant([1], tw.int64)}, [fc.indicator_column(vocab)])
    weighted = fc.weighted_categorical_column(fc.categorical_column_with_identity("n", 3), "w")
    with pytest.raises(E, match="bad dtype of the weights 'w': expected float32, got int32"):
        fc.input_layer({"n": tw.constant([1]), "w": tw.constant([2])}, [fc.indicator_column(weighted)])
    with pytest.raises(E, match="numeric_column 'x': the feature must be a dense Tensor"):
        fc.input_layer({"x": tw.SparseTensor([[0, 0]], [1.0], [1, 1])}, [fc.numeric_column("x")])
    with pytest.raises(E, match="unknown rank"):
        fc.input_layer({"w": tw.placeholder(tw.string)}, [fc.indicator_column(hashed)])
    with pytest.raises(E, match="wrap categorical column 'w' in indicator_column\\(\\) or embedding_column"):
        fc.input_layer({"w": tw.constant(["a"])}, [hashed])
    with pytest.raises(E, match="categorical_column_with_hash_bucket is not supported in a cross"):
        fc.crossed_column([hashed, "x"], 10)
    with pytest.raises(E, match="keys must be a list with length > 1"):
        fc.crossed_column(["x"], 10)
    with pytest.raises(E, match="must be a categorical column"):
        fc.embedding_column(fc.numeric_column("x"), 2)
    with pytest.raises(E, match="combiner must be one of"):
        fc.embedding_column(hashed, 2, combiner="max")
    with pytest.raises(E, match="dtype must be string or integer"):
        fc.categorical_column_with_hash_bucket("w", 10, dtype=tw.float32)
    with pytest.raises(E, match="not convertible to float"):
        fc.weighted_categorical_column(hashed, "w", dtype=tw.string)
    with pytest.raises(E, match="feature 'w' is not in the features dict"):
        fc.linear_model({"x": tw.constant([1.0])}, [hashed])


def test_unknown_vocabulary_entries_with_and_without_oov_buckets():
    feats = {"v": tw.constant([["a"], ["nope"]])}
    plain = fc.categorical_column_with_vocabulary_list("v", ["a", "b"])
    oov = fc.categorical_column_with_vocabulary_list("v", ["a", "b"], num_oov_buckets=1)
    lin_plain = fc.linear_model(feats, [plain])
    with tw.variable_scope("o"):
        lin_oov = fc.linear_model(feats, [oov])
    weights = {v.op.name: v for v in tw.global_variables()}
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run([weights["linear_model/v/weights"].assign([[1.0], [2.0]]),
                  weights["o/linear_model/v/weights"].assign([[1.0], [2.0], [7.0]])])
        got_plain, got_oov = sess.run([lin_plain, lin_oov])
    np.testing.assert_allclose(got_plain[:, 0], [1.0, 0.0])   # no id: the example contributes nothing
    np.testing.assert_allclose(got_oov[:, 0], [1.0, 7.0])     # the one oov bucket
