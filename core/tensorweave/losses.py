"""``tw.losses``: TF1's loss functions, their weighting and reduction, and the loss
collections.

Each loss computes per-element losses, then ``compute_weighted_loss``: multiply by
``weights`` (a scalar, or a tensor of the losses' rank whose dimensions are 1 or equal to
theirs), reduce as ``reduction`` says, and add the result to ``loss_collection``
(``GraphKeys.LOSSES`` by default), where ``get_total_loss`` finds it. Reductions
(``tw.losses.Reduction``):

- ``SUM_BY_NONZERO_WEIGHTS`` (the default): the weighted sum divided by the number of
  elements whose weight is not zero (0 when there are none);
- ``MEAN``: the weighted sum divided by the sum of the weights;
- ``SUM_OVER_BATCH_SIZE``: the weighted sum divided by the number of elements;
- ``SUM``: the weighted sum; ``NONE``: the weighted losses, unreduced.

As TF1 does, a division by zero gives 0, labels are cast to the predictions' dtype, and
``softmax_cross_entropy``/``sigmoid_cross_entropy`` take ``label_smoothing``.
``get_variable(regularizer=...)`` and the layers' regularizers fill
``GraphKeys.REGULARIZATION_LOSSES``, which ``get_regularization_loss(es)`` and
``get_total_loss`` read.

One departure: TF1 computes most losses in float32 whatever the inputs; here float64
inputs give float64 losses (float16 and integer inputs are computed in float32 and the
result cast back as TF1 does).
"""

from __future__ import annotations

import numbers

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, math_ops, nn_ops

__all__ = [
    "Reduction", "compute_weighted_loss", "absolute_difference", "cosine_distance", "hinge_loss", "huber_loss",
    "log_loss", "mean_squared_error", "sigmoid_cross_entropy", "softmax_cross_entropy",
    "sparse_softmax_cross_entropy", "add_loss", "get_losses", "get_regularization_loss",
    "get_regularization_losses", "get_total_loss",
]

_E = errors.InvalidArgumentError


class Reduction:
    """How ``compute_weighted_loss`` reduces the weighted losses (see the module docstring)."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_OVER_NONZERO_WEIGHTS,
                cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise _E(f"invalid reduction {key!r}; expected one of tw.losses.Reduction.NONE, SUM, MEAN, "
                     "SUM_OVER_BATCH_SIZE, SUM_BY_NONZERO_WEIGHTS")


def _compute_dtype(dtype):
    return dtype if dtype in (dtypes.float32, dtypes.float64) else dtypes.float32


def _floats(fn, predictions, labels, pred_name="predictions", label_name="labels"):
    """``predictions`` and ``labels`` as tensors of one float dtype with compatible shapes."""
    if labels is None:
        raise _E(f"tw.losses.{fn}: {label_name} must not be None")
    if predictions is None:
        raise _E(f"tw.losses.{fn}: {pred_name} must not be None")
    p = convert_to_tensor(predictions, name=pred_name)
    dt = _compute_dtype(p.dtype)
    p = math_ops.cast(p, dt)
    lab = math_ops.cast(convert_to_tensor(labels, name=label_name), dt)
    if not p.shape.is_compatible_with(lab.shape):
        raise _E(f"tw.losses.{fn}: {pred_name} and {label_name} must have the same shape, got {pred_name} "
                 f"{p.shape} and {label_name} {lab.shape}")
    return p, lab


def _check_broadcastable(weights, losses, fn):
    """TF1's rule: weights are a scalar or have the losses' rank with each dimension 1 or
    equal to the losses' (checked where the shapes are known)."""
    ws, ls = weights.shape, losses.shape
    if ws.ndims == 0 or ws.ndims is None or ls.ndims is None:
        return
    if ws.ndims != ls.ndims:
        raise _E(f"tw.losses.{fn}: weights of shape {ws} cannot be broadcast to losses of shape {ls}: weights must "
                 f"be a scalar or have rank {ls.ndims}")
    for w, v in zip(ws.dims, ls.dims):
        if w is not None and v is not None and w != 1 and w != v:
            raise _E(f"tw.losses.{fn}: weights of shape {ws} cannot be broadcast to losses of shape {ls}: each "
                     "dimension must be 1 or the losses' size")


def _safe_div(numerator, denominator, name):
    """``numerator / denominator``, 0 where the denominator is 0 (TF's div_no_nan): the
    numerator is a sum of weighted losses, which is 0 too when every weight is."""
    is_zero = math_ops.cast(math_ops.equal(denominator, 0.0), denominator.dtype)
    return math_ops.truediv(numerator, math_ops.add(denominator, is_zero), name=name)


def _num_elements(losses):
    return math_ops.reduce_sum(array_ops.ones_like(losses), name="num_elements")


def _num_present(losses, weights):
    """How many elements of ``losses`` have a non-zero weight (weights broadcast)."""
    if isinstance(weights, numbers.Number) and weights != 0:
        return _num_elements(losses)
    with get_default_graph().name_scope("num_present"):
        present = math_ops.cast(math_ops.not_equal(weights, 0.0), losses.dtype)
        return math_ops.reduce_sum(math_ops.multiply(array_ops.ones_like(losses), present))


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``losses * weights`` reduced as ``reduction`` says, added to ``loss_collection``."""
    Reduction.validate(reduction)
    g = get_default_graph()
    with g.name_scope(scope or "weighted_loss"):
        losses = convert_to_tensor(losses, name="losses")
        input_dtype = losses.dtype
        if not input_dtype.is_floating:
            raise _E(f"tw.losses.compute_weighted_loss: losses must be floating-point, got {input_dtype.name} "
                     f"'{losses.name}'")
        dt = _compute_dtype(input_dtype)
        losses = math_ops.cast(losses, dt)
        raw_weights = weights
        weights = math_ops.cast(convert_to_tensor(weights, name="weights"), dt)
        _check_broadcastable(weights, losses, "compute_weighted_loss")
        weighted = math_ops.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            total = math_ops.reduce_sum(weighted)
            if reduction == Reduction.MEAN:
                loss = _safe_div(total, math_ops.reduce_sum(math_ops.multiply(array_ops.ones_like(losses), weights)),
                                 name="value")
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                loss = _safe_div(total, _num_present(losses, raw_weights if isinstance(raw_weights, numbers.Number)
                                                     else weights), name="value")
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _safe_div(total, _num_elements(losses), name="value")
            else:
                loss = total
        loss = math_ops.cast(loss, input_dtype)
        add_loss(loss, loss_collection)
        return loss


def _label_smoothing(value, fn):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise _E(f"tw.losses.{fn}: label_smoothing must be a number in [0, 1], got {value!r}")
    return float(value)


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``|predictions - labels|``, weighted and reduced."""
    with get_default_graph().name_scope(scope or "absolute_difference") as s:
        p, lab = _floats("absolute_difference", predictions, labels)
        losses = math_ops.abs(math_ops.subtract(p, lab))
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``(predictions - labels) ** 2``, weighted and reduced (by default: the mean)."""
    with get_default_graph().name_scope(scope or "mean_squared_error") as s:
        p, lab = _floats("mean_squared_error", predictions, labels)
        losses = math_ops.squared_difference(p, lab)
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``0.5 x^2`` for ``|x| <= delta``, ``delta (|x| - 0.5 delta)`` beyond, with
    ``x = predictions - labels``."""
    with get_default_graph().name_scope(scope or "huber_loss") as s:
        p, lab = _floats("huber_loss", predictions, labels)
        abs_error = math_ops.abs(math_ops.subtract(p, lab))
        quadratic = math_ops.minimum(abs_error, math_ops.cast(delta, p.dtype))
        linear = math_ops.subtract(abs_error, quadratic)
        losses = math_ops.add(math_ops.multiply(0.5, math_ops.square(quadratic)),
                              math_ops.multiply(math_ops.cast(delta, p.dtype), linear))
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None, loss_collection=GraphKeys.LOSSES,
             reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Binary cross-entropy of probabilities: ``-z log(p + eps) - (1 - z) log(1 - p + eps)``."""
    with get_default_graph().name_scope(scope or "log_loss") as s:
        p, lab = _floats("log_loss", predictions, labels)
        pos = math_ops.multiply(lab, math_ops.log(math_ops.add(p, epsilon)))
        neg = math_ops.multiply(math_ops.subtract(1.0, lab), math_ops.log(math_ops.add(math_ops.subtract(1.0, p),
                                                                                        epsilon)))
        losses = math_ops.negative(math_ops.add(pos, neg))
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``max(0, 1 - y * logits)`` with labels 0/1 mapped to ``y`` = -1/+1."""
    with get_default_graph().name_scope(scope or "hinge_loss") as s:
        x, lab = _floats("hinge_loss", logits, labels, pred_name="logits")
        signs = math_ops.subtract(math_ops.multiply(2.0, lab), 1.0)
        losses = nn_ops.relu(math_ops.subtract(1.0, math_ops.multiply(signs, x)))
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                    reduction=Reduction.SUM_BY_NONZERO_WEIGHTS, dim=None):
    """``1 - sum(labels * predictions, axis)`` for unit-normalised inputs (``dim`` is the old
    name of ``axis``, which is required)."""
    if dim is not None:
        if axis is not None:
            raise _E("tw.losses.cosine_distance: pass only one of axis and dim")
        axis = dim
    if axis is None:
        raise _E("tw.losses.cosine_distance: you must specify axis")
    with get_default_graph().name_scope(scope or "cosine_distance_loss") as s:
        p, lab = _floats("cosine_distance", predictions, labels)
        dots = math_ops.reduce_sum(math_ops.multiply(p, lab), axis=[axis], keep_dims=True)
        losses = math_ops.subtract(1.0, dots)
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Element-wise logistic loss of ``logits`` against 0/1 labels; ``label_smoothing``
    moves the labels towards 1/2: ``z (1 - s) + s / 2``."""
    ls = _label_smoothing(label_smoothing, "sigmoid_cross_entropy")
    with get_default_graph().name_scope(scope or "sigmoid_cross_entropy_loss") as s:
        x, lab = _floats("sigmoid_cross_entropy", logits, multi_class_labels, pred_name="logits",
                         label_name="multi_class_labels")
        if ls > 0:
            lab = math_ops.add(math_ops.multiply(lab, 1.0 - ls), 0.5 * ls)
        losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=lab, logits=x, name="xentropy")
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of ``softmax(logits)`` against one-hot (or distribution) labels, one
    loss per row; ``label_smoothing`` s gives ``labels (1 - s) + s / num_classes``. No
    gradient flows into the labels."""
    ls = _label_smoothing(label_smoothing, "softmax_cross_entropy")
    with get_default_graph().name_scope(scope or "softmax_cross_entropy_loss") as s:
        x, lab = _floats("softmax_cross_entropy", logits, onehot_labels, pred_name="logits",
                         label_name="onehot_labels")
        if ls > 0:
            n = lab.shape[-1] if lab.shape.ndims else None
            smooth_negatives = ls / n if n is not None else \
                math_ops.truediv(ls, math_ops.cast(array_ops.shape(lab)[-1], lab.dtype))
            lab = math_ops.add(math_ops.multiply(lab, 1.0 - ls), smooth_negatives)
        lab = array_ops.stop_gradient(lab, name="labels_stop_gradient")
        losses = nn_ops.softmax_cross_entropy_with_logits_v2(labels=lab, logits=x, name="xentropy")
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of ``softmax(logits)`` against integer class ``labels`` (shape
    ``logits.shape[:-1]``; a trailing dimension of 1 on labels or weights is dropped, as TF1
    does)."""
    if labels is None or logits is None:
        raise _E("tw.losses.sparse_softmax_cross_entropy: labels and logits must not be None")
    with get_default_graph().name_scope(scope or "sparse_softmax_cross_entropy_loss") as s:
        x = convert_to_tensor(logits, name="logits")
        lab = convert_to_tensor(labels, name="labels")
        if lab.dtype not in (dtypes.int32, dtypes.int64):
            raise _E(f"tw.losses.sparse_softmax_cross_entropy: labels must be int32 or int64 class indices, got "
                     f"{lab.dtype.name} '{lab.name}'")
        lab = _squeeze_last(lab, x.shape.ndims)
        if isinstance(weights, Tensor) or hasattr(weights, "_as_graph_element"):
            weights = _squeeze_last(convert_to_tensor(weights), x.shape.ndims)
        losses = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=x, name="xentropy")
        return compute_weighted_loss(losses, weights, s, loss_collection, reduction)


def _squeeze_last(t, logits_rank):
    """Drop a trailing dimension of size 1 when ``t`` has the logits' rank."""
    if logits_rank is not None and t.shape.ndims == logits_rank and t.shape[-1] == 1:
        return array_ops.squeeze(t, [-1])
    return t


# ---------------------------------------------------------------------------------------
# collections
def add_loss(loss, loss_collection=GraphKeys.LOSSES):
    """Add ``loss`` to ``loss_collection`` (None or empty: to no collection)."""
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES):
    """The losses in ``loss_collection`` (whose names match ``scope``, if given)."""
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None):
    """The losses in ``GraphKeys.REGULARIZATION_LOSSES`` (regularizers of variables and layers)."""
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    """The sum of the regularization losses, or a constant 0.0 when there are none."""
    losses = get_regularization_losses(scope)
    if not losses:
        return array_ops.constant(0.0, name=name)
    if len(losses) == 1:
        return array_ops.identity(losses[0], name=name)
    return math_ops.add_n(losses, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """The sum of ``get_losses()`` and, by default, the regularization losses."""
    losses = get_losses(scope=scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    if not losses:
        raise _E("tw.losses.get_total_loss: no losses found: create them with tw.losses.* or tw.losses.add_loss "
                 "(and regularizers with get_variable(regularizer=...))")
    if len(losses) == 1:
        return array_ops.identity(losses[0], name=name)
    return math_ops.add_n(losses, name=name)
