"""The canned estimators: ``DNNClassifier``, ``DNNRegressor``, ``LinearClassifier``,
``LinearRegressor`` (TF1's ``tf.estimator`` canned models), and the heads they share.

A model turns the features into logits (``dnn/hiddenlayer_<i>``, ``dnn/logits``, or
``linear/linear_model/...`` as TF1 names them); a *head* turns logits into predictions, a
loss, a train op and eval metrics, with TF1's keys:

- binary classification (``n_classes=2``): predictions ``logits``, ``logistic``,
  ``probabilities``, ``class_ids``, ``classes``; sigmoid cross-entropy; metrics ``accuracy``,
  ``average_loss``, ``accuracy_baseline``, ``auc``, ``auc_precision_recall``, ``precision``,
  ``recall``, ``label/mean``, ``prediction/mean`` (plus the Estimator's ``loss``);
- multi-class: ``logits``, ``probabilities``, ``class_ids``, ``classes``; softmax
  cross-entropy; ``accuracy``, ``average_loss``;
- regression: ``predictions``; squared error; ``average_loss``, ``label/mean``,
  ``prediction/mean``.

The training loss is the per-example loss times ``weight_column``, reduced by
``loss_reduction`` (TF1's default: the sum over the batch). ``classes`` are the label
vocabulary's strings, or the class ids as strings. Optimizers are given as an instance, a
callable returning one, or a name (``'Adagrad'``, ``'Adam'``, ``'Ftrl'``, ``'RMSProp'``,
``'SGD'``) with TF1's default learning rates (0.05 for DNNs; ``min(0.2, 1/sqrt(#columns))``
for linear models). ``FtrlOptimizer`` (the linear models' default, FTRL-proximal as TF1's
``ApplyFtrl``) is built here from ordinary ops, since ``tw.train`` has no fused kernel for it.

Sparse features reach the DNNs through ``embedding_column``/``indicator_column`` and the
linear models directly (``tw.feature_column``). ``input_layer_partitioner`` (DNNs) and
``partitioner`` (linear models) are the partitioners of the variable scopes
``dnn/input_from_feature_columns`` and ``linear``; without one nothing is partitioned.
"""

from __future__ import annotations

import math

from tensorweave import feature_column as fc
from tensorweave import layers
from tensorweave import metrics as metrics_lib
from tensorweave import summary as summary_lib
from tensorweave.estimator.estimator import Estimator, summaries_available
from tensorweave.estimator.model_fn import EstimatorSpec, ModeKeys
from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, init_ops, math_ops, nn_ops
from tensorweave.ops import variable_scope as vs
from tensorweave.train.adagrad import AdagradOptimizer
from tensorweave.train.adam import AdamOptimizer
from tensorweave.train.ftrl import FtrlOptimizer
from tensorweave.train.gradient_descent import GradientDescentOptimizer
from tensorweave.train.optimizer import Optimizer
from tensorweave.train.rmsprop import RMSPropOptimizer
from tensorweave.train.training_util import get_global_step

__all__ = ["DNNClassifier", "DNNRegressor", "LinearClassifier", "LinearRegressor", "FtrlOptimizer"]

_E = errors.InvalidArgumentError

# tw.losses.Reduction's values (TF1's strings), repeated here so the heads do not depend on tw.losses.
SUM = "weighted_sum"
SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
MEAN = "weighted_mean"
SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
_REDUCTIONS = (SUM, SUM_OVER_BATCH_SIZE, MEAN, SUM_BY_NONZERO_WEIGHTS)


# ----------------------------------------------------------------------------------------
# FTRL
_OPTIMIZERS = {"Adagrad": AdagradOptimizer, "Adam": AdamOptimizer, "Ftrl": FtrlOptimizer,
               "RMSProp": RMSPropOptimizer, "SGD": GradientDescentOptimizer}


def _optimizer_instance(opt, learning_rate, who):
    if isinstance(opt, str):
        cls = _OPTIMIZERS.get(opt)
        if cls is None:
            raise _E(f"{who}: unsupported optimizer name {opt!r}; supported names are {sorted(_OPTIMIZERS)}")
        return cls(learning_rate=learning_rate)
    if callable(opt) and not isinstance(opt, Optimizer):
        opt = opt()
    if not isinstance(opt, Optimizer):
        raise _E(f"{who}: optimizer must be a tw.train.Optimizer, a callable returning one, or a name; given {opt!r}")
    return opt


# ----------------------------------------------------------------------------------------
# heads
def _runtime_check(ok, message):
    flag = math_ops.cast(math_ops.reduce_all(ok), dtypes.float32)
    return nn_ops.check_numerics(math_ops.log(flag), message)


def _check_loss_reduction(loss_reduction, who):
    if loss_reduction not in _REDUCTIONS:
        raise _E(f"{who}: invalid loss_reduction {loss_reduction!r}; expected one of {_REDUCTIONS} "
                 "(tw.losses.Reduction, NONE excepted)")
    return loss_reduction


def _weight_key(weight_column, who):
    if weight_column is None:
        return None
    if isinstance(weight_column, str):
        return weight_column
    if isinstance(weight_column, fc._NumericColumn):
        if weight_column.shape != (1,):
            raise _E(f"{who}: weight_column must have shape (1,), got {weight_column.shape}")
        return weight_column.key
    raise _E(f"{who}: weight_column must be a string or a numeric_column, given {weight_column!r}")


class _Head:
    """Predictions, loss, train op and metrics from logits (see the module docstring)."""

    def __init__(self, kind, logits_dimension, n_classes=None, weight_column=None, label_vocabulary=None,
                 loss_reduction=SUM, who=""):
        self.kind = kind
        self.logits_dimension = logits_dimension
        self.n_classes = n_classes
        self.weight_key = _weight_key(weight_column, who)
        self.label_vocabulary = label_vocabulary
        self.loss_reduction = _check_loss_reduction(loss_reduction, who)
        self.who = who

    # -- labels and weights --
    def _weights(self, features, like):
        if self.weight_key is None:
            return None
        if self.weight_key not in features:
            raise _E(f"{self.who}: weight_column {self.weight_key!r} is not in the features (it has "
                     f"{sorted(features)})")
        w = math_ops.cast(convert_to_tensor(features[self.weight_key]), dtypes.float32)
        return array_ops.reshape(w, [-1, 1]) * array_ops.ones_like(like, dtype=dtypes.float32)

    def _labels_2d(self, labels, width):
        if labels is None:
            raise _E(f"{self.who}: labels are required for training and evaluation, but the input_fn returned none")
        if isinstance(labels, dict):
            raise _E(f"{self.who}: labels must be a tensor, not a dict ({sorted(labels)})")
        labels = convert_to_tensor(labels)
        if labels.shape.ndims == 1 or labels.shape.ndims is None:
            labels = array_ops.reshape(labels, [-1, width])
        elif labels.shape.ndims != 2 or labels.shape.dims[1] not in (None, width):
            raise _E(f"{self.who}: labels must have shape [batch_size, {width}] (or [batch_size] when {width} is 1), "
                     f"got '{labels.name}' of shape {labels.shape}")
        return labels

    def _class_ids(self, labels):
        labels = self._labels_2d(labels, 1)
        n = self.n_classes
        if self.label_vocabulary is not None:
            if labels.dtype is not dtypes.string:
                raise _E(f"{self.who}: with label_vocabulary, labels must be strings, got {labels.dtype.name}")
            vocab = array_ops.constant(list(self.label_vocabulary), dtypes.string)
            eq = math_ops.equal(labels, vocab)                                      # [batch, n]
            ok = _runtime_check(math_ops.reduce_any(eq, axis=1),
                                f"{self.who}: a label is not in label_vocabulary {list(self.label_vocabulary)}")
            with get_default_graph().control_dependencies([ok]):
                ids = math_ops.argmax(math_ops.cast(eq, dtypes.int32), axis=1)
            return array_ops.reshape(ids, [-1, 1])
        if labels.dtype is dtypes.string:
            raise _E(f"{self.who}: labels are strings; pass label_vocabulary to map them to class ids")
        if not labels.dtype.is_integer and not (n == 2 and labels.dtype.is_floating):
            raise _E(f"{self.who}: labels dtype should be integer (class ids), instead got {labels.dtype.name}")
        in_range = math_ops.logical_and(math_ops.greater_equal(labels, math_ops.cast(0, labels.dtype)),
                                        math_ops.less(labels, math_ops.cast(n, labels.dtype)))
        ok = _runtime_check(in_range, f"{self.who}: labels must be class ids in [0, {n})")
        with get_default_graph().control_dependencies([ok]):
            return array_ops.identity(labels)

    def _reduce(self, unweighted, weights):
        weighted = unweighted if weights is None else unweighted * weights
        total = math_ops.reduce_sum(weighted)
        r = self.loss_reduction
        if r == SUM:
            return total
        if r == SUM_OVER_BATCH_SIZE:
            return total / math_ops.cast(array_ops.size(unweighted), dtypes.float32)
        w = array_ops.ones_like(unweighted) if weights is None else weights
        den = math_ops.reduce_sum(w) if r == MEAN else math_ops.reduce_sum(
            math_ops.cast(math_ops.not_equal(w, 0.0), dtypes.float32))
        # 0 when every weight is 0 (TF1's safe division)
        zero = math_ops.cast(math_ops.equal(den, 0.0), dtypes.float32)
        return total / (den + zero) * (1.0 - zero)

    # -- the spec --
    def create_estimator_spec(self, features, mode, logits, labels, optimizer_fn):
        with get_default_graph().name_scope("head"):
            predictions = self._predictions(logits)
            if mode == ModeKeys.PREDICT:
                return EstimatorSpec(mode, predictions=predictions)
            unweighted, label_values = self._unweighted_loss(logits, labels)
            weights = self._weights(features, unweighted)
            loss = self._reduce(unweighted, weights)
            if mode == ModeKeys.EVAL:
                return EstimatorSpec(mode, predictions=predictions, loss=loss,
                                     eval_metric_ops=self._metrics(predictions, label_values, unweighted, weights))
        if summaries_available():
            summary_lib.scalar("loss", loss)
            weighted = unweighted if weights is None else unweighted * weights
            summary_lib.scalar("average_loss", math_ops.reduce_mean(weighted))
        train_op = optimizer_fn().minimize(loss, global_step=get_global_step())
        return EstimatorSpec(mode, predictions=predictions, loss=loss, train_op=train_op)

    def _classes(self, class_ids):
        names = list(self.label_vocabulary) if self.label_vocabulary is not None else [
            str(i) for i in range(self.n_classes)]
        return array_ops.gather(array_ops.constant(names, dtypes.string), class_ids, name="str_classes")

    def _predictions(self, logits):
        if self.kind == "regression":
            return {"predictions": logits}
        if self.kind == "binary":
            logistic = math_ops.sigmoid(logits, name="logistic")
            two = array_ops.concat([array_ops.zeros_like(logits), logits], 1, name="two_class_logits")
            probabilities = nn_ops.softmax(two, name="probabilities")
            class_ids = array_ops.expand_dims(math_ops.argmax(two, axis=1), -1, name="class_ids")
            return {"logits": logits, "logistic": logistic, "probabilities": probabilities, "class_ids": class_ids,
                    "classes": self._classes(class_ids)}
        probabilities = nn_ops.softmax(logits, name="probabilities")
        class_ids = array_ops.expand_dims(math_ops.argmax(logits, axis=1), -1, name="class_ids")
        return {"logits": logits, "probabilities": probabilities, "class_ids": class_ids,
                "classes": self._classes(class_ids)}

    def _unweighted_loss(self, logits, labels):
        if self.kind == "regression":
            labels = self._labels_2d(labels, self.logits_dimension)
            if not (labels.dtype.is_floating or labels.dtype.is_integer):
                raise _E(f"{self.who}: labels must be numbers, got {labels.dtype.name}")
            labels = math_ops.cast(labels, dtypes.float32)
            return math_ops.squared_difference(logits, labels), labels
        ids = self._class_ids(labels)
        if self.kind == "binary":
            y = math_ops.cast(ids, dtypes.float32)
            return nn_ops.sigmoid_cross_entropy_with_logits(labels=y, logits=logits), ids
        per_example = nn_ops.sparse_softmax_cross_entropy_with_logits(
            labels=array_ops.reshape(math_ops.cast(ids, dtypes.int64), [-1]), logits=logits)
        return array_ops.expand_dims(per_example, -1), ids

    def _metrics(self, predictions, labels, unweighted, weights):
        m = {"average_loss": metrics_lib.mean(unweighted, weights, name="average_loss")}
        if self.kind == "regression":
            m["label/mean"] = metrics_lib.mean(labels, weights, name="label/mean")
            m["prediction/mean"] = metrics_lib.mean(predictions["predictions"], weights, name="prediction/mean")
            return m
        class_ids = predictions["class_ids"]
        label_ids = math_ops.cast(labels, dtypes.int64)
        m["accuracy"] = metrics_lib.accuracy(label_ids, class_ids, weights, name="accuracy")
        if self.kind == "binary":
            y = math_ops.cast(labels, dtypes.float32)
            logistic = predictions["logistic"]
            label_mean = metrics_lib.mean(y, weights, name="label/mean")
            m["label/mean"] = label_mean
            m["prediction/mean"] = metrics_lib.mean(logistic, weights, name="prediction/mean")
            m["accuracy_baseline"] = tuple(math_ops.maximum(t, 1.0 - t) for t in label_mean)
            m["auc"] = metrics_lib.auc(y, logistic, weights, name="auc")
            m["auc_precision_recall"] = metrics_lib.auc(y, logistic, weights, curve="PR", name="auc_precision_recall")
            m["precision"] = metrics_lib.precision(label_ids, class_ids, weights, name="precision")
            m["recall"] = metrics_lib.recall(label_ids, class_ids, weights, name="recall")
        return m


def _classifier_head(n_classes, weight_column, label_vocabulary, loss_reduction, who):
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes <= 1:
        raise _E(f"{who}: n_classes must be an int > 1, given {n_classes!r}")
    if label_vocabulary is not None:
        if not isinstance(label_vocabulary, list | tuple) or not all(isinstance(v, str) for v in label_vocabulary):
            raise _E(f"{who}: label_vocabulary must be a list of strings, given {label_vocabulary!r}")
        if len(label_vocabulary) != n_classes:
            raise _E(f"{who}: label_vocabulary has {len(label_vocabulary)} entries but n_classes is {n_classes}")
        if len(set(label_vocabulary)) != len(label_vocabulary):
            raise _E(f"{who}: label_vocabulary has duplicate entries: {list(label_vocabulary)}")
    kind = "binary" if n_classes == 2 else "multiclass"
    return _Head(kind, 1 if n_classes == 2 else n_classes, n_classes, weight_column, label_vocabulary,
                 loss_reduction, who)


def _regression_head(label_dimension, weight_column, loss_reduction, who):
    if isinstance(label_dimension, bool) or not isinstance(label_dimension, int) or label_dimension < 1:
        raise _E(f"{who}: label_dimension must be an int >= 1, given {label_dimension!r}")
    return _Head("regression", label_dimension, None, weight_column, None, loss_reduction, who)


# ----------------------------------------------------------------------------------------
# models
def _check_feature_columns(feature_columns, who):
    if feature_columns is None:
        raise _E(f"{who}: feature_columns must be given")
    cols = list(feature_columns) if not (isinstance(feature_columns, tuple) and hasattr(feature_columns, "_fields")) \
        else [feature_columns]
    if not cols:
        raise _E(f"{who}: feature_columns must not be empty")
    return cols


def _check_features(features, who):
    if not isinstance(features, dict):
        raise _E(f"{who}: features should be a dict of tensors (feature name -> tensor) for feature columns, "
                 f"given {type(features).__name__}" + (f" '{features.name}'" if isinstance(features, Tensor) else ""))


def _dnn_logits(features, mode, hidden_units, feature_columns, logits_dimension, activation_fn, dropout,
               input_layer_partitioner=None):
    with vs.variable_scope("dnn"):
        with vs.variable_scope("input_from_feature_columns", partitioner=input_layer_partitioner):
            net = fc.input_layer(features, feature_columns)
        for i, units in enumerate(hidden_units):
            net = layers.dense(net, units, activation=activation_fn,
                               kernel_initializer=init_ops.glorot_uniform_initializer(), name=f"hiddenlayer_{i}")
            if dropout is not None and mode == ModeKeys.TRAIN:
                net = layers.dropout(net, rate=dropout, training=True)
        return layers.dense(net, logits_dimension, activation=None,
                            kernel_initializer=init_ops.glorot_uniform_initializer(), name="logits")


def _linear_logits(features, feature_columns, logits_dimension, sparse_combiner, partitioner=None):
    with vs.variable_scope("linear", partitioner=partitioner):
        return fc.linear_model(features, feature_columns, units=logits_dimension, sparse_combiner=sparse_combiner)


def _check_partitioner(partitioner, what, who):
    if partitioner is not None and not callable(partitioner):
        raise _E(f"{who}: {what} must be a partitioner (a callable, e.g. tw.fixed_size_partitioner(2)), given "
                 f"{partitioner!r}")


def _check_dnn_args(hidden_units, dropout, batch_norm, input_layer_partitioner, who):
    try:
        units = [int(u) for u in hidden_units]
    except (TypeError, ValueError):
        raise _E(f"{who}: hidden_units must be a list of positive ints, given {hidden_units!r}") from None
    if any(u <= 0 for u in units):
        raise _E(f"{who}: hidden_units must be positive, given {units}")
    if dropout is not None and not 0.0 <= float(dropout) < 1.0:
        raise _E(f"{who}: dropout must be a probability in [0, 1), given {dropout!r}")
    if batch_norm:
        raise errors.UnimplementedError(f"{who}: batch_norm=True is not supported")
    _check_partitioner(input_layer_partitioner, "input_layer_partitioner", who)
    return units


class _DNN(Estimator):
    _default_lr = 0.05

    def __init__(self, head, hidden_units, feature_columns, model_dir, optimizer, activation_fn, dropout, config,
                 warm_start_from, who, input_layer_partitioner=None):
        cols = _check_feature_columns(feature_columns, who)

        def model_fn(features, labels, mode, config):
            _check_features(features, who)
            logits = _dnn_logits(features, mode, hidden_units, cols, head.logits_dimension, activation_fn, dropout,
                                 input_layer_partitioner)
            return head.create_estimator_spec(
                features, mode, logits, labels, lambda: _optimizer_instance(optimizer, self._default_lr, who))
        super().__init__(model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class DNNClassifier(_DNN):
    """A feed-forward network classifier over ``feature_columns`` (dense columns: numeric,
    bucketized, indicator and embedding columns): ``hidden_units`` fully connected layers with
    ``activation_fn``, then logits. ``input_layer_partitioner`` partitions the input layer's
    variables (the embedding tables, ``dnn/input_from_feature_columns/...``)."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, n_classes=2, weight_column=None,
                 label_vocabulary=None, optimizer="Adagrad", activation_fn=nn_ops.relu, dropout=None,
                 input_layer_partitioner=None, config=None, warm_start_from=None, loss_reduction=SUM,
                 batch_norm=False):
        who = "DNNClassifier"
        units = _check_dnn_args(hidden_units, dropout, batch_norm, input_layer_partitioner, who)
        head = _classifier_head(n_classes, weight_column, label_vocabulary, loss_reduction, who)
        super().__init__(head, units, feature_columns, model_dir, optimizer, activation_fn, dropout, config,
                         warm_start_from, who, input_layer_partitioner)


class DNNRegressor(_DNN):
    """A feed-forward network regressor (``label_dimension`` outputs) over ``feature_columns``."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, label_dimension=1, weight_column=None,
                 optimizer="Adagrad", activation_fn=nn_ops.relu, dropout=None, input_layer_partitioner=None,
                 config=None, warm_start_from=None, loss_reduction=SUM, batch_norm=False):
        who = "DNNRegressor"
        units = _check_dnn_args(hidden_units, dropout, batch_norm, input_layer_partitioner, who)
        head = _regression_head(label_dimension, weight_column, loss_reduction, who)
        super().__init__(head, units, feature_columns, model_dir, optimizer, activation_fn, dropout, config,
                         warm_start_from, who, input_layer_partitioner)


class _Linear(Estimator):
    def __init__(self, head, feature_columns, model_dir, optimizer, config, partitioner, warm_start_from,
                 sparse_combiner, who):
        cols = _check_feature_columns(feature_columns, who)
        _check_partitioner(partitioner, "partitioner", who)
        if sparse_combiner not in ("sum", "mean", "sqrtn"):
            raise _E(f"{who}: sparse_combiner must be 'sum', 'mean' or 'sqrtn', given {sparse_combiner!r}")
        lr = min(0.2, 1.0 / math.sqrt(len(cols)))

        def model_fn(features, labels, mode, config):
            _check_features(features, who)
            logits = _linear_logits(features, cols, head.logits_dimension, sparse_combiner, partitioner)
            return head.create_estimator_spec(features, mode, logits, labels,
                                              lambda: _optimizer_instance(optimizer, lr, who))
        super().__init__(model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class LinearClassifier(_Linear):
    """A linear (logistic / softmax regression) classifier over ``feature_columns`` (dense
    and categorical columns; a categorical column's ids pick rows of its weights, combined by
    ``sparse_combiner``). ``partitioner`` partitions the weights (``linear/linear_model/...``)."""

    def __init__(self, feature_columns, model_dir=None, n_classes=2, weight_column=None, label_vocabulary=None,
                 optimizer="Ftrl", config=None, partitioner=None, warm_start_from=None, loss_reduction=SUM,
                 sparse_combiner="sum"):
        who = "LinearClassifier"
        head = _classifier_head(n_classes, weight_column, label_vocabulary, loss_reduction, who)
        super().__init__(head, feature_columns, model_dir, optimizer, config, partitioner, warm_start_from,
                         sparse_combiner, who)


class LinearRegressor(_Linear):
    """A linear regressor (``label_dimension`` outputs) over ``feature_columns``."""

    def __init__(self, feature_columns, model_dir=None, label_dimension=1, weight_column=None, optimizer="Ftrl",
                 config=None, partitioner=None, warm_start_from=None, loss_reduction=SUM, sparse_combiner="sum"):
        who = "LinearRegressor"
        head = _regression_head(label_dimension, weight_column, loss_reduction, who)
        super().__init__(head, feature_columns, model_dir, optimizer, config, partitioner, warm_start_from,
                         sparse_combiner, who)
