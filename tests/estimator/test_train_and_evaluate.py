"""tw.estimator.train_and_evaluate: locally it alternates training and evaluation on new
checkpoints; on a cluster (TW_CONFIG) a ps task serves in its own process, the chief and a
worker train against it with the variables on the ps, and an evaluator evaluates the chief's
checkpoints."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.estimator as est
from tensorweave import metrics, plugins
from tensorweave.distributed import launcher

X = np.random.default_rng(5).standard_normal((64, 3)).astype(np.float32)
Y = X @ np.array([[1.0], [2.0], [-1.0]], np.float32)


class _StepsSeen(tw.train.SessionRunHook):
    """Records the global step of each evaluation (an evaluation hook)."""

    def __init__(self):
        self.steps = []

    def end(self, session):
        self.steps.append(int(session.run(tw.train.get_global_step())))


def make_model_fn(training_hooks=()):
    def model_fn(features, labels, mode):
        pred = tw.layers.dense(features, 1, name="dense")
        if mode == est.ModeKeys.PREDICT:
            return est.EstimatorSpec(mode, predictions=pred)
        loss = tw.reduce_mean(tw.square(pred - labels))
        train_op = tw.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=tw.train.get_global_step())
        return est.EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=training_hooks,
                                 eval_metric_ops={"mse": metrics.mean_squared_error(labels, pred)})
    return model_fn


def input_fn():
    return tw.constant(X), tw.constant(Y)


@pytest.fixture(autouse=True)
def _no_cluster_env(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TW_CONFIG", raising=False)


def test_local_evaluates_after_each_new_checkpoint(tmp_path):
    e = est.Estimator(make_model_fn(), model_dir=str(tmp_path),
                      config=est.RunConfig(save_checkpoints_steps=10, tf_random_seed=0))
    seen = _StepsSeen()
    result, exports = est.train_and_evaluate(e, est.TrainSpec(input_fn, max_steps=30),
                                             est.EvalSpec(input_fn, steps=2, hooks=[seen], throttle_secs=0))
    assert exports is None
    assert seen.steps == [10, 20, 30]          # not the step-0 checkpoint made before training
    assert result["global_step"] == 30 and set(result) == {"mse", "loss", "global_step"}
    assert result["loss"] < 0.1 and result["mse"] == pytest.approx(result["loss"], rel=1e-5)

    # max_steps already reached: no training, one evaluation of the checkpoint there is
    again, _ = est.train_and_evaluate(e, est.TrainSpec(input_fn, max_steps=30),
                                      est.EvalSpec(input_fn, steps=1, hooks=[seen], throttle_secs=0))
    assert seen.steps[3:] == [30] and again["global_step"] == 30


def test_local_throttle_keeps_the_first_and_the_last_evaluation(tmp_path):
    e = est.Estimator(make_model_fn(), model_dir=str(tmp_path), config=est.RunConfig(save_checkpoints_steps=5))
    seen = _StepsSeen()
    est.train_and_evaluate(e, est.TrainSpec(input_fn, max_steps=20),
                           est.EvalSpec(input_fn, steps=1, hooks=[seen], throttle_secs=3600))
    assert seen.steps == [5, 20]


def test_specs_are_checked():
    e = est.Estimator(make_model_fn(), model_dir="unused")
    with pytest.raises(TypeError, match="must be a tw.estimator.Estimator"):
        est.train_and_evaluate(object(), est.TrainSpec(input_fn), est.EvalSpec(input_fn))
    with pytest.raises(TypeError, match="train_spec must be a tw.estimator.TrainSpec"):
        est.train_and_evaluate(e, input_fn, est.EvalSpec(input_fn))
    with pytest.raises(tw.errors.InvalidArgumentError, match="max_steps must be a positive int"):
        est.TrainSpec(input_fn, max_steps=0)
    with pytest.raises(TypeError, match="input_fn must be callable"):
        est.EvalSpec(None)
    with pytest.raises(tw.errors.InvalidArgumentError, match="throttle_secs must be a number >= 0"):
        est.EvalSpec(input_fn, throttle_secs=-1)
    with pytest.raises(tw.errors.UnimplementedError, match="exporters"):
        est.EvalSpec(input_fn, exporters=[object()])


_PS_TASK = """
import threading
import tensorweave.estimator as est
from tensorweave.distributed import launcher

stop = threading.Event()
launcher.exit_with_parent(stop)     # never outlive the test process
estimator = est.Estimator(lambda features: None, model_dir={model_dir!r})
threading.Thread(target=est.train_and_evaluate, daemon=True,
                 args=(estimator, est.TrainSpec(lambda: None), est.EvalSpec(lambda: None))).start()
stop.wait()
"""


class _Devices(tw.train.SessionRunHook):
    """Records where the ops of the training graph were put (a training hook)."""

    def __init__(self):
        self.begun = threading.Event()

    def begin(self):
        g = tw.get_default_graph()
        self.devices = {op.name: op.device for op in g.get_operations()}
        self.begun.set()


@pytest.mark.serial  # starts a cluster's servers (conftest.py)
@pytest.mark.skipif("grpc" not in dict(plugins.registry().transports.items()),
                    reason="needs the grpc transport plugin (tensorweave-grpc)")
def test_ps_chief_worker_and_evaluator_through_tw_config(tmp_path, monkeypatch):
    model_dir = str(tmp_path / "model")
    chief_port, worker_port, ps_port = launcher.pick_ports(3)
    cluster = {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.1:{worker_port}"],
               "ps": [f"127.0.0.1:{ps_port}"]}

    def tw_config(task_type):
        return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}, "transport": "grpc"})

    env = dict(os.environ, TW_CONFIG=tw_config("ps"), **{launcher.PARENT_ENV: str(os.getpid())})
    ps = subprocess.Popen([sys.executable, "-c", _PS_TASK.format(model_dir=model_dir)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # The chief and the worker are threads of this process here (each with its own server);
        # RunConfig reads TW_CONFIG when the Estimator is made.
        trainers = {}
        for role in ("chief", "worker"):
            monkeypatch.setenv("TW_CONFIG", tw_config(role))
            hook = _Devices()
            trainers[role] = (est.Estimator(make_model_fn([hook]), model_dir=model_dir,
                                            config=est.RunConfig(save_checkpoints_steps=10)), hook)
        chief_config = trainers["chief"][0].config
        assert chief_config.is_chief and (chief_config.num_ps_replicas, chief_config.num_worker_replicas) == (1, 2)
        assert not trainers["worker"][0].config.is_chief
        results, errors_ = {}, []

        def train(role):
            try:   # each waits for the ps task to come up; the worker also for the chief's init
                results[role] = est.train_and_evaluate(trainers[role][0], est.TrainSpec(input_fn, max_steps=25),
                                                       est.EvalSpec(input_fn))
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors_.append(e)
        threads = {role: threading.Thread(target=train, args=(role,)) for role in trainers}
        # The worker first: once its session is being made it trains at least one step (it
        # waits for the chief to initialize); started after the chief, it could find max_steps
        # already reached and have nothing to do.
        threads["worker"].start()
        assert trainers["worker"][1].begun.wait(60) or errors_, "the worker did not start training"
        threads["chief"].start()
        for t in threads.values():
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads.values()), "training did not finish"
        if errors_:
            raise errors_[0]
        assert results == {"chief": (None, None), "worker": (None, None)}
        chief_devices = trainers["chief"][1].devices
        assert chief_devices["dense/kernel"].startswith("/job:ps/task:0")
        assert chief_devices["global_step"].startswith("/job:ps/task:0")
        assert chief_devices["dense/MatMul"].startswith("/job:chief/task:0")
        assert chief_devices["save/SaveV2"].startswith("/job:chief/task:0")   # this process writes checkpoints
        worker_devices = trainers["worker"][1].devices
        assert worker_devices["dense/kernel"].startswith("/job:ps/task:0")
        assert worker_devices["dense/MatMul"].startswith("/job:worker/task:0")
        assert ps.poll() is None, "the ps task serves until it is stopped"
        final_step = int(tw.train.load_variable(model_dir, "global_step"))
        assert final_step >= 25

        monkeypatch.setenv("TW_CONFIG", tw_config("evaluator"))
        evaluator = est.Estimator(make_model_fn(), model_dir=model_dir)
        result, _ = est.train_and_evaluate(evaluator, est.TrainSpec(input_fn, max_steps=25),
                                           est.EvalSpec(input_fn, steps=1, start_delay_secs=0, throttle_secs=0))
        assert result["global_step"] == final_step and result["loss"] < 0.1
    finally:
        ps.kill()
        out, _ = ps.communicate(timeout=30)
    assert b"Traceback" not in out, out.decode(errors="replace")
