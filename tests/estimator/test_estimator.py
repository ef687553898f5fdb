"""tw.estimator.Estimator with a custom model_fn: the train / evaluate / predict round trip
through checkpoints (a second Estimator on the same model_dir restores and continues),
EstimatorSpec validation, model_fn and input_fn signatures, hooks and listeners, warm
starts, summaries, and the errors for bad input."""

import logging
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.estimator as est
from tensorweave import metrics

RNG = np.random.default_rng(3)
X = RNG.standard_normal((40, 3)).astype(np.float32)
TRUE_W = np.array([[1.5], [-2.0], [0.5]], np.float32)
Y = X @ TRUE_W + 0.25 + 0.3 * RNG.standard_normal((40, 1)).astype(np.float32)


def linear_model_fn(features, labels, mode, params, config):
    """y = x @ w + b, trained by gradient descent (learning rate in params)."""
    x = features["x"]
    pred = tw.layers.dense(x, 1, name="linear")
    if mode == est.ModeKeys.PREDICT:
        return est.EstimatorSpec(mode, predictions={"y": pred, "double": 2.0 * pred})
    loss = tw.reduce_mean(tw.square(pred - labels))
    if mode == est.ModeKeys.EVAL:
        return est.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "mae": metrics.mean_absolute_error(labels, pred), "rmse": metrics.root_mean_squared_error(labels, pred)})
    train_op = tw.train.GradientDescentOptimizer(params["lr"]).minimize(loss, global_step=tw.train.get_global_step())
    return est.EstimatorSpec(mode, loss=loss, train_op=train_op)


def numpy_fn(x=X, y=Y, **kw):
    kw.setdefault("shuffle", False)
    return est.inputs.numpy_input_fn({"x": x}, y, **kw)


def _linear(model_dir, lr=0.1, **config):
    return est.Estimator(linear_model_fn, model_dir=str(model_dir), params={"lr": lr},
                         config=est.RunConfig(tf_random_seed=1, **config))


def test_train_evaluate_predict_round_trip_through_a_second_estimator(tmp_path):
    e = _linear(tmp_path)
    assert e.train(numpy_fn(batch_size=8, num_epochs=None, shuffle=True), steps=60) is e
    assert e.latest_checkpoint().endswith("model.ckpt-60")
    assert e.get_variable_value("global_step") == 60
    assert {"linear/kernel", "linear/bias", "global_step"} <= set(e.get_variable_names())
    w, b = e.get_variable_value("linear/kernel"), e.get_variable_value("linear/bias")
    np.testing.assert_allclose(w, TRUE_W, atol=0.2)

    # one batch of all 40 examples: 'loss' is exactly the MSE of the checkpoint's model
    result = e.evaluate(numpy_fn(batch_size=40))
    pred = X @ w + b
    assert set(result) == {"mae", "rmse", "loss", "global_step"} and result["global_step"] == 60
    np.testing.assert_allclose(result["loss"], np.mean((pred - Y) ** 2), rtol=1e-4)
    np.testing.assert_allclose(result["mae"], np.mean(np.abs(pred - Y)), rtol=1e-4)
    np.testing.assert_allclose(result["rmse"], np.sqrt(np.mean((pred - Y) ** 2)), rtol=1e-4)
    # several batches: 'loss' is the mean of the batches' losses (TF1's definition)
    batches = e.evaluate(numpy_fn(batch_size=16))
    per_batch = [np.mean((pred[i:i + 16] - Y[i:i + 16]) ** 2) for i in (0, 16, 32)]
    np.testing.assert_allclose(batches["loss"], np.mean(per_batch), rtol=1e-4)
    assert e.evaluate(numpy_fn(batch_size=16), steps=1)["loss"] == pytest.approx(per_batch[0], rel=1e-4)

    first = list(e.predict(est.inputs.numpy_input_fn({"x": X}, batch_size=7, shuffle=False)))
    assert len(first) == 40 and set(first[0]) == {"y", "double"}
    np.testing.assert_allclose(np.stack([p["y"] for p in first]), pred, rtol=1e-5)

    # A second Estimator on the same directory restores the same model ...
    e2 = _linear(tmp_path)
    again = list(e2.predict(est.inputs.numpy_input_fn({"x": X}, batch_size=7, shuffle=False), predict_keys="y"))
    assert set(again[0]) == {"y"}
    np.testing.assert_array_equal(np.stack([p["y"] for p in again]), np.stack([p["y"] for p in first]))
    # ... and training continues from the saved global step
    e2.train(numpy_fn(batch_size=8, num_epochs=None), steps=10)
    assert e2.get_variable_value("global_step") == 70
    assert e2.evaluate(numpy_fn(batch_size=40))["global_step"] == 70


def test_training_ends_with_the_input_and_logs_loss_and_step_rate(tmp_path, caplog):
    e = _linear(tmp_path, log_step_count_steps=2)
    with caplog.at_level(logging.INFO):
        e.train(numpy_fn(batch_size=10, num_epochs=2))     # 80 examples: 8 steps, then OutOfRange
    assert e.get_variable_value("global_step") == 8
    text = caplog.text
    assert "loss = " in text and "step = 1" in text and "global_step/sec: " in text
    assert "Loss for final step" in text


def test_max_steps_and_steps(tmp_path, caplog):
    e = _linear(tmp_path)
    e.train(numpy_fn(num_epochs=None, batch_size=4), max_steps=5)
    assert e.get_variable_value("global_step") == 5
    with caplog.at_level(logging.INFO):
        e.train(numpy_fn(num_epochs=None, batch_size=4), max_steps=5)
    assert "Skipping training since max_steps has already saved" in caplog.text
    e.train(numpy_fn(num_epochs=None, batch_size=4), max_steps=7)
    assert e.get_variable_value("global_step") == 7
    with pytest.raises(tw.errors.InvalidArgumentError, match="both steps and max_steps"):
        e.train(numpy_fn(), steps=1, max_steps=2)
    with pytest.raises(tw.errors.InvalidArgumentError, match="steps must be an int > 0"):
        e.train(numpy_fn(), steps=0)


def test_model_fn_without_train_op_in_train_mode_is_a_clear_error(tmp_path):
    def model_fn(features, labels, mode):
        loss = tw.reduce_mean(tw.layers.dense(features["x"], 1) - labels)
        return est.EstimatorSpec(mode, loss=loss)
    e = est.Estimator(model_fn, model_dir=str(tmp_path))
    with pytest.raises(tw.errors.InvalidArgumentError, match="mode='train'.*missing train_op.*minimize"):
        e.train(numpy_fn(), steps=1)
    assert e.latest_checkpoint() is None


def test_estimator_spec_checks_types_and_what_each_mode_needs():
    x = tw.constant([[1.0, 2.0]])
    loss = tw.reduce_sum(x)
    train_op = tw.no_op()
    with pytest.raises(TypeError, match="loss must be a Tensor"):
        est.EstimatorSpec(est.ModeKeys.EVAL, loss=1.0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="loss must be a scalar"):
        est.EstimatorSpec(est.ModeKeys.EVAL, loss=x)
    with pytest.raises(tw.errors.InvalidArgumentError, match="missing loss"):
        est.EstimatorSpec(est.ModeKeys.TRAIN, train_op=train_op)
    with pytest.raises(tw.errors.InvalidArgumentError, match="missing predictions"):
        est.EstimatorSpec(est.ModeKeys.PREDICT)
    with pytest.raises(TypeError, match=r"predictions\['p'\] must be a Tensor"):
        est.EstimatorSpec(est.ModeKeys.PREDICT, predictions={"p": [1.0]})
    with pytest.raises(TypeError, match="train_op must be an Operation or Tensor"):
        est.EstimatorSpec(est.ModeKeys.TRAIN, loss=loss, train_op="step")
    with pytest.raises(TypeError, match=r"\(metric_value, update_op\) pairs.*key: 'acc'"):
        est.EstimatorSpec(est.ModeKeys.EVAL, loss=loss, eval_metric_ops={"acc": loss})
    with pytest.raises(TypeError, match="SessionRunHook"):
        est.EstimatorSpec(est.ModeKeys.TRAIN, loss=loss, train_op=train_op, training_hooks=[object()])
    with pytest.raises(tw.errors.InvalidArgumentError, match="mode='predict' unrecognized"):
        est.EstimatorSpec("predict", predictions=x)
    with tw.Graph().as_default():
        other = tw.constant(1.0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="must be from the default graph"):
        est.EstimatorSpec(est.ModeKeys.EVAL, loss=other)
    spec = est.EstimatorSpec(est.ModeKeys.TRAIN, loss=tw.reshape(loss, [1]), train_op=train_op)
    assert spec.loss.shape.ndims == 0 and spec.eval_metric_ops == {} and spec.scaffold is not None
    with pytest.raises(tw.errors.InvalidArgumentError, match="missing train_op"):
        spec._replace(train_op=None)


def test_evaluate_and_variable_queries_without_a_checkpoint(tmp_path):
    e = _linear(tmp_path / "empty")
    for call in (lambda: e.evaluate(numpy_fn()), e.get_variable_names, lambda: e.get_variable_value("w")):
        with pytest.raises(tw.errors.NotFoundError, match="no checkpoint.*empty") as info:
            call()
        assert isinstance(info.value, ValueError)   # what TF1 raises there
    with pytest.raises(tw.errors.NotFoundError, match="does not exist"):
        e.evaluate(numpy_fn(), checkpoint_path=str(tmp_path / "nope" / "model.ckpt-1"))


def test_model_fn_and_input_fn_signatures(tmp_path):
    seen = {}

    def model_fn(features, labels, config, mode):   # any order, any subset
        seen["config"], seen["mode"] = config, mode
        return linear_model_fn(features, labels, mode, {"lr": 0.1}, config)

    def input_fn(params, mode):
        seen["params"], seen["input_mode"] = params, mode
        return {"x": tw.constant(X)}, tw.constant(Y)
    e = est.Estimator(model_fn, model_dir=str(tmp_path))
    e.train(input_fn, steps=2)
    assert seen["mode"] == seen["input_mode"] == "train" and seen["config"] is e.config and seen["params"] == {}

    with pytest.raises(tw.errors.InvalidArgumentError, match="'features' argument"):
        est.Estimator(lambda inputs, labels: None)
    with pytest.raises(tw.errors.InvalidArgumentError, match="does not take a 'params' argument"):
        est.Estimator(lambda features, labels: None, params={"a": 1})
    with pytest.raises(tw.errors.InvalidArgumentError, match="unexpected arguments \\['extra'\\]"):
        est.Estimator(lambda features, extra: None)
    no_labels = est.Estimator(lambda features, mode: None, model_dir=str(tmp_path / "b"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="does not take labels, but input_fn returns labels"):
        no_labels.train(numpy_fn(), steps=1)
    not_a_spec = est.Estimator(lambda features, labels: {"loss": 1}, model_dir=str(tmp_path / "c"))
    with pytest.raises(tw.errors.InvalidArgumentError, match="should return a tw.estimator.EstimatorSpec"):
        not_a_spec.train(numpy_fn(), steps=1)
    with pytest.raises(TypeError, match="input_fn must be callable"):
        e.train(numpy_fn()(), steps=1)
    with pytest.raises(TypeError, match="SessionRunHook"):
        e.train(numpy_fn(), steps=1, hooks=[lambda: None])
    with pytest.raises(tw.errors.InvalidArgumentError, match="model_dir is set both"):
        est.Estimator(linear_model_fn, model_dir=str(tmp_path / "x"), params={},
                      config=est.RunConfig(model_dir=str(tmp_path / "y")))


def test_temporary_model_dir_is_logged(caplog):
    with caplog.at_level(logging.WARNING):
        e = est.Estimator(linear_model_fn, params={"lr": 0.1})
    try:
        assert os.path.isdir(e.model_dir) and e.config.model_dir == e.model_dir
        assert f"Using temporary folder as model directory: {e.model_dir}" in caplog.text
    finally:
        os.rmdir(e.model_dir)


class _FakeIterator:
    def __init__(self, queue):
        self._q = queue

    def get_next(self):
        x, y = self._q.dequeue_many(10)
        return {"x": x}, y


class _FakeDataset:
    """Anything with make_one_shot_iterator() is taken as a Dataset (duck typing): here a
    closed queue holding 40 examples, so the input ends after four batches."""

    def make_one_shot_iterator(self):
        q = tw.FIFOQueue(64, [tw.float32, tw.float32], shapes=[[3], [1]])
        enqueue = q.enqueue_many([tw.constant(X), tw.constant(Y)])
        with tw.control_dependencies([enqueue]):
            close = q.close()
        tw.add_to_collection("fake_dataset_fill", close)
        return _FakeIterator(q)


class _RunOnce(tw.train.SessionRunHook):
    def __init__(self, key):
        self._key = key

    def after_create_session(self, session, coord):
        for op in tw.get_collection(self._key):
            session.run(op)


def test_input_fn_returning_a_dataset_like_object(tmp_path):
    e = _linear(tmp_path)
    e.train(lambda: _FakeDataset(), hooks=[_RunOnce("fake_dataset_fill")])
    assert e.get_variable_value("global_step") == 4


def test_input_fn_returning_a_tw_data_dataset(tmp_path):
    try:
        import tensorweave.data as tw_data
        with tw.Graph().as_default():
            tw_data.Dataset.from_tensor_slices(np.zeros(2, np.float32)).make_one_shot_iterator().get_next()
    except (ImportError, tw.errors.NotFoundError) as e:
        pytest.skip(f"tw.data is not available yet: {e}")

    def input_fn():
        return tw_data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(8)
    e = _linear(tmp_path)
    e.train(input_fn)
    assert e.get_variable_value("global_step") == 5
    assert len(list(e.predict(input_fn))) == 40


def test_hooks_listeners_and_evaluation_hooks_run(tmp_path):
    class Count(tw.train.SessionRunHook):
        def __init__(self):
            self.runs = self.began = self.ended = 0

        def begin(self):
            self.began += 1

        def after_run(self, run_context, run_values):
            self.runs += 1

        def end(self, session):
            self.ended += 1

    class Listener(tw.train.CheckpointSaverListener):
        def __init__(self):
            self.saves = []

        def after_save(self, session, global_step_value):
            self.saves.append(global_step_value)

    train_hook, eval_hook, listener = Count(), Count(), Listener()

    def model_fn(features, labels, mode):
        spec = linear_model_fn(features, labels, mode, {"lr": 0.1}, None)
        return spec._replace(evaluation_hooks=[eval_hook]) if mode == est.ModeKeys.EVAL else spec
    e = est.Estimator(model_fn, model_dir=str(tmp_path), config=est.RunConfig(save_checkpoints_steps=3))
    e.train(numpy_fn(num_epochs=None, batch_size=4), steps=7, hooks=[train_hook], saving_listeners=[listener])
    assert (train_hook.began, train_hook.runs, train_hook.ended) == (1, 7, 1)
    assert listener.saves == [0, 3, 6, 7]
    e.evaluate(numpy_fn(batch_size=10))
    assert (eval_hook.runs, eval_hook.ended) == (4, 1)
    no_saving = est.Estimator(model_fn, model_dir=str(tmp_path / "n"),
                              config=est.RunConfig(save_checkpoints_secs=None))
    with pytest.raises(tw.errors.InvalidArgumentError, match="saving_listeners need checkpoints"):
        no_saving.train(numpy_fn(), steps=1, saving_listeners=[listener])


def test_warm_start_initializes_from_another_model(tmp_path):
    a = _linear(tmp_path / "a")
    a.train(numpy_fn(num_epochs=None), steps=20)
    b = est.Estimator(linear_model_fn, model_dir=str(tmp_path / "b"), params={"lr": 0.0},
                      warm_start_from=str(tmp_path / "a"))
    b.train(numpy_fn(), steps=1)     # learning rate 0: the warm-started values stay
    for name in ("linear/kernel", "linear/bias"):
        np.testing.assert_array_equal(b.get_variable_value(name), a.get_variable_value(name))
    assert b.get_variable_value("global_step") == 1   # only trainable variables are warm-started


def test_predict_options(tmp_path, caplog):
    e = _linear(tmp_path)
    with caplog.at_level(logging.WARNING):
        untrained = list(e.predict(est.inputs.numpy_input_fn({"x": X[:3]}, shuffle=False)))
    assert "running initialization to predict" in caplog.text and len(untrained) == 3
    e.train(numpy_fn(), steps=2)
    batches = list(e.predict(est.inputs.numpy_input_fn({"x": X}, batch_size=16, shuffle=False),
                             yield_single_examples=False))
    assert [b["y"].shape for b in batches] == [(16, 1), (16, 1), (8, 1)]
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"predict_keys \['z'\]"):
        list(e.predict(numpy_fn(), predict_keys=["z"]))

    def single(features, mode):
        return est.EstimatorSpec(mode, predictions=tw.reduce_sum(features["x"], 1))
    values = list(est.Estimator(single, model_dir=str(tmp_path / "s")).predict(
        est.inputs.numpy_input_fn({"x": X[:5]}, shuffle=False)))
    np.testing.assert_allclose(values, X[:5].sum(1), rtol=1e-6)


def test_nan_loss_stops_training(tmp_path):
    def model_fn(features, labels, mode):
        w = tw.get_variable("w", [], initializer=tw.ones_initializer())
        loss = tw.log(w - 2.0)    # NaN
        train_op = tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tw.train.get_global_step())
        return est.EstimatorSpec(mode, loss=loss, train_op=train_op)
    with pytest.raises(est.NanLossDuringTrainingError, match="NaN loss during training"):
        est.Estimator(model_fn, model_dir=str(tmp_path)).train(numpy_fn(), steps=3)


def test_summaries_of_training_and_evaluation(tmp_path):
    pytest.importorskip("tensorboard", reason="summaries need the optional tensorboard package")

    def tags(directory):
        found = set()
        for name in os.listdir(directory):
            if name.startswith("events.out.tfevents"):
                for record in tw.python_io.tf_record_iterator(os.path.join(directory, name)):
                    event = tw.summary.Event.FromString(record)
                    found |= {v.tag for v in event.summary.value}
        return found
    e = _linear(tmp_path, save_summary_steps=1)
    e.train(numpy_fn(batch_size=10), steps=3)
    tw.summary.FileWriterCache.clear()   # flush and close the writers
    assert "loss" in tags(str(tmp_path))
    e.evaluate(numpy_fn(batch_size=10), name="holdout")
    tw.summary.FileWriterCache.clear()
    assert {"loss", "mae", "rmse"} <= tags(str(tmp_path / "eval_holdout"))
