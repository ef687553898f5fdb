"""Sampled losses of ``tw.nn``: ``nce_loss`` and ``sampled_softmax_loss`` (TF1
``tf.nn.nce_loss``, ``tf.nn.sampled_softmax_loss``), both built on ``_compute_sampled_logits``
as in TensorFlow's ``nn_impl.py``.

For a batch, the true classes' and ``num_sampled`` sampled classes' rows of ``weights`` (and
entries of ``biases``) are looked up with ``embedding_lookup`` (so ``weights`` may be a list
of shards or a PartitionedVariable, and its gradient is IndexedSlices touching only those
rows); the logits are ``inputs . w + b`` minus the log of each class's expected count in the
sample, for the true classes in the first ``num_true`` columns and the sampled ones after.
NCE scores every column with a logistic loss; sampled softmax with one softmax over the row.
Only the logits are differentiated: the sampler's outputs pass through ``stop_gradient``.

Departure: TF fails when ``inputs`` are float64 (the expected counts are float32); here the
counts are cast to the logits' dtype, so float64 models (and gradient checks) work.
"""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import convert_to_tensor, get_default_graph
from tensorweave.ops import array_ops, candidate_sampling_ops, embedding_ops, indexing_ops, math_ops, nn_ops
from tensorweave.ops.partitioned_variables import PartitionedVariable

__all__ = ["nce_loss", "sampled_softmax_loss"]

_E = errors.InvalidArgumentError


def _as_shards(weights):
    if isinstance(weights, list | tuple | PartitionedVariable):
        return list(weights)
    return [weights]


def _check_args(fn, labels, inputs, num_true, num_sampled, num_classes):
    if int(num_true) < 1:
        raise _E(f"{fn}: num_true must be >= 1, got {num_true}")
    if int(num_sampled) < 1 or int(num_classes) < 1:
        raise _E(f"{fn}: num_sampled and num_classes must be >= 1, got {num_sampled} and {num_classes}")
    if labels.dtype not in (dtypes.int32, dtypes.int64):
        raise _E(f"{fn}: labels must be an int64 (or int32) tensor of class ids [batch_size, num_true], got "
                 f"dtype {labels.dtype.name}")
    ls, xs = labels.shape, inputs.shape
    if ls.ndims is not None and (ls.ndims != 2 or (ls[1] is not None and ls[1] != num_true)):
        raise _E(f"{fn}: labels must have shape [batch_size, num_true = {num_true}], got {ls}")
    if xs.ndims is not None and xs.ndims != 2:
        raise _E(f"{fn}: inputs must have shape [batch_size, dim], got {xs}")
    if ls.ndims == 2 and xs.ndims == 2 and None not in (ls[0], xs[0]) and ls[0] != xs[0]:
        raise _E(f"{fn}: labels {ls} and inputs {xs} must have the same batch size")


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
                            sampled_values=None, subtract_log_q=True, remove_accidental_hits=False,
                            partition_strategy="mod", name=None, seed=None, fn="compute_sampled_logits"):
    """``(logits, labels)``, each ``[batch_size, num_true + num_sampled]``: the true classes'
    logits first, then the sampled ones; labels ``1 / num_true`` for true classes, else 0."""
    weights = _as_shards(weights)
    with get_default_graph().name_scope(name or "compute_sampled_logits"):
        inputs = convert_to_tensor(inputs, name="inputs")
        labels = convert_to_tensor(labels, name="labels")
        _check_args(fn, labels, inputs, num_true, num_sampled, num_classes)
        if labels.dtype is not dtypes.int64:
            labels = math_ops.cast(labels, dtypes.int64)
        labels_flat = array_ops.reshape(labels, [-1])

        if sampled_values is None:
            sampled_values = candidate_sampling_ops.log_uniform_candidate_sampler(
                true_classes=labels, num_true=num_true, num_sampled=num_sampled, unique=True,
                range_max=num_classes, seed=seed)
        if len(sampled_values) != 3:
            raise _E(f"{fn}: sampled_values must be (sampled_candidates, true_expected_count, "
                     f"sampled_expected_count), got {len(sampled_values)} values")
        sampled, true_expected_count, sampled_expected_count = (array_ops.stop_gradient(s) for s in sampled_values)
        if sampled.dtype is not dtypes.int64:
            sampled = math_ops.cast(sampled, dtypes.int64)

        # One lookup for the true and the sampled classes' rows.
        all_ids = array_ops.concat([labels_flat, sampled], 0)
        all_w = embedding_ops.embedding_lookup(weights, all_ids, partition_strategy=partition_strategy)
        n_true = array_ops.shape(labels_flat)[0]
        true_w = array_ops.slice(all_w, [0, 0], array_ops.stack([n_true, -1]))
        sampled_w = array_ops.slice(all_w, array_ops.stack([n_true, 0]), [-1, -1])
        sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True)  # [batch, num_sampled]

        all_b = embedding_ops.embedding_lookup(_as_shards(biases), all_ids,
                                               partition_strategy=partition_strategy)
        true_b = array_ops.slice(all_b, [0], array_ops.shape(labels_flat))
        sampled_b = array_ops.slice(all_b, array_ops.shape(labels_flat), [-1])

        # Each example's dot product with each of its num_true classes' rows.
        dim = array_ops.shape(true_w)[1:2]
        true_w = array_ops.reshape(true_w, array_ops.concat([[-1, num_true], dim], 0))
        true_logits = math_ops.reduce_sum(array_ops.expand_dims(inputs, 1) * true_w, axis=2)
        true_logits += array_ops.reshape(true_b, [-1, num_true])
        sampled_logits += sampled_b

        if remove_accidental_hits:
            # -FLT_MAX on the sampled logits that equal one of the example's true classes.
            acc_indices, acc_ids, acc_weights = candidate_sampling_ops.compute_accidental_hits(
                labels, sampled, num_true=num_true)
            sparse_indices = array_ops.concat(
                [array_ops.reshape(acc_indices, [-1, 1]),
                 array_ops.reshape(math_ops.cast(acc_ids, dtypes.int32), [-1, 1])], 1, name="sparse_indices")
            logits_shape = array_ops.concat(
                [array_ops.shape(labels)[:1], array_ops.expand_dims(num_sampled, 0)], 0)
            if acc_weights.dtype is not sampled_logits.dtype:
                acc_weights = math_ops.cast(acc_weights, sampled_logits.dtype)
            sampled_logits += indexing_ops.sparse_to_dense(sparse_indices, logits_shape, acc_weights,
                                                           default_value=0.0, validate_indices=False)

        if subtract_log_q:
            # Subtract log Q(class): the expected count of the class in the sample.
            dt = true_logits.dtype
            if true_expected_count.dtype is not dt:
                true_expected_count = math_ops.cast(true_expected_count, dt)
                sampled_expected_count = math_ops.cast(sampled_expected_count, dt)
            true_logits -= math_ops.log(true_expected_count)
            sampled_logits -= math_ops.log(sampled_expected_count)

        out_logits = array_ops.concat([true_logits, sampled_logits], 1)
        out_labels = array_ops.concat([array_ops.ones_like(true_logits) / num_true,
                                       array_ops.zeros_like(sampled_logits)], 1)
    return out_logits, out_labels


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, partition_strategy="mod", name="nce_loss"):
    """Noise-contrastive estimation loss per example (``[batch_size]``).

    ``weights``: ``[num_classes, dim]`` (a tensor, variable, list of shards or
    PartitionedVariable); ``biases``: ``[num_classes]``; ``labels``: int64
    ``[batch_size, num_true]``; ``inputs``: ``[batch_size, dim]``. Classes are sampled with
    ``log_uniform_candidate_sampler`` (``unique=True``) unless ``sampled_values`` is given, so
    ids should be sorted by decreasing frequency. With ``num_true`` > 1 each true class has
    target probability ``1 / num_true``. For evaluation, the full sigmoid loss with
    ``partition_strategy="div"`` matches."""
    logits, labels = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true=num_true,
        sampled_values=sampled_values, subtract_log_q=True, remove_accidental_hits=remove_accidental_hits,
        partition_strategy=partition_strategy, name=name, fn="nce_loss")
    losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits, name="sampled_losses")
    return math_ops.reduce_sum(losses, axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
                         sampled_values=None, remove_accidental_hits=True, partition_strategy="mod",
                         name="sampled_softmax_loss", seed=None):
    """Sampled softmax loss per example (``[batch_size]``): softmax cross-entropy over the
    true classes and ``num_sampled`` sampled classes only, each logit corrected by the log
    of its expected count; an underestimate of the full softmax loss, for training.
    Arguments as ``nce_loss``; sampled classes equal to a true class are removed by
    default; ``seed`` seeds the default sampler."""
    logits, labels = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true=num_true,
        sampled_values=sampled_values, subtract_log_q=True, remove_accidental_hits=remove_accidental_hits,
        partition_strategy=partition_strategy, name=name, seed=seed, fn="sampled_softmax_loss")
    labels = array_ops.stop_gradient(labels, name="labels_stop_gradient")
    return nn_ops.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
