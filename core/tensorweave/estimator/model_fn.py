"""What a ``model_fn`` returns: ``ModeKeys`` and ``EstimatorSpec`` (TF1's ``model_fn.py``).

``EstimatorSpec`` is checked when it is made, as in TF1, so a model_fn that forgets
something fails where it returns, naming what is missing: TRAIN needs ``loss`` and
``train_op``, EVAL needs ``loss``, PREDICT needs ``predictions``. Wrong types raise
``TypeError`` (TF1's choice); missing pieces and bad values ``InvalidArgumentError`` (a
``ValueError``, as TF1 raises).
"""

from __future__ import annotations

import collections

from tensorweave.framework import errors
from tensorweave.framework.graph import Operation, Tensor, convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops
from tensorweave.ops.variables import Variable
from tensorweave.train.hooks import SessionRunHook
from tensorweave.train.monitored_session import Scaffold

__all__ = ["ModeKeys", "EstimatorSpec"]


class ModeKeys:
    """The three things a model_fn is asked to build (TF1's string values)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)
_FIELDS = ["mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs", "training_chief_hooks",
           "training_hooks", "scaffold", "evaluation_hooks", "prediction_hooks"]


def _in_default_graph(t, what):
    g = get_default_graph()
    if t.graph is not g:
        raise errors.InvalidArgumentError(
            f"EstimatorSpec: {what} '{t.name}' must be from the default graph (the one the Estimator builds the "
            "model_fn in); do not build it in a graph of your own")


def _as_tensor(x, what):
    if isinstance(x, Variable):
        x = convert_to_tensor(x)
    if not isinstance(x, Tensor):
        raise TypeError(f"EstimatorSpec: {what} must be a Tensor, given: {x!r}")
    _in_default_graph(x, what)
    return x


def _check_hooks(hooks, what):
    hooks = tuple(hooks or ())
    for h in hooks:
        if not isinstance(h, SessionRunHook):
            raise TypeError(f"EstimatorSpec: all {what} must be tw.train.SessionRunHook instances, given: {h!r}")
    return hooks


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _FIELDS)):
    """The ops and objects a ``model_fn`` built for one mode.

    - ``mode``: a ``ModeKeys`` value (the one the model_fn was called with).
    - ``predictions``: a Tensor or a dict of name -> Tensor (required in PREDICT).
    - ``loss``: a scalar Tensor (required in TRAIN and EVAL; a one-element one is reshaped).
    - ``train_op``: the Operation (or Tensor) that runs one training step (required in TRAIN).
    - ``eval_metric_ops``: dict of name -> ``(value, update_op)``, as ``tw.metrics`` returns.
    - ``export_outputs``: accepted for TF1 compatibility; SavedModel export is not provided.
    - ``training_chief_hooks``, ``training_hooks``, ``evaluation_hooks``, ``prediction_hooks``:
      ``tw.train.SessionRunHook``s for those runs.
    - ``scaffold``: a ``tw.train.Scaffold`` (init ops, Saver) for the session.
    """

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None, export_outputs=None,
                training_chief_hooks=None, training_hooks=None, scaffold=None, evaluation_hooks=None,
                prediction_hooks=None):
        if mode not in _MODES:
            raise errors.InvalidArgumentError(
                f"EstimatorSpec: mode={mode!r} unrecognized; expected one of tw.estimator.ModeKeys "
                f"({', '.join(repr(m) for m in _MODES)})")

        if loss is None and mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise errors.InvalidArgumentError(
                f"EstimatorSpec(mode={mode!r}): missing loss; training and evaluation need the scalar loss tensor")
        if loss is not None:
            loss = _as_tensor(loss, "loss")
            n = loss.shape.num_elements() if loss.shape.ndims is not None else None
            if n not in (None, 1):
                raise errors.InvalidArgumentError(
                    f"EstimatorSpec: loss must be a scalar, given '{loss.name}' of shape {loss.shape}; reduce it "
                    "first (e.g. tw.reduce_mean)")
            if loss.shape.ndims != 0:
                loss = array_ops.reshape(loss, [])

        if predictions is None and mode == ModeKeys.PREDICT:
            raise errors.InvalidArgumentError(
                "EstimatorSpec(mode='infer'): missing predictions; prediction needs a Tensor or a dict of Tensors")
        if predictions is not None:
            if isinstance(predictions, dict):
                checked = {}
                for k, v in predictions.items():
                    if not isinstance(k, str):
                        raise TypeError(f"EstimatorSpec: predictions keys must be strings, given: {k!r}")
                    checked[k] = _as_tensor(v, f"predictions[{k!r}]")
                predictions = checked
            else:
                predictions = _as_tensor(predictions, "predictions")

        if train_op is None and mode == ModeKeys.TRAIN:
            raise errors.InvalidArgumentError(
                "EstimatorSpec(mode='train'): missing train_op; in TRAIN mode the model_fn must return the op that "
                "updates the model, e.g. train_op=optimizer.minimize(loss, "
                "global_step=tw.train.get_global_step())")
        if train_op is not None:
            if isinstance(train_op, Variable):
                train_op = convert_to_tensor(train_op)
            if not isinstance(train_op, Operation | Tensor):
                raise TypeError(f"EstimatorSpec: train_op must be an Operation or Tensor, given: {train_op!r}")
            _in_default_graph(train_op, "train_op")

        if eval_metric_ops is None:
            eval_metric_ops = {}
        if not isinstance(eval_metric_ops, dict):
            raise TypeError(f"EstimatorSpec: eval_metric_ops must be a dict, given: {eval_metric_ops!r}")
        checked = {}
        for k, pair in eval_metric_ops.items():
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise TypeError(
                    f"EstimatorSpec: values of eval_metric_ops must be (metric_value, update_op) pairs as tw.metrics "
                    f"returns, given: {pair!r} for key: {k!r}")
            value, update = pair
            value = _as_tensor(value, f"eval_metric_ops[{k!r}] value")
            if isinstance(update, Variable):
                update = convert_to_tensor(update)
            if not isinstance(update, Operation | Tensor):
                raise TypeError(f"EstimatorSpec: eval_metric_ops[{k!r}] update_op must be an Operation or Tensor, "
                                f"given: {update!r}")
            _in_default_graph(update, f"eval_metric_ops[{k!r}] update_op")
            checked[k] = (value, update)
        eval_metric_ops = checked

        if export_outputs is not None and not isinstance(export_outputs, dict):
            raise TypeError(f"EstimatorSpec: export_outputs must be a dict, given: {export_outputs!r}")
        if scaffold is not None and not isinstance(scaffold, Scaffold):
            raise TypeError(f"EstimatorSpec: scaffold must be a tw.train.Scaffold, given: {scaffold!r}")
        return super().__new__(
            cls, mode, predictions, loss, train_op, eval_metric_ops, export_outputs,
            _check_hooks(training_chief_hooks, "training_chief_hooks"), _check_hooks(training_hooks, "training_hooks"),
            scaffold or Scaffold(), _check_hooks(evaluation_hooks, "evaluation_hooks"),
            _check_hooks(prediction_hooks, "prediction_hooks"))

    def _replace(self, **kwds):
        # Re-validated, as TF1 does: a replaced field passes the same checks.
        fields = self._asdict()
        fields.update(kwds)
        return EstimatorSpec(**fields)
