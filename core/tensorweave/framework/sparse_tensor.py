"""``tw.SparseTensor`` and ``tw.SparseTensorValue`` (TF1 ``tf.SparseTensor``).

A SparseTensor is not a graph value of its own: it is three dense tensors that travel
together, ``indices`` (int64 ``[nnz, rank]``), ``values`` (``[nnz]``) and ``dense_shape``
(int64 ``[rank]``), as in TensorFlow. Ops that take one (``ops/sparse_ops.py``) take the
three tensors as separate inputs.

``Session.run`` fetches a SparseTensor as a ``SparseTensorValue`` of NumPy arrays and accepts
a ``SparseTensorValue`` or an ``(indices, values, dense_shape)`` tuple as the value fed for
one. The session learns that through a small protocol rather than by knowing this class:
a fetched object with ``_fetch_parts()`` is fetched as those tensors and rebuilt from their
values; a feed key with ``_feed_parts(value)`` is replaced by the (tensor, value) pairs it
returns. Any other composite (IndexedSlices) can join the same way.
"""

from __future__ import annotations

import collections

import numpy as np

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import (
    Tensor,
    constant_value_as_shape,
    convert_to_tensor,
    get_default_graph,
    register_tensor_conversion_function,
    session_for,
)
from tensorweave.framework.tensor_shape import TensorShape, as_shape

__all__ = ["SparseTensor", "SparseTensorValue"]

SparseTensorValue = collections.namedtuple("SparseTensorValue", ["indices", "values", "dense_shape"])
SparseTensorValue.__doc__ = "A SparseTensor's value: NumPy ``indices``, ``values`` and ``dense_shape``."

_E = errors.InvalidArgumentError


class SparseTensor:
    """A sparse tensor: ``dense[indices[i]] = values[i]``, every other element zero.

    ``indices`` is an int64 ``[nnz, rank]`` matrix, ``values`` a ``[nnz]`` vector of any
    dtype, ``dense_shape`` an int64 ``[rank]`` vector. Indices should be in row-major
    (lexicographic) order; ``tw.sparse_reorder`` puts them there.
    """

    __slots__ = ("_indices", "_values", "_dense_shape", "_shape")

    def __init__(self, indices, values, dense_shape):
        g = get_default_graph()
        with g.name_scope("SparseTensor"):
            indices = convert_to_tensor(indices, dtype=dtypes.int64, name="indices") \
                if not isinstance(indices, Tensor) else _int64(indices, "indices")
            values = convert_to_tensor(values, name="values")
            dense_shape = convert_to_tensor(dense_shape, dtype=dtypes.int64, name="dense_shape") \
                if not isinstance(dense_shape, Tensor) else _int64(dense_shape, "dense_shape")
        for t, rank, what in ((indices, 2, "indices"), (values, 1, "values"), (dense_shape, 1, "dense_shape")):
            if t.shape.ndims is not None and t.shape.ndims != rank:
                raise _E(f"SparseTensor: {what} must have rank {rank}, got shape {t.shape}")
        i_shape = indices.shape if indices.shape.ndims is not None else TensorShape([None, None])
        v_shape = values.shape if values.shape.ndims is not None else TensorShape([None])
        s_shape = dense_shape.shape if dense_shape.shape.ndims is not None else TensorShape([None])
        if i_shape[0] is not None and v_shape[0] is not None and i_shape[0] != v_shape[0]:
            raise _E(f"SparseTensor: indices {indices.shape} and values {values.shape} must have the same "
                     "number of entries (the first dimension)")
        if i_shape[1] is not None and s_shape[0] is not None and i_shape[1] != s_shape[0]:
            raise _E(f"SparseTensor: indices {indices.shape} have {i_shape[1]} columns but dense_shape "
                     f"{dense_shape.shape} has {s_shape[0]} elements (one per dimension)")
        self._indices, self._values, self._dense_shape = indices, values, dense_shape
        self._shape = constant_value_as_shape(dense_shape)
        if self._shape.ndims is None and i_shape[1] is not None:
            self._shape = TensorShape([None] * i_shape[1])

    @classmethod
    def from_value(cls, sparse_tensor_value):
        """A SparseTensor of constants from a ``SparseTensorValue`` (or a SparseTensor, returned as is)."""
        if isinstance(sparse_tensor_value, SparseTensor):
            return sparse_tensor_value
        v = sparse_tensor_value
        return cls(np.asarray(v.indices, np.int64), v.values, np.asarray(v.dense_shape, np.int64))

    indices = property(lambda self: self._indices)
    values = property(lambda self: self._values)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    op = property(lambda self: self._values.op)
    graph = property(lambda self: self._values.graph)
    shape = property(lambda self: self._shape)

    def get_shape(self) -> TensorShape:
        return self._shape

    def set_shape(self, shape) -> None:
        """Refine the static dense shape (``tw.sparse_placeholder`` with partly known dims)."""
        try:
            self._shape = self._shape.merge_with(as_shape(shape))
        except errors.InvalidArgumentError:
            raise _E(f"SparseTensor.set_shape: {as_shape(shape)} is incompatible with its shape "
                     f"{self._shape}") from None

    def consumers(self):
        return sorted({op for t in (self._indices, self._values, self._dense_shape) for op in t.consumers()},
                      key=lambda op: op._id)

    def eval(self, feed_dict=None, session=None):
        """This SparseTensor's value (a ``SparseTensorValue``) in the default or given session."""
        return session_for(session, self.graph, "SparseTensor.eval()").run(self, feed_dict)

    # --- the session's composite protocol (see the module docstring) -----------------------
    def _fetch_parts(self):
        return [self._indices, self._values, self._dense_shape], lambda vals: SparseTensorValue(*vals)

    def _feed_parts(self, value):
        if isinstance(value, SparseTensor):
            raise _E("the value fed for a SparseTensor is a tw.SparseTensor; feed a tw.SparseTensorValue or an "
                     "(indices, values, dense_shape) tuple of NumPy values")
        if isinstance(value, SparseTensorValue):
            parts = tuple(value)
        elif isinstance(value, tuple | list) and len(value) == 3:
            parts = tuple(value)
        else:
            raise _E(f"the value fed for SparseTensor {self} must be a tw.SparseTensorValue or an (indices, values, "
                     f"dense_shape) tuple, got {type(value).__name__}")
        if self._shape.ndims is not None:
            fed = np.asarray(parts[2]).reshape(-1)
            if fed.size != self._shape.ndims or any(d is not None and d != int(f)
                                                    for d, f in zip(self._shape.as_list(), fed)):
                raise _E(f"the dense_shape fed for SparseTensor {self} is {fed.tolist()}, which is not "
                         f"compatible with its shape {self._shape}")
        return list(zip((self._indices, self._values, self._dense_shape), parts))

    def __repr__(self):
        return (f"SparseTensor(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={self._dense_shape.name})")

    __str__ = __repr__


def _int64(t: Tensor, what: str) -> Tensor:
    if t.dtype is not dtypes.int64:
        raise _E(f"SparseTensor: {what} must be int64, got tensor '{t.name}' of dtype {t.dtype.name}")
    return t


def _refuse_dense(value, dtype=None, name=None):
    raise _E(f"{value} cannot be used where a dense tensor is expected; convert it with "
             "tw.sparse_tensor_to_dense (or use an op that takes a SparseTensor, e.g. tw.sparse_tensor_dense_matmul)")


register_tensor_conversion_function(SparseTensor, _refuse_dense)


def is_sparse(x) -> bool:
    """Whether ``x`` is a SparseTensor or a SparseTensorValue."""
    return isinstance(x, SparseTensor | SparseTensorValue)
