"""The canned estimators: they learn small problems, their predictions and eval metrics carry
TF1's keys (and the metrics agree with NumPy on the predictions), FTRL follows TF1's update
formula, and their arguments are checked."""

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.estimator as est
from tensorweave import feature_column as fc

RNG = np.random.default_rng(11)


def _blobs(n, k, dim=2, spread=0.5):
    centers = np.array([[np.cos(a), np.sin(a)] for a in 2 * np.pi * np.arange(k) / k], np.float32) * 3
    y = RNG.integers(0, k, n)
    x = centers[y] + spread * RNG.standard_normal((n, dim)).astype(np.float32)
    return x.astype(np.float32), y.astype(np.int64)


def _input(x, y=None, epochs=1, shuffle=False, batch_size=32, **extra):
    feats = {"x": x, **extra}
    return est.inputs.numpy_input_fn(feats, y, batch_size=batch_size, num_epochs=epochs, shuffle=shuffle)


CONFIG = est.RunConfig(tf_random_seed=2, save_checkpoints_steps=None, save_checkpoints_secs=600)


def test_binary_dnn_classifier_learns_and_reports_tf_metrics(tmp_path):
    x, y = _blobs(300, 2)
    c = est.DNNClassifier([16, 8], [fc.numeric_column("x", shape=2)], model_dir=str(tmp_path), config=CONFIG,
                          optimizer="Adam")
    c.train(_input(x, y, epochs=10, shuffle=True))
    result = c.evaluate(_input(x, y, batch_size=100))
    assert set(result) == {"accuracy", "accuracy_baseline", "auc", "auc_precision_recall", "average_loss",
                           "label/mean", "loss", "precision", "prediction/mean", "recall", "global_step"}
    assert result["accuracy"] > 0.95 and result["auc"] > 0.95
    preds = list(c.predict(_input(x)))
    assert set(preds[0]) == {"logits", "logistic", "probabilities", "class_ids", "classes"}
    p = np.array([q["logistic"][0] for q in preds])
    ids = np.array([q["class_ids"][0] for q in preds])
    np.testing.assert_allclose([q["probabilities"] for q in preds], np.stack([1 - p, p], 1), atol=1e-6)
    assert [q["classes"][0] for q in preds[:5]] == [str(i).encode() for i in ids[:5]]
    # the metrics agree with NumPy on the model's own predictions
    np.testing.assert_allclose(result["accuracy"], np.mean(ids == y), rtol=1e-5)
    np.testing.assert_allclose(result["label/mean"], y.mean(), rtol=1e-5)
    np.testing.assert_allclose(result["prediction/mean"], p.mean(), rtol=1e-4)
    np.testing.assert_allclose(result["accuracy_baseline"], max(y.mean(), 1 - y.mean()), rtol=1e-5)
    tp = np.sum((ids == 1) & (y == 1))
    np.testing.assert_allclose(result["precision"], tp / np.sum(ids == 1), rtol=1e-5)
    np.testing.assert_allclose(result["recall"], tp / np.sum(y == 1), rtol=1e-5)
    z = np.array([q["logits"][0] for q in preds], np.float64)
    per_example = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    np.testing.assert_allclose(result["average_loss"], per_example.mean(), rtol=1e-3)
    # the training loss is the sum over the batch (TF1's default): 'loss' is the mean of 3 batch sums
    np.testing.assert_allclose(result["loss"], per_example.sum() / 3, rtol=1e-3)
    names = c.get_variable_names()
    assert {"dnn/hiddenlayer_0/kernel", "dnn/hiddenlayer_1/bias", "dnn/logits/kernel"} <= set(names)


def test_multiclass_with_label_vocabulary_and_weights(tmp_path):
    x, y = _blobs(300, 3)
    names = np.array(["north", "west", "south"])[y]
    weight = np.where(y == 0, 2.0, 1.0).astype(np.float32)
    c = est.DNNClassifier([16], [fc.numeric_column("x", shape=2)], model_dir=str(tmp_path), n_classes=3,
                          label_vocabulary=["north", "west", "south"], weight_column="w", dropout=0.1,
                          config=CONFIG, optimizer=lambda: tw.train.AdamOptimizer(0.05))
    c.train(_input(x, names, epochs=10, shuffle=True, w=weight))
    result = c.evaluate(_input(x, names, batch_size=300, w=weight))
    assert set(result) == {"accuracy", "average_loss", "loss", "global_step"}
    assert result["accuracy"] > 0.9
    preds = list(c.predict(_input(x[:20], w=weight[:20])))
    assert preds[0]["probabilities"].shape == (3,) and preds[0]["logits"].shape == (3,)
    got = [q["classes"][0].decode() for q in preds]
    assert np.mean(np.array(got) == names[:20]) > 0.8
    ids = np.array([q["class_ids"][0] for q in preds])
    assert [["north", "west", "south"][i] for i in ids] == got


def test_dnn_regressor_and_linear_regressor(tmp_path):
    x = RNG.uniform(-1, 1, (200, 2)).astype(np.float32)
    y = (2.0 * x[:, :1] - x[:, 1:] + 1.0).astype(np.float32)
    cols = [fc.numeric_column("x", shape=2)]
    dnn = est.DNNRegressor([16], cols, model_dir=str(tmp_path / "dnn"), config=CONFIG,
                           optimizer=tw.train.AdamOptimizer(0.02))
    dnn.train(_input(x, y, epochs=20, shuffle=True))
    r = dnn.evaluate(_input(x, y, batch_size=200))
    assert set(r) == {"average_loss", "label/mean", "prediction/mean", "loss", "global_step"}
    assert r["average_loss"] < 0.05
    lin = est.LinearRegressor(cols, model_dir=str(tmp_path / "lin"), config=CONFIG)   # FTRL by default
    lin.train(_input(x, y, epochs=30, shuffle=True))
    w = lin.get_variable_value("linear/linear_model/x/weights")
    b = lin.get_variable_value("linear/linear_model/bias_weights")
    np.testing.assert_allclose(w[:, 0], [2.0, -1.0], atol=0.15)
    np.testing.assert_allclose(b, [1.0], atol=0.15)
    preds = list(lin.predict(_input(x[:4])))
    assert set(preds[0]) == {"predictions"}
    np.testing.assert_allclose([p["predictions"][0] for p in preds], (x[:4] @ w + b)[:, 0], rtol=1e-5)
    np.testing.assert_allclose(lin.evaluate(_input(x, y, batch_size=200))["prediction/mean"],
                               np.mean(x @ w + b), rtol=1e-4)


def test_linear_classifier_with_categorical_and_bucketized_columns(tmp_path):
    n = 400
    color = RNG.choice(["red", "green", "blue"], n)
    age = RNG.uniform(0, 100, n).astype(np.float32)
    y = ((color == "red") | (age > 50)).astype(np.int64)    # linear in the one-hot columns, needs both
    cols = [fc.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"]),
            fc.bucketized_column(fc.numeric_column("age"), [25.0, 50.0, 75.0])]
    c = est.LinearClassifier(cols, model_dir=str(tmp_path), config=CONFIG,
                             optimizer=lambda: est.FtrlOptimizer(0.5))
    inputs = {"color": color, "age": age}
    c.train(est.inputs.numpy_input_fn(inputs, y, batch_size=20, num_epochs=5, shuffle=True))
    acc = c.evaluate(est.inputs.numpy_input_fn(inputs, y, batch_size=400, shuffle=False))["accuracy"]
    assert acc > 0.95
    w = c.get_variable_value("linear/linear_model/color/weights")[:, 0]
    buckets = c.get_variable_value("linear/linear_model/age_bucketized/weights")[:, 0]
    assert w[0] > max(w[1], w[2]) and min(buckets[2:]) > max(buckets[:2])   # red, and age > 50, raise the score


def test_ftrl_follows_tf1_update_formula():
    lr, l1, l2, init = 0.3, 0.05, 0.1, 0.1
    v0 = np.array([0.5, -1.0, 2.0], np.float32)
    grads = [np.array([0.2, -0.4, 0.1], np.float32), np.array([-0.3, 0.05, 0.6], np.float32)]
    var = tw.Variable(v0)
    g = tw.placeholder(tw.float32, [3])
    opt = est.FtrlOptimizer(lr, l1_regularization_strength=l1, l2_regularization_strength=l2,
                            initial_accumulator_value=init)
    step = opt.apply_gradients([(g, var)])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        got = [sess.run([step, var], {g: gr})[1].copy() for gr in grads]
    accum, linear, w = np.full(3, init), np.zeros(3), v0.astype(np.float64)
    expected = []
    for gr in grads:
        new_accum = accum + gr * gr
        linear = linear + gr - (np.sqrt(new_accum) - np.sqrt(accum)) / lr * w
        quadratic = np.sqrt(new_accum) / lr + 2 * l2
        w = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, 0.0)
        accum = new_accum
        expected.append(w)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert sorted(s.op.name for s in opt.variables()) == ["Variable/Ftrl", "Variable/Ftrl_1"]


def test_canned_arguments_are_checked(tmp_path):
    cols = [fc.numeric_column("x", shape=2)]
    with pytest.raises(tw.errors.InvalidArgumentError, match="n_classes must be an int > 1"):
        est.DNNClassifier([4], cols, n_classes=1)
    with pytest.raises(tw.errors.InvalidArgumentError, match="label_vocabulary has 2 entries but n_classes is 3"):
        est.LinearClassifier(cols, n_classes=3, label_vocabulary=["a", "b"])
    with pytest.raises(tw.errors.InvalidArgumentError, match="invalid loss_reduction"):
        est.DNNRegressor([4], cols, loss_reduction="none")
    with pytest.raises(tw.errors.UnimplementedError, match="batch_norm"):
        est.DNNClassifier([4], cols, batch_norm=True)
    x, y = _blobs(20, 2)
    bad_opt = est.DNNClassifier([4], cols, model_dir=str(tmp_path / "o"), optimizer="Adadelta")
    with pytest.raises(tw.errors.InvalidArgumentError, match="unsupported optimizer name 'Adadelta'"):
        bad_opt.train(_input(x, y))
    strings = est.DNNClassifier([4], cols, model_dir=str(tmp_path / "s"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="pass label_vocabulary"):
        strings.train(_input(x, np.array(["a", "b"])[y]))
    not_dict = est.LinearRegressor(cols, model_dir=str(tmp_path / "d"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="features should be a dict"):
        not_dict.train(est.inputs.numpy_input_fn(x, y.astype(np.float32), shuffle=False))
    out_of_range = est.DNNClassifier([4], cols, model_dir=str(tmp_path / "r"))
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"labels must be class ids in \[0, 2\)"):
        out_of_range.train(_input(x, y + 1))
