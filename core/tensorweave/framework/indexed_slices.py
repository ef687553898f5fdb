"""``tw.IndexedSlices`` and ``tw.IndexedSlicesValue`` (TF1 ``tf.IndexedSlices``): a sparse
set of slices of a dense tensor, the gradient of a gather.

An IndexedSlices is not a graph value of its own: it is the tensors ``values`` (shape
``[N, D1, ..., Dn]``), ``indices`` (int32/int64 ``[N]``) and optionally ``dense_shape``
(``[n + 1]``) that travel together and stand for the dense tensor ``dense`` with::

    dense[indices[i], ...] += values[i, ...]      (every other row zero)

Indices may repeat: their slices add up (gradients of several reads of one row). The
gradient machinery (``ops/gradients.py``) keeps IndexedSlices sparse as long as it can and
the optimizers apply them as sparse updates (``train/optimizer.py``).

This module owns the class, its value type and the session protocol (``_fetch_parts`` /
``_feed_parts``, see ``framework/sparse_tensor.py``): ``Session.run`` fetches one as an
``IndexedSlicesValue`` of NumPy arrays and accepts one (or a ``(values, indices[,
dense_shape])`` tuple) as the value fed for it. Turning one into a dense tensor needs ops, so
the conversion function that ``tw.convert_to_tensor`` uses is registered by the ops layer
(``ops/gradients.py``), through the conversion registry, with the warnings TF gives for
densifications of unknown or very large shape (``densify_warning`` here).
"""

from __future__ import annotations

import collections
import warnings

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Tensor,
    constant_value,
    constant_value_as_shape,
    convert_to_tensor,
    session_for,
)
from tensorweave.framework.tensor_shape import TensorShape

__all__ = ["IndexedSlices", "IndexedSlicesValue", "convert_to_tensor_or_indexed_slices"]

IndexedSlicesValue = collections.namedtuple("IndexedSlicesValue", ["values", "indices", "dense_shape"])
IndexedSlicesValue.__doc__ = "An IndexedSlices' value: NumPy ``values``, ``indices`` and ``dense_shape`` (or None)."

_E = errors.InvalidArgumentError

# TensorFlow warns when it densifies an IndexedSlices of at least this many elements.
LARGE_SPARSE_NUM_ELEMENTS = 100_000_000


class IndexedSlices:
    """Slices ``values`` of a dense tensor at rows ``indices`` (TF1 ``tf.IndexedSlices``).

    ``values``: a Tensor ``[N, D1, ..., Dn]``; ``indices``: a 1-D int32/int64 Tensor ``[N]``;
    ``dense_shape``: an optional 1-D int Tensor, the shape of the dense tensor they stand for.
    """

    __slots__ = ("_values", "_indices", "_dense_shape")

    def __init__(self, values, indices, dense_shape=None):
        for what, t in (("values", values), ("indices", indices)):
            if not isinstance(t, Tensor):
                raise _E(f"IndexedSlices: {what} must be a tw.Tensor, got {type(t).__name__}")
        if dense_shape is not None and not isinstance(dense_shape, Tensor):
            raise _E(f"IndexedSlices: dense_shape must be a tw.Tensor or None, got {type(dense_shape).__name__}")
        if indices.dtype not in (dtypes.int32, dtypes.int64):
            raise _E(f"IndexedSlices: indices '{indices.name}' must be int32 or int64, got {indices.dtype.name}")
        if indices.shape.ndims is not None and indices.shape.ndims != 1:
            raise _E(f"IndexedSlices: indices '{indices.name}' must be a vector, got shape {indices.shape}")
        if values.shape.ndims == 0:
            raise _E(f"IndexedSlices: values '{values.name}' must have rank >= 1 (one slice per index)")
        n_i = indices.shape[0] if indices.shape.ndims else None
        n_v = values.shape[0] if values.shape.ndims else None
        if n_i is not None and n_v is not None and n_i != n_v:
            raise _E(f"IndexedSlices: {n_v} slices in values '{values.name}' but {n_i} indices in '{indices.name}'")
        self._values, self._indices, self._dense_shape = values, indices, dense_shape

    values = property(lambda self: self._values, doc="The slices: a Tensor ``[N, D1, ..., Dn]``.")
    indices = property(lambda self: self._indices, doc="The rows of the slices: a 1-D Tensor ``[N]``.")
    dense_shape = property(lambda self: self._dense_shape, doc="The dense tensor's shape (a Tensor), or None.")
    name = property(lambda self: self._values.name)
    device = property(lambda self: self._values.device)
    op = property(lambda self: self._values.op)
    dtype = property(lambda self: self._values.dtype)
    graph = property(lambda self: self._values.graph)

    @property
    def shape(self) -> TensorShape:
        """The static shape of the dense tensor: what ``dense_shape`` and ``values`` say."""
        rows = self._values.shape[1:] if self._values.shape.ndims is not None else TensorShape(None)
        if self._dense_shape is None:
            return TensorShape(None) if rows.ndims is None else TensorShape([None]).concatenate(rows)
        known = constant_value_as_shape(self._dense_shape)
        if rows.ndims is None:
            return known
        try:
            return known.merge_with(TensorShape([None]).concatenate(rows))
        except errors.InvalidArgumentError:
            return known

    def get_shape(self) -> TensorShape:
        return self.shape

    def consumers(self):
        parts = [self._values, self._indices] + ([self._dense_shape] if self._dense_shape is not None else [])
        return sorted({op for t in parts for op in t.consumers()}, key=lambda op: op._id)

    def eval(self, feed_dict=None, session=None):
        """This IndexedSlices' value (an ``IndexedSlicesValue``) in the default or given session."""
        return session_for(session, self.graph, "IndexedSlices.eval()").run(self, feed_dict)

    def __neg__(self):
        return IndexedSlices(-self._values, self._indices, self._dense_shape)

    # --- the session's composite protocol (framework/sparse_tensor.py) ---------------------
    def _fetch_parts(self):
        parts = [self._values, self._indices]
        if self._dense_shape is None:
            return parts, lambda vals: IndexedSlicesValue(vals[0], vals[1], None)
        return parts + [self._dense_shape], lambda vals: IndexedSlicesValue(*vals)

    def _feed_parts(self, value):
        if isinstance(value, IndexedSlices):
            raise _E("the value fed for an IndexedSlices is a tw.IndexedSlices; feed a tw.IndexedSlicesValue "
                     "or a (values, indices[, dense_shape]) tuple of NumPy values")
        if not isinstance(value, tuple | list) or len(value) not in (2, 3):
            raise _E(f"the value fed for {self} must be a tw.IndexedSlicesValue or a (values, indices[, "
                     f"dense_shape]) tuple, got {type(value).__name__}")
        parts = list(value) + [None] * (3 - len(value))
        out = [(self._values, parts[0]), (self._indices, parts[1])]
        if self._dense_shape is not None:
            if parts[2] is None:
                raise _E(f"the value fed for {self} has no dense_shape, but the IndexedSlices has one")
            out.append((self._dense_shape, parts[2]))
        return out

    def __repr__(self):
        ds = f", dense_shape={self._dense_shape.name}" if self._dense_shape is not None else ""
        return f"IndexedSlices(indices={self._indices.name}, values={self._values.name}{ds})"

    __str__ = __repr__


def densify_warning(value: IndexedSlices) -> None:
    """Warn as TensorFlow does before ``value`` becomes a dense tensor: when its dense shape
    is not known at construction (it may be huge), or has at least 100M elements."""
    ds = value.dense_shape
    known = constant_value(ds)
    if known is None:
        # A Shape of a tensor whose first dimension is unknown is as good as unknown.
        warnings.warn("Converting sparse IndexedSlices to a dense Tensor of unknown shape. This may consume a "
                      "large amount of memory.", UserWarning, stacklevel=3)
        return
    n = int(np.prod(np.asarray(known, dtype=np.int64)))
    if n >= LARGE_SPARSE_NUM_ELEMENTS:
        warnings.warn(f"Converting sparse IndexedSlices to a dense Tensor with {n} elements. This may consume a "
                      "large amount of memory.", UserWarning, stacklevel=3)


def convert_to_tensor_or_indexed_slices(value, dtype=None, name=None):
    """``value`` itself when it is an IndexedSlices (or another composite such as a
    SparseTensor; its dtype checked against ``dtype``), else ``tw.convert_to_tensor(value)``."""
    from_composite = getattr(type(value), "_fetch_parts", None) is not None
    if isinstance(value, IndexedSlices) or from_composite:
        if dtype is not None and dtypes.as_dtype(dtype) is not value.dtype:
            raise _E(f"{value} has dtype {value.dtype.name}, but {dtypes.as_dtype(dtype).name} was expected")
        return value
    return convert_to_tensor(value, dtype=dtype, name=name)
