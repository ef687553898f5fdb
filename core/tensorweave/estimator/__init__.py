"""``tw.estimator``: TF1's high-level training API (docs/estimator.md).

- ``model_fn.py``: ``ModeKeys``, ``EstimatorSpec`` (validated per mode);
- ``run_config.py``: ``RunConfig``, the cluster from ``TW_CONFIG``/``TF_CONFIG``;
- ``estimator.py``: ``Estimator`` (train / evaluate / predict on MonitoredSession, checkpoints
  and summaries in ``model_dir``), ``WarmStartSettings`` (``NanTensorHook`` and ``FtrlOptimizer`` live in ``tw.train``);
- ``training.py``: ``train_and_evaluate``, ``TrainSpec``, ``EvalSpec``, the roles of a cluster's tasks;
- ``inputs.py``: ``inputs.numpy_input_fn`` on the queue-based input helpers of ``tw.train``;
- ``canned.py``: ``DNNClassifier``, ``DNNRegressor``, ``LinearClassifier``, ``LinearRegressor``.
"""

from tensorweave.estimator import inputs
from tensorweave.estimator.canned import DNNClassifier, DNNRegressor, LinearClassifier, LinearRegressor
from tensorweave.estimator.estimator import Estimator, WarmStartSettings
from tensorweave.estimator.model_fn import EstimatorSpec, ModeKeys
from tensorweave.estimator.run_config import RunConfig, TaskType
from tensorweave.estimator.training import EvalSpec, TrainSpec, train_and_evaluate
from tensorweave.train.ftrl import FtrlOptimizer  # also here, where the linear estimators name it
from tensorweave.train.hooks import NanLossDuringTrainingError, NanTensorHook

__all__ = [
    "Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TaskType", "TrainSpec", "EvalSpec", "train_and_evaluate",
    "WarmStartSettings", "NanTensorHook", "NanLossDuringTrainingError", "DNNClassifier", "DNNRegressor",
    "LinearClassifier", "LinearRegressor", "FtrlOptimizer", "inputs",
]
