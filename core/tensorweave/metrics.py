"""``tw.metrics``: TF1's streaming metrics (``tf.metrics``).

Each metric keeps its running state in *metric variables*: local variables (collections
``GraphKeys.LOCAL_VARIABLES`` and ``"metric_variables"``, never trainable, never saved in
checkpoints) created under a variable scope named after the metric (``accuracy/total``,
``accuracy/count``; ``accuracy_1/...`` for a second one). A metric returns a pair
``(value, update_op)``: running ``update_op`` folds one batch into the state and returns the
metric over everything seen so far; ``value`` reads the metric without changing it.
``tw.local_variables_initializer()`` (run by every ``MonitoredSession``) resets the state.

As in TF1: labels and predictions whose ranks differ by one lose a trailing dimension of
size 1 (``[batch, 1]`` against ``[batch]``); ``weights`` (None, a scalar, or a tensor that
broadcasts to the values) multiply each element's contribution, and a weight of 0 leaves an
element out; a ratio whose denominator is 0 is 0. Values are accumulated in float32.
``metrics_collections`` / ``updates_collections`` name collections the value / update op
are added to.

Checks that TF1 makes with assert ops (``auc``'s predictions in [0, 1],
``mean_per_class_accuracy``'s labels in range) fail the step with an ``InvalidArgumentError``
naming the metric: there is no Assert op, so they are ``check_numerics`` of a value that is
-inf exactly when the condition is false.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, math_ops, nn_ops, state_ops
from tensorweave.ops import variable_scope as vs
from tensorweave.ops.variables import Variable

__all__ = [
    "METRIC_VARIABLES", "accuracy", "mean", "mean_squared_error", "root_mean_squared_error", "mean_absolute_error",
    "true_positives", "false_positives", "true_negatives", "false_negatives", "precision", "recall", "auc",
    "mean_per_class_accuracy",
]

METRIC_VARIABLES = "metric_variables"   # TF1's GraphKeys.METRIC_VARIABLES


# ----------------------------------------------------------------------------------------
# helpers
def metric_variable(shape, dtype, name):
    """A zero-initialised local variable in ``LOCAL_VARIABLES`` and ``METRIC_VARIABLES``."""
    g = get_default_graph()
    # The state must not depend on whatever the caller's ops are waiting for.
    with g.control_dependencies(None):
        return Variable(array_ops.zeros(shape, dtype), trainable=False, name=name,
                        collections=[GraphKeys.LOCAL_VARIABLES, METRIC_VARIABLES])


def _tensor(x, what, fn, dtype=None):
    if x is None:
        raise errors.InvalidArgumentError(f"tw.metrics.{fn}: {what} is required, got None")
    try:
        return convert_to_tensor(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise errors.InvalidArgumentError(f"tw.metrics.{fn}: {what} must be a tensor, got {x!r} ({e})") from None


def _squeeze_last(t):
    return array_ops.squeeze(t, axis=[-1])


def _remove_squeezable_dimensions(predictions, labels, weights):
    """Drop a trailing size-1 dimension where two ranks differ by exactly one (TF1's rule),
    from labels against predictions and from weights against predictions."""
    p_rank = predictions.shape.ndims
    if labels is not None and p_rank is not None and labels.shape.ndims is not None:
        diff = p_rank - labels.shape.ndims
        if diff == 1 and predictions.shape.dims[-1] == 1:
            predictions = _squeeze_last(predictions)
            p_rank -= 1
        elif diff == -1 and labels.shape.dims[-1] == 1:
            labels = _squeeze_last(labels)
    if weights is not None and p_rank is not None and weights.shape.ndims not in (None, 0):
        if weights.shape.ndims - p_rank == 1 and weights.shape.dims[-1] == 1:
            weights = _squeeze_last(weights)
    return predictions, labels, weights


def _check_compatible(a, b, what_a, what_b, fn):
    if not a.shape.is_compatible_with(b.shape):
        raise errors.InvalidArgumentError(
            f"tw.metrics.{fn}: {what_a} '{a.name}' has shape {a.shape} but {what_b} '{b.name}' has shape "
            f"{b.shape}; they must match (a trailing dimension of size 1 is removed where the ranks differ by one)")


def _broadcast_weights(weights, values):
    """``weights`` as float32 multiplied out to the shape of ``values``."""
    weights = math_ops.cast(weights, dtypes.float32)
    return weights * array_ops.ones_like(values, dtype=dtypes.float32)


def _safe_div(num, den, name=None):
    """num / den where den != 0, else 0 (elementwise)."""
    zero = math_ops.cast(math_ops.equal(den, 0.0), dtypes.float32)
    return math_ops.multiply(num / (den + zero), 1.0 - zero, name=name)


def _collect(value, update, metrics_collections, updates_collections):
    g = get_default_graph()
    if metrics_collections:
        g.add_to_collections(metrics_collections, value)
    if updates_collections:
        g.add_to_collections(updates_collections, update)
    return value, update


def _runtime_check(ok, message):
    """A tensor that fails the step with ``message`` unless the bool tensor ``ok`` is all true."""
    flag = math_ops.cast(math_ops.reduce_all(ok), dtypes.float32)
    return nn_ops.check_numerics(math_ops.log(flag), message)


def _as_bool(t):
    return t if t.dtype is dtypes.bool_ else math_ops.cast(t, dtypes.bool_)


# ----------------------------------------------------------------------------------------
# means
def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of ``values`` over every batch seen: ``total / count``."""
    with vs.variable_scope(name, "mean"):
        values = math_ops.cast(_tensor(values, "values", "mean"), dtypes.float32)
        total = metric_variable([], dtypes.float32, "total")
        count = metric_variable([], dtypes.float32, "count")
        if weights is None:
            num_values = math_ops.cast(array_ops.size(values), dtypes.float32)
        else:
            weights = _tensor(weights, "weights", "mean")
            values, _, weights = _remove_squeezable_dimensions(values, None, weights)
            weights = _broadcast_weights(weights, values)
            values = values * weights
            num_values = math_ops.reduce_sum(weights)
        # The value first: a variable's read is made once, and must not wait for the input.
        value = _safe_div(total, count, "value")
        batch_total = math_ops.reduce_sum(values)
        update_total = state_ops.assign_add(total, batch_total)
        # Only once the values exist: a step whose input ran out must not count a batch.
        with get_default_graph().control_dependencies([batch_total]):
            update_count = state_ops.assign_add(count, num_values)
        update = _safe_div(update_total, update_count, "update_op")
        return _collect(value, update, metrics_collections, updates_collections)


def _pair(labels, predictions, weights, fn):
    labels = _tensor(labels, "labels", fn)
    predictions = _tensor(predictions, "predictions", fn)
    weights = None if weights is None else _tensor(weights, "weights", fn)
    predictions, labels, weights = _remove_squeezable_dimensions(predictions, labels, weights)
    _check_compatible(predictions, labels, "predictions", "labels", fn)
    return labels, predictions, weights


def accuracy(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """How often ``predictions`` equal ``labels`` (both e.g. class ids)."""
    labels, predictions, weights = _pair(labels, predictions, weights, "accuracy")
    if labels.dtype is not predictions.dtype:
        predictions = math_ops.cast(predictions, labels.dtype)
    is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections, name or "accuracy")


def _float_pair(labels, predictions, weights, fn):
    labels, predictions, weights = _pair(labels, predictions, weights, fn)
    return math_ops.cast(labels, dtypes.float32), math_ops.cast(predictions, dtypes.float32), weights


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                       name=None):
    """The mean of ``(predictions - labels) ** 2``."""
    labels, predictions, weights = _float_pair(labels, predictions, weights, "mean_squared_error")
    return mean(math_ops.squared_difference(predictions, labels), weights, metrics_collections,
                updates_collections, name or "mean_squared_error")


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                            name=None):
    """The square root of ``mean_squared_error``."""
    labels, predictions, weights = _float_pair(labels, predictions, weights, "root_mean_squared_error")
    with vs.variable_scope(name, "root_mean_squared_error"):
        mse, update_mse = mean(math_ops.squared_difference(predictions, labels), weights)
        value = math_ops.sqrt(mse, name="value")
        update = math_ops.sqrt(update_mse, name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                        name=None):
    """The mean of ``|predictions - labels|``."""
    labels, predictions, weights = _float_pair(labels, predictions, weights, "mean_absolute_error")
    return mean(math_ops.abs(predictions - labels), weights, metrics_collections, updates_collections,
                name or "mean_absolute_error")


# ----------------------------------------------------------------------------------------
# counts of a binary condition
def _count_condition(condition, weights, metrics_collections, updates_collections):
    count = metric_variable([], dtypes.float32, "count")
    values = math_ops.cast(condition, dtypes.float32)
    if weights is not None:
        values = values * _broadcast_weights(weights, values)
    value = array_ops.identity(count, name="value")
    update = state_ops.assign_add(count, math_ops.reduce_sum(values), name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def _confusion_count(kind, labels, predictions, weights, metrics_collections, updates_collections, name):
    with vs.variable_scope(name, kind):
        labels, predictions, weights = _pair(labels, predictions, weights, kind)
        lab, pred = _as_bool(labels), _as_bool(predictions)
        lab_n, pred_n = math_ops.logical_not(lab), math_ops.logical_not(pred)
        cond = {"true_positives": (lab, pred), "false_positives": (lab_n, pred),
                "true_negatives": (lab_n, pred_n), "false_negatives": (lab, pred_n)}[kind]
        return _count_condition(math_ops.logical_and(*cond), weights, metrics_collections, updates_collections)


def true_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) number of elements where ``labels`` and ``predictions`` are both true
    (non-zero values count as true)."""
    return _confusion_count("true_positives", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


def false_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The (weighted) number of elements predicted true whose label is false."""
    return _confusion_count("false_positives", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


def true_negatives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                   name=None):
    """The (weighted) number of elements predicted false whose label is false."""
    return _confusion_count("true_negatives", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


def false_negatives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The (weighted) number of elements predicted false whose label is true."""
    return _confusion_count("false_negatives", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


def _ratio_of_counts(kind, other, labels, predictions, weights, metrics_collections, updates_collections, name):
    with vs.variable_scope(name, kind):
        tp, tp_update = true_positives(labels, predictions, weights)
        other_fn = false_positives if other == "fp" else false_negatives
        o, o_update = other_fn(labels, predictions, weights)
        value = _safe_div(tp, tp + o, "value")
        update = _safe_div(tp_update, tp_update + o_update, "update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def precision(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """``true_positives / (true_positives + false_positives)`` (0 when nothing was predicted true)."""
    return _ratio_of_counts("precision", "fp", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


def recall(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """``true_positives / (true_positives + false_negatives)`` (0 when no label is true)."""
    return _ratio_of_counts("recall", "fn", labels, predictions, weights, metrics_collections,
                            updates_collections, name)


# ----------------------------------------------------------------------------------------
# area under a curve
_KEPSILON = 1e-7   # puts the end thresholds just outside [0, 1], so every prediction falls between


def _auc_thresholds(num_thresholds, thresholds):
    if thresholds is not None:
        inner = [float(t) for t in thresholds]
        return [0.0 - _KEPSILON] + inner + [1.0 + _KEPSILON]
    if not isinstance(num_thresholds, int) or isinstance(num_thresholds, bool) or num_thresholds <= 1:
        raise errors.InvalidArgumentError(f"tw.metrics.auc: num_thresholds must be an int > 1, got {num_thresholds!r}")
    inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    return [0.0 - _KEPSILON] + inner + [1.0 + _KEPSILON]


def _area(tp, fn, tn, fp, curve, summation_method, n, name):
    """The area under the ROC or PR curve from the confusion counts at ``n`` thresholds."""
    eps = 1.0e-6
    if curve == "PR" and summation_method == "careful_interpolation":
        # Interpolates precision linearly in the number of predicted positives between two
        # thresholds (Davis & Goadrich 2006), as TF1 does.
        dtp = tp[: n - 1] - tp[1:]
        p = tp + fp
        dp = p[: n - 1] - p[1:]
        slope = _safe_div(dtp, dp)
        intercept = tp[1:] - slope * p[1:]
        both_pos = math_ops.cast(math_ops.logical_and(math_ops.greater(p[: n - 1], 0.0),
                                                      math_ops.greater(p[1:], 0.0)), dtypes.float32)
        ratio = both_pos * _safe_div(p[: n - 1], p[1:]) + (1.0 - both_pos)
        pieces = _safe_div(slope * (dtp + intercept * math_ops.log(ratio)), tp[1:] + fn[1:])
        return math_ops.reduce_sum(pieces, name=name)
    rec = (tp + eps) / (tp + fn + eps)
    if curve == "ROC":
        x, y = fp / (fp + tn + eps), rec
    else:
        x, y = rec, (tp + eps) / (tp + fp + eps)
    dx = x[: n - 1] - x[1:]
    if summation_method in ("trapezoidal", "careful_interpolation"):
        heights = (y[: n - 1] + y[1:]) / 2.0
    elif summation_method == "minoring":
        heights = math_ops.minimum(y[: n - 1], y[1:])
    else:
        heights = math_ops.maximum(y[: n - 1], y[1:])
    return math_ops.reduce_sum(dx * heights, name=name)


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None, updates_collections=None,
        curve="ROC", name=None, summation_method="trapezoidal", thresholds=None):
    """The area under the ROC curve (``curve="ROC"``) or precision-recall curve (``"PR"``),
    from true/false positive/negative counts at ``num_thresholds`` thresholds spread evenly
    over [0, 1] (or at ``thresholds``). ``predictions`` are probabilities in [0, 1];
    ``labels`` are bools or 0/1. ``summation_method``: ``"trapezoidal"`` (default),
    ``"careful_interpolation"``, ``"minoring"`` or ``"majoring"``."""
    if curve not in ("ROC", "PR"):
        raise errors.InvalidArgumentError(f"tw.metrics.auc: curve must be 'ROC' or 'PR', got {curve!r}")
    methods = ("trapezoidal", "careful_interpolation", "minoring", "majoring")
    if summation_method not in methods:
        raise errors.InvalidArgumentError(
            f"tw.metrics.auc: summation_method must be one of {methods}, got {summation_method!r}")
    thr = _auc_thresholds(num_thresholds, thresholds)
    n = len(thr)
    with vs.variable_scope(name, "auc"):
        labels, predictions, weights = _pair(labels, predictions, weights, "auc")
        predictions = math_ops.cast(predictions, dtypes.float32)
        in_range = math_ops.logical_and(math_ops.greater_equal(predictions, 0.0),
                                        math_ops.less_equal(predictions, 1.0))
        checked = _runtime_check(in_range, f"tw.metrics.auc '{get_default_graph().get_name_scope()}': predictions "
                                           "must be in [0, 1]")
        with get_default_graph().control_dependencies([checked]):
            pred = array_ops.reshape(predictions, [1, -1])
        lab = array_ops.reshape(math_ops.cast(_as_bool(labels), dtypes.float32), [1, -1])
        w = None
        if weights is not None:
            w = array_ops.reshape(_broadcast_weights(weights, predictions), [1, -1])
        above = math_ops.cast(math_ops.greater(pred, array_ops.constant(thr, dtypes.float32, shape=[n, 1])),
                              dtypes.float32)   # [thresholds, examples]
        below = 1.0 - above
        pos, neg = lab, 1.0 - lab
        if w is not None:
            pos, neg = pos * w, neg * w
        counts = {"tp": above * pos, "fn": below * pos, "tn": below * neg, "fp": above * neg}
        state, updates = {}, {}
        for key, per_example in counts.items():
            var_name = {"tp": "true_positives", "fn": "false_negatives", "tn": "true_negatives",
                        "fp": "false_positives"}[key]
            state[key] = metric_variable([n], dtypes.float32, var_name)
            updates[key] = state_ops.assign_add(state[key], math_ops.reduce_sum(per_example, axis=1))
        value = _area(state["tp"], state["fn"], state["tn"], state["fp"], curve, summation_method, n, "value")
        update = _area(updates["tp"], updates["fn"], updates["tn"], updates["fp"], curve, summation_method, n,
                       "update_op")
    return _collect(value, update, metrics_collections, updates_collections)


# ----------------------------------------------------------------------------------------
def mean_per_class_accuracy(labels, predictions, num_classes, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    """The accuracy of each class (correct predictions among the examples labelled with it),
    averaged over the ``num_classes`` classes. As in TF1, ``value`` is the mean and
    ``update_op`` returns the per-class accuracies after the update; a class never seen
    counts as accuracy 0."""
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes <= 0:
        raise errors.InvalidArgumentError(
            f"tw.metrics.mean_per_class_accuracy: num_classes must be a positive int, got {num_classes!r}")
    with vs.variable_scope(name, "mean_accuracy"):
        labels, predictions, weights = _pair(labels, predictions, weights, "mean_per_class_accuracy")
        if not labels.dtype.is_integer:
            raise errors.InvalidArgumentError(
                f"tw.metrics.mean_per_class_accuracy: labels must be class ids (integers), got {labels.dtype.name}")
        labels = array_ops.reshape(labels, [-1])
        predictions = math_ops.cast(array_ops.reshape(predictions, [-1]), labels.dtype)
        in_range = math_ops.logical_and(math_ops.greater_equal(labels, 0), math_ops.less(labels, num_classes))
        checked = _runtime_check(in_range, f"tw.metrics.mean_per_class_accuracy: labels must be in "
                                           f"[0, {num_classes})")
        with get_default_graph().control_dependencies([checked]):
            labels = array_ops.identity(labels)
        total = metric_variable([num_classes], dtypes.float32, "total")
        count = metric_variable([num_classes], dtypes.float32, "count")
        ones = array_ops.ones_like(labels, dtype=dtypes.float32)
        is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
        if weights is not None:
            w = array_ops.reshape(_broadcast_weights(weights, labels), [-1])
            ones, is_correct = ones * w, is_correct * w
        update_total = state_ops.assign_add(total, math_ops.unsorted_segment_sum(ones, labels, num_classes))
        update_count = state_ops.assign_add(count, math_ops.unsorted_segment_sum(is_correct, labels, num_classes))
        value = math_ops.reduce_mean(_safe_div(count, total), name="mean_accuracy")
        update = _safe_div(update_count, update_total, "update_op")
    return _collect(value, update, metrics_collections, updates_collections)
