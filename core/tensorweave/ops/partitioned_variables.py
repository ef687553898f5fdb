"""Partitioned variables: the partitioners and ``PartitionedVariable`` (TensorFlow 1.x).

A *partitioner* is a function ``partitioner(shape=TensorShape, dtype=DType) -> list`` giving
the number of shards along each axis (at most one entry above 1). ``tw.get_variable(...,
partitioner=p)`` (``variable_scope.py``) asks it, then creates one ``tw.Variable`` per shard,
named ``<name>/part_<i>``, along that axis: each shard holds ``full // n`` rows and the first
``full % n`` shards one more (TF1's ``_iter_slices``). Every shard carries a
``Variable.SaveSliceInfo`` (the logical tensor's full name and shape, its own offset and
shape), which the Saver uses to write the shards as one logical tensor and to read any
slice of it back (``train/saver.py``). The shards are ordinary variables: each is in the
global/trainable collections, each is one Variable node (so ``replica_device_setter``
spreads them over ps tasks), and optimizers update each on its own device.

The three partitioners compute the shard count with TF1's arithmetic
(``tensorflow/python/ops/partitioned_variables.py``):

- ``fixed_size_partitioner(n, axis)``: ``min(n, shape[axis])``;
- ``min_max_variable_partitioner(max_partitions, axis, min_slice_size)``: enough shards that
  each holds at least ``min_slice_size`` bytes, at most ``max_partitions`` and
  ``shape[axis]``;
- ``variable_axis_size_partitioner(max_shard_bytes, axis, ..., max_shards)``: as many shards as
  keep each below ``max_shard_bytes`` (at least one slice of the axis per shard), capped at
  ``max_shards``.

Strings count ``bytes_per_string_element`` bytes per element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import convert_to_tensor, get_default_graph, register_tensor_conversion_function
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops
from tensorweave.ops.variables import Variable

__all__ = [
    "PartitionedVariable",
    "fixed_size_partitioner",
    "min_max_variable_partitioner",
    "variable_axis_size_partitioner",
]


def _check_axis(axis, shape, who):
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < shape.ndims:
        raise errors.InvalidArgumentError(
            f"{who}: cannot partition a variable of shape {shape} along axis {axis!r}")


def _element_bytes(dtype, bytes_per_string_element):
    dtype = dtypes.as_dtype(dtype).base_dtype
    return bytes_per_string_element if dtype.is_string else dtype.size


def variable_axis_size_partitioner(max_shard_bytes, axis=0, bytes_per_string_element=16, max_shards=None):
    """A partitioner that keeps each shard below ``max_shard_bytes`` by sharding ``axis``.

    Each shard holds ``max(1, floor(max_shard_bytes / bytes_per_slice))`` slices of ``axis``
    (a slice is one index of ``axis`` and everything else), so a shard may exceed the limit
    when a single slice does; ``max_shards`` (when given) caps the count and takes precedence.
    """
    if max_shard_bytes < 1 or bytes_per_string_element < 1:
        raise errors.InvalidArgumentError(
            "variable_axis_size_partitioner: both max_shard_bytes and bytes_per_string_element must be positive, "
            f"got {max_shard_bytes} and {bytes_per_string_element}")
    if max_shards and max_shards < 1:
        raise errors.InvalidArgumentError(f"variable_axis_size_partitioner: max_shards must be positive, "
                                          f"got {max_shards}")

    def _partitioner(shape, dtype, **unused):
        if not isinstance(shape, TensorShape):
            raise errors.InvalidArgumentError(f"variable_axis_size_partitioner: shape is not a TensorShape: {shape!r}")
        if not shape.is_fully_defined():
            raise errors.InvalidArgumentError(f"variable_axis_size_partitioner: shape is not fully defined: {shape}")
        if not isinstance(dtype, dtypes.DType):
            raise errors.InvalidArgumentError(f"variable_axis_size_partitioner: dtype is not a DType: {dtype!r}")
        _check_axis(axis, shape, "variable_axis_size_partitioner")
        partitions = [1] * shape.ndims
        if shape[axis] == 0:
            return partitions
        bytes_per_slice = 1.0 * (shape.num_elements() / shape[axis]) * _element_bytes(dtype, bytes_per_string_element)
        # At least one slice per shard, even when one slice alone is over the limit.
        slices_per_shard = max(1, math.floor(max_shard_bytes / bytes_per_slice)) if bytes_per_slice else shape[axis]
        axis_shards = int(math.ceil(1.0 * shape[axis] / slices_per_shard))
        if max_shards:
            axis_shards = min(max_shards, axis_shards)
        partitions[axis] = axis_shards
        return partitions

    return _partitioner


def min_max_variable_partitioner(max_partitions=1, axis=0, min_slice_size=256 << 10, bytes_per_string_element=16):
    """A partitioner giving each shard at least ``min_slice_size`` bytes, with at most
    ``max_partitions`` shards (and never more than ``shape[axis]``)."""

    def _partitioner(shape, dtype, **unused):
        shape = as_shape(shape)
        _check_axis(axis, shape, "min_max_variable_partitioner")
        total_bytes = shape.num_elements() * _element_bytes(dtype, bytes_per_string_element)
        partitions = [1] * shape.ndims
        partitions[axis] = max(1, min(shape[axis], max_partitions, int(math.ceil(total_bytes / min_slice_size))))
        return partitions

    return _partitioner


def fixed_size_partitioner(num_shards, axis=0):
    """A partitioner giving ``num_shards`` shards along ``axis`` (fewer when the axis is shorter)."""

    def _partitioner(shape, **unused):
        shape = as_shape(shape)
        _check_axis(axis, shape, "fixed_size_partitioner")
        partitions = [1] * shape.ndims
        partitions[axis] = min(num_shards, shape[axis])
        return partitions

    return _partitioner


# ----------------------------------------------------------------------------------------
# what get_variable needs to build the shards
class _PartitionInfo:
    """What an initializer is told about the shard it fills (TF1's ``_PartitionInfo``): the
    logical variable's ``full_shape`` and the shard's ``var_offset`` in it. Variance-scaling
    initializers compute their fans from ``full_shape``, so a partitioned variable draws from
    the same distribution as an unpartitioned one."""

    __slots__ = ("_full_shape", "_var_offset")

    def __init__(self, full_shape, var_offset):
        for what, v in (("full_shape", full_shape), ("var_offset", var_offset)):
            if not isinstance(v, Sequence) or isinstance(v, str):
                raise errors.InvalidArgumentError(f"{what} must be a sequence (like a list), got {type(v).__name__}")
        if len(var_offset) != len(full_shape):
            raise errors.InvalidArgumentError(
                f"var_offset {list(var_offset)} and full_shape {list(full_shape)} differ in length")
        for offset, size in zip(var_offset, full_shape):
            if offset < 0 or offset >= size:
                raise errors.InvalidArgumentError(
                    f"expected 0 <= offset < size, got var_offset={list(var_offset)}, full_shape={list(full_shape)}")
        self._full_shape = list(full_shape)
        self._var_offset = list(var_offset)

    full_shape = property(lambda self: self._full_shape)
    var_offset = property(lambda self: self._var_offset)

    def single_slice_dim(self, shape):
        """The one axis along which a shard of ``shape`` is cut, or None if it is whole."""
        shape = list(shape)
        if len(shape) != len(self._full_shape):
            raise errors.InvalidArgumentError(f"shape {shape} and full_shape {self._full_shape} differ in length")
        dim = None
        for i, (o, s, f) in enumerate(zip(self._var_offset, shape, self._full_shape)):
            if o + s > f:
                raise errors.InvalidArgumentError(
                    f"with var_offset {self._var_offset}, a shard of shape {shape} exceeds full_shape "
                    f"{self._full_shape} in dimension {i}")
            if s != f:
                if dim is not None:
                    raise errors.InvalidArgumentError(
                        f"shape {shape} is cut along dimensions {dim} and {i} of {self._full_shape}")
                dim = i
        return dim

    def single_offset(self, shape):
        """The shard's offset along its cut axis (0 when it is whole)."""
        dim = self.single_slice_dim(shape)
        return 0 if dim is None else self._var_offset[dim]


def call_partitioner(partitioner, shape, dtype, name):
    """``partitioner``'s answer for a variable, checked: a list of one int >= 1 per axis,
    at most one above 1 (TF1's ``_call_partitioner``)."""
    if not shape.is_fully_defined():
        raise errors.InvalidArgumentError(
            f"Shape of a new partitioned variable ({name}) must be fully defined, but instead was {shape}")
    if shape.ndims < 1:
        raise errors.InvalidArgumentError(
            f"A partitioned Variable must have rank at least 1, shape: {shape} (variable {name}); "
            "create scalars without a partitioner")
    slicing = partitioner(shape=shape, dtype=dtype)
    if not isinstance(slicing, Sequence) or isinstance(slicing, str):
        raise errors.InvalidArgumentError(f"Partitioner must return a sequence, but saw: {slicing!r} (variable {name})")
    slicing = list(slicing)
    if len(slicing) != shape.ndims:
        raise errors.InvalidArgumentError(
            f"Partitioner returned a partition list that does not match the Variable's rank: {slicing} vs. {shape} "
            f"(variable {name})")
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in slicing):
        raise errors.InvalidArgumentError(
            f"Partitioner returned zero (or non-integer) partitions for some axes: {slicing} (variable {name})")
    if sum(p > 1 for p in slicing) > 1:
        raise errors.InvalidArgumentError(
            f"Can only slice a variable along one dimension: shape: {shape}, partitioning: {slicing} (variable {name})")
    for size, p in zip(shape.as_list(), slicing):
        if size < p:
            raise errors.InvalidArgumentError(
                f"Cannot create {p} slices for size {size}. shape: {shape}, slicing: {slicing} (variable {name})")
    return slicing


def slice_dim_and_count(partitions):
    """(the axis cut, the number of shards); axis 0 and 1 shard when nothing is cut."""
    for dim, n in enumerate(partitions):
        if n > 1:
            return dim, n
    return 0, 1


def iter_slices(full_shape, num_slices, slice_dim):
    """(offset, shape) of each shard: ``full // n`` along ``slice_dim``, one more for the
    first ``full % n`` shards."""
    full_shape = list(full_shape)
    extra = full_shape[slice_dim] % num_slices
    base = full_shape[slice_dim] // num_slices
    offset = [0] * len(full_shape)
    for i in range(num_slices):
        shape = list(full_shape)
        shape[slice_dim] = base + (1 if i < extra else 0)
        yield list(offset), shape
        offset[slice_dim] += shape[slice_dim]


# ----------------------------------------------------------------------------------------
class PartitionedVariable:
    """A variable stored as shards (``tw.get_variable(..., partitioner=...)``).

    Iterating gives the shard ``tw.Variable``s in order; ``len`` is their number;
    ``as_tensor()`` (also what ``tw.convert_to_tensor`` and ops taking it give) concatenates
    them along the partition axis. ``tw.nn.embedding_lookup`` reads only the rows it needs,
    from each shard on its own device.
    """

    def __init__(self, name, shape, dtype, variable_list, partitions):
        if not isinstance(variable_list, list | tuple) or not variable_list:
            raise errors.InvalidArgumentError(f"PartitionedVariable {name}: variable_list must be a non-empty list")
        if not all(isinstance(v, Variable) for v in variable_list):
            raise errors.InvalidArgumentError(f"PartitionedVariable {name}: every shard must be a tw.Variable")
        shape = as_shape(shape)
        partitions = list(partitions)
        if len(partitions) != shape.ndims:
            raise errors.InvalidArgumentError(
                f"PartitionedVariable {name}: {len(partitions)} partition counts for a variable of rank {shape.ndims}")
        if math.prod(partitions) != len(variable_list):
            raise errors.InvalidArgumentError(
                f"PartitionedVariable {name}: partitions {partitions} make {math.prod(partitions)} shards, "
                f"but {len(variable_list)} variables were given")
        if any(v._get_save_slice_info() is None for v in variable_list):
            raise errors.InvalidArgumentError(
                f"PartitionedVariable {name}: every shard must have a save_slice_info")
        self._name = name
        self._shape = shape
        self._dtype = dtypes.as_dtype(dtype)
        self._partitions = partitions
        self._variable_list = sorted(variable_list, key=lambda v: v._get_save_slice_info().var_offset)
        self._as_tensor = None

    def __iter__(self):
        return iter(self._variable_list)

    def __len__(self):
        return len(self._variable_list)

    def __repr__(self):
        return f"<tw.PartitionedVariable '{self._name}' shape={self._shape} dtype={self._dtype.name} shards={len(self)}>"

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: self._shape)
    graph = property(lambda self: self._variable_list[0].graph)

    def get_shape(self):
        return self._shape

    def _get_variable_list(self):
        return list(self._variable_list)

    def _get_partitions(self):
        return list(self._partitions)

    def _partition_axes(self):
        return [i for i, p in enumerate(self._partitions) if p > 1] or [0]

    def _concat(self):
        """The shards concatenated: ``<name>/ConcatPartitions/concat`` then an identity named
        like the variable (as TF1), outside any name scope."""
        if len(self._variable_list) == 1:
            with get_default_graph().name_scope(None):
                return array_ops.identity(self._variable_list[0], name=self._name)
        (axis,) = self._partition_axes()
        g = get_default_graph()
        with g.name_scope(None), g.name_scope(self._name + "/ConcatPartitions/"):
            concatenated = array_ops.concat(self._variable_list, axis)
        with g.name_scope(None):
            return array_ops.identity(concatenated, name=self._name)

    def as_tensor(self):
        """The whole value: the shards concatenated (a new read each call, like TF1; outside
        any control dependencies, so it can be used anywhere)."""
        with get_default_graph().control_dependencies(None):
            return self._concat()

    def _apply_assign_fn(self, assign_fn, value):
        (axis,) = self._partition_axes()
        sizes = [v._get_save_slice_info().var_shape[axis] for v in self._variable_list]
        value = convert_to_tensor(value, dtype=self._dtype)
        with get_default_graph().name_scope(self._name + "/split"):
            parts = array_ops.split(value, sizes, axis=axis) if len(sizes) > 1 else [value]
        return [assign_fn(v, p) for v, p in zip(self._variable_list, parts)]

    def assign(self, value, use_locking=False, name=None, read_value=True):
        """Assign ``value`` (the whole shape) shard by shard; returns the per-shard assigns."""
        return self._apply_assign_fn(lambda v, p: v.assign(p, use_locking=use_locking), value)

    def assign_add(self, value, use_locking=False, name=None, read_value=True):
        return self._apply_assign_fn(lambda v, p: v.assign_add(p, use_locking=use_locking), value)

    def assign_sub(self, value, use_locking=False, name=None, read_value=True):
        return self._apply_assign_fn(lambda v, p: v.assign_sub(p, use_locking=use_locking), value)


def _convert_partitioned(v, dtype=None, name=None):
    if dtype is not None and dtypes.as_dtype(dtype) is not v.dtype:
        raise errors.InvalidArgumentError(
            f"partitioned variable '{v.name}' has dtype {v.dtype.name}, but {dtypes.as_dtype(dtype).name} was "
            "expected (use tw.cast to convert)")
    return v.as_tensor()


register_tensor_conversion_function(PartitionedVariable, _convert_partitioned)
