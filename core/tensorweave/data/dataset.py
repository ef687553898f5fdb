"""``tw.data.Dataset`` (TF 1.4+): datasets as graph ops, built from Python.

A ``Dataset`` is a graph-side description: the dataset tensor of one op
(``ops/dataset_ops.py``) plus the nested structure of its elements (``output_types``,
``output_shapes``, ``output_classes``). Every method adds one op to the graph at once and
returns a new Dataset; functions given to ``map``/``filter``/``flat_map``/``interleave`` are
traced then, once, into graph functions (``framework/function.py``), so their output
structure and types are fixed at that point. Iterators (``iterator.py``) run the pipeline.
"""

from __future__ import annotations

import uuid

import numpy as np

from tensorweave.data import structure as nest
from tensorweave.data.iterator import Iterator
from tensorweave.data.structure import StructureTypeError
from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors, function
from tensorweave.framework.graph import Tensor, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import array_ops, dataset_ops, io_ops, math_ops
from tensorweave.ops.random_ops import get_seed
from tensorweave.runtime import datasets as runtime_datasets

__all__ = ["Dataset"]


def _int64(v, name):
    if isinstance(v, Tensor):
        return v if v.dtype is dtypes_mod.int64 else math_ops.cast(v, dtypes_mod.int64, name=name)
    return convert_to_tensor(v, dtype=dtypes_mod.int64, name=name)


def _bool(v, name):
    return v if isinstance(v, Tensor) else convert_to_tensor(bool(v), dtype=dtypes_mod.bool_, name=name)


def _leaf_tensor(v, what):
    if isinstance(v, Dataset):
        raise errors.InvalidArgumentError(f"{what}: a Dataset cannot be a component of an element")
    try:
        return convert_to_tensor(v)
    except errors.InvalidArgumentError as e:
        raise errors.InvalidArgumentError(f"{what}: {e.message}") from None


def _to_tensors(value, what):
    return nest.map_structure(lambda v: _leaf_tensor(v, what), value)


def _most_specific(a: TensorShape, b: TensorShape) -> TensorShape:
    if a.ndims is None or b.ndims is None or a.ndims != b.ndims:
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.dims, b.dims)])


class Dataset(nest.ElementStructure):
    """A sequence of elements, each a nested structure (tuples, dicts) of tensors."""

    def __init__(self, variant: Tensor, output_types, output_shapes):
        self._variant = variant
        self._types = output_types
        self._shapes = nest.map_structure(as_shape, output_shapes)


    def _as_variant_tensor(self) -> Tensor:
        return self._variant

    @property
    def _flat_types(self) -> list:
        return nest.flatten(self._types)

    @property
    def _flat_shapes(self) -> list:
        return nest.flatten(self._shapes)

    def _describe(self) -> str:
        return f"dataset '{self._variant.op.name}'"

    def __repr__(self):
        return (f"<tw.data.Dataset '{self._variant.op.name}' types={nest.describe(self._types)} "
                f"shapes={nest.describe(self._shapes)}>")

    def __iter__(self):
        raise RuntimeError("a tw.data.Dataset is not iterable in Python: the graph runs it. Use "
                           "dataset.make_one_shot_iterator().get_next() and run that tensor in a Session")

    def _derive(self, op_type, inputs, output_types=None, output_shapes=None, attrs=None, name=None) -> Dataset:
        types = self._types if output_types is None else output_types
        shapes = self._shapes if output_shapes is None else output_shapes
        v = dataset_ops.dataset_op(op_type, [self._variant] + list(inputs), nest.flatten(types),
                                   nest.flatten(shapes), attrs, name=name)
        return Dataset(v, types, shapes)

    # -- iterators --------------------------------------------------------------------------
    def make_one_shot_iterator(self):
        """An iterator that starts itself (no initializer). The dataset may not depend on
        placeholders or variables: use ``make_initializable_iterator`` for those."""
        return Iterator._one_shot(self)

    def make_initializable_iterator(self, shared_name=None):
        """An iterator whose ``initializer`` (re)starts it; placeholders in the dataset are fed
        when the initializer runs."""
        it = Iterator.from_structure(self._types, self._shapes, shared_name=shared_name)
        it._initializer = it.make_initializer(self)
        return it

    # -- sources ----------------------------------------------------------------------------
    @staticmethod
    def from_tensors(tensors):
        """A dataset of one element: ``tensors`` (a nested structure)."""
        t = _to_tensors(tensors, "Dataset.from_tensors")
        flat = nest.flatten(t)
        types = nest.map_structure(lambda x: x.dtype, t)
        shapes = nest.map_structure(lambda x: x.shape, t)
        v = dataset_ops.dataset_op("TensorDataset", [flat], nest.flatten(types), nest.flatten(shapes))
        return Dataset(v, types, shapes)

    @staticmethod
    def from_tensor_slices(tensors):
        """A dataset of the slices of ``tensors`` along their first dimension (all components
        must have the same size there)."""
        t = _to_tensors(tensors, "Dataset.from_tensor_slices")
        flat = nest.flatten(t)
        for x in flat:
            if x.shape.ndims == 0:
                raise errors.InvalidArgumentError(
                    f"Dataset.from_tensor_slices: component '{x.name}' is a scalar; every component needs a first "
                    "dimension to slice")
        types = nest.map_structure(lambda x: x.dtype, t)
        shapes = nest.map_structure(lambda x: TensorShape(None) if x.shape.ndims is None
                                    else TensorShape(x.shape.dims[1:]), t)
        v = dataset_ops.dataset_op("TensorSliceDataset", [flat], nest.flatten(types), nest.flatten(shapes))
        return Dataset(v, types, shapes)

    @staticmethod
    def range(*args):
        """int64 scalars like Python's ``range(stop)``/``range(start, stop[, step])``."""
        if not 1 <= len(args) <= 3:
            raise errors.InvalidArgumentError(f"Dataset.range takes 1 to 3 arguments, got {len(args)}")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        v = dataset_ops.dataset_op("RangeDataset", [_int64(start, "start"), _int64(stop, "stop"),
                                                    _int64(step, "step")], [dtypes_mod.int64], [[]])
        return Dataset(v, dtypes_mod.int64, TensorShape([]))

    @staticmethod
    def zip(datasets):
        """Elements of ``datasets`` (a nested structure of Datasets) side by side, in that
        structure; as long as every one has elements."""
        flat = nest.flatten(datasets)
        bad = [d for d in flat if not isinstance(d, Dataset)]
        if bad or not nest.is_structure(datasets):
            raise StructureTypeError(
                "Dataset.zip takes a nested structure (tuple or dict) of Dataset objects, got "
                f"{nest.describe(datasets)}" + (f" holding a {type(bad[0]).__name__}" if bad else ""))
        types = nest.pack_as(datasets, [d._types for d in flat])
        shapes = nest.pack_as(datasets, [d._shapes for d in flat])
        v = dataset_ops.dataset_op("ZipDataset", [[d._variant for d in flat]], nest.flatten(types),
                                   nest.flatten(shapes))
        return Dataset(v, types, shapes)

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None):
        """Elements from ``generator(*args)``, a Python callable returning an iterable; its
        values are converted to ``output_types`` and checked against ``output_shapes`` as
        they come. Runs only in this Python process (not on a remote worker)."""
        if not callable(generator):
            raise StructureTypeError(f"Dataset.from_generator: generator must be callable, got {generator!r}")
        types = nest.map_structure(dtypes_mod.as_dtype, output_types)
        if output_shapes is None:
            shapes = nest.map_structure(lambda _: TensorShape(None), types)
        else:
            nest.assert_same(types, output_shapes, "Dataset.from_generator: output_types and output_shapes")
            shapes = nest.map_structure(as_shape, output_shapes)
        arg_tensors = [convert_to_tensor(a) for a in (args or ())]
        g = get_default_graph()
        token = f"generator-{uuid.uuid4().hex}"

        def make(*arg_values):
            source = iter(generator(*arg_values))
            return (_flatten_up_to(types, v) for v in source)

        runtime_datasets.register_generator(token, make, owner=g)
        v = dataset_ops.dataset_op("GeneratorDataset", [arg_tensors], nest.flatten(types), nest.flatten(shapes),
                                   {"generator": token})
        return Dataset(v, types, shapes)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None):
        """The names of the files matching ``file_pattern`` (a glob, or a list of them); in a
        random order unless ``shuffle=False`` (seeded by ``seed`` and the graph seed)."""
        names = io_ops.matching_files(file_pattern)
        ds = Dataset.from_tensor_slices(names)
        if shuffle is None or shuffle:
            n = math_ops.maximum(array_ops.size(names, out_type=dtypes_mod.int64), np.int64(1))
            ds = ds.shuffle(n, seed=seed)
        return ds

    # -- transformations --------------------------------------------------------------------
    def concatenate(self, dataset):
        """This dataset's elements, then ``dataset``'s (same structure and types)."""
        if not isinstance(dataset, Dataset):
            raise StructureTypeError(f"concatenate takes a Dataset, got {type(dataset).__name__}")
        if not nest.same(self._types, dataset._types) or self._flat_types != dataset._flat_types:
            raise StructureTypeError(
                f"concatenate: the two datasets' element types do not match: {nest.describe(self._types)} and "
                f"{nest.describe(dataset._types)}")
        shapes = nest.pack_as(self._types, [_most_specific(a, b) for a, b in
                                            zip(self._flat_shapes, dataset._flat_shapes)])
        return self._derive("ConcatenateDataset", [dataset._variant], output_shapes=shapes)

    def _trace(self, fn, what, op_name, returns_dataset=False):
        """Trace ``fn`` on this dataset's elements into a FuncGraph; returns (graph, output
        structure of types, of shapes)."""
        template = self._types
        result = {}

        def body(*args):
            el = nest.pack_as(template, args)
            out = fn(*el) if type(el) is tuple else fn(el)
            if returns_dataset:
                if not isinstance(out, Dataset):
                    raise StructureTypeError(f"{what} must return a Dataset, returned {type(out).__name__}")
                result["ds"] = out
                return [out._variant]
            if out is None:
                raise errors.InvalidArgumentError(f"{what} returned None; it must return tensors")
            out = _to_tensors(out, what)
            result["structure"] = out
            return nest.flatten(out)

        # ``op_name`` is unique already (reserved by the caller): its function's scope is absolute.
        fg = function.trace(body, list(zip(self._flat_types, self._flat_shapes)), name=f"{op_name}/fn/", what=what)
        if returns_dataset:
            inner = result["ds"]
            return fg, inner._types, inner._shapes
        s = result["structure"]
        return fg, nest.pack_as(s, fg.output_dtypes), nest.pack_as(s, fg.output_shapes)

    def _name(self, kind):
        return get_default_graph().unique_name(kind)

    def map(self, map_func, num_parallel_calls=None):
        """``map_func(element)`` for each element (a tuple element is passed as separate
        arguments). With ``num_parallel_calls`` n > 1, up to n calls run at once on the
        session's inter-op threads; the order of elements is kept."""
        op_type = "MapDataset" if num_parallel_calls is None else "ParallelMapDataset"
        name = self._name(op_type)
        fg, types, shapes = self._trace(map_func, f"the map function of {op_type} '{name}'", name)
        inputs = [fg.captured_inputs]
        if num_parallel_calls is not None:
            n = num_parallel_calls
            if isinstance(n, Tensor):
                inputs.append(n if n.dtype is dtypes_mod.int32 else math_ops.cast(n, dtypes_mod.int32))
            else:
                inputs.append(convert_to_tensor(int(n), dtype=dtypes_mod.int32, name="num_parallel_calls"))
        v = dataset_ops.dataset_op(op_type, [self._variant] + inputs, nest.flatten(types), nest.flatten(shapes),
                                   {"f": fg.definition}, name=name, exact_name=True)
        return Dataset(v, types, shapes)

    def filter(self, predicate):
        """The elements for which ``predicate(element)`` is true (a bool scalar tensor)."""
        name = self._name("FilterDataset")
        what = f"the predicate of FilterDataset '{name}'"
        fg, types, shapes = self._trace(predicate, what, name)
        if len(fg.outputs) != 1 or fg.output_dtypes[0] is not dtypes_mod.bool_ or \
                not fg.output_shapes[0].is_compatible_with(TensorShape([])):
            raise errors.InvalidArgumentError(
                f"{what} must return a scalar bool tensor, returned {nest.describe(types)} of shape "
                f"{nest.describe(shapes)}")
        v = dataset_ops.dataset_op("FilterDataset", [self._variant, fg.captured_inputs], self._flat_types,
                                   self._flat_shapes, {"predicate": fg.definition}, name=name, exact_name=True)
        return Dataset(v, self._types, self._shapes)

    def flat_map(self, map_func):
        """The elements of the datasets ``map_func(element)`` returns, one after another."""
        name = self._name("FlatMapDataset")
        fg, types, shapes = self._trace(map_func, f"the function of FlatMapDataset '{name}'", name,
                                        returns_dataset=True)
        v = dataset_ops.dataset_op("FlatMapDataset", [self._variant, fg.captured_inputs], nest.flatten(types),
                                   nest.flatten(shapes), {"f": fg.definition}, name=name, exact_name=True)
        return Dataset(v, types, shapes)

    def interleave(self, map_func, cycle_length, block_length=1):
        """Like ``flat_map``, with ``cycle_length`` of the returned datasets open at once,
        ``block_length`` consecutive elements from each in turn."""
        name = self._name("InterleaveDataset")
        fg, types, shapes = self._trace(map_func, f"the function of InterleaveDataset '{name}'", name,
                                        returns_dataset=True)
        v = dataset_ops.dataset_op("InterleaveDataset", [self._variant, fg.captured_inputs,
                                                         _int64(cycle_length, "cycle_length"),
                                                         _int64(block_length, "block_length")],
                                   nest.flatten(types), nest.flatten(shapes), {"f": fg.definition}, name=name,
                                   exact_name=True)
        return Dataset(v, types, shapes)

    def batch(self, batch_size, drop_remainder=False):
        """Consecutive elements stacked along a new first dimension; the last batch may be
        smaller unless ``drop_remainder``. Components must have the same shape in a batch."""
        bs = _int64(batch_size, "batch_size")
        n = dataset_ops.static_int(bs) if drop_remainder is True else None
        shapes = nest.map_structure(lambda s: TensorShape([n]).concatenate(s), self._shapes)
        return self._derive("BatchDatasetV2", [bs, _bool(drop_remainder, "drop_remainder")], output_shapes=shapes)

    def padded_batch(self, batch_size, padded_shapes, padding_values=None, drop_remainder=False):
        """Batches whose components are padded to ``padded_shapes`` (a structure like the
        elements' of shapes; None or -1: the longest in the batch) with ``padding_values``
        (default 0, or b"" for strings)."""
        try:
            nest.assert_same(self._shapes, padded_shapes, "padded_batch: the elements and padded_shapes")
            if padding_values is not None:
                nest.assert_same(self._types, padding_values, "padded_batch: the elements and padding_values")
        except errors.InvalidArgumentError as e:
            raise StructureTypeError(e.message) from None
        flat_padded = []
        static = []
        for i, (p, s) in enumerate(zip(nest.flatten(padded_shapes), self._flat_shapes)):
            if isinstance(p, Tensor):
                flat_padded.append(_int64(p, f"padded_shape_{i}"))
                n = p.shape.dims[0] if p.shape.ndims == 1 else None
                static.append(TensorShape(None) if n is None else TensorShape([None] * n))
                continue
            ps = as_shape(p)
            if ps.ndims is None:
                raise errors.InvalidArgumentError(f"padded_batch: padded shape {i} must have a known rank")
            if s.ndims is not None and s.ndims != ps.ndims:
                raise errors.InvalidArgumentError(
                    f"padded_batch: component {i} has shape {s}, but its padded shape {ps} has a different rank")
            if s.ndims is not None:
                for k, (d, pd) in enumerate(zip(s.dims, ps.dims)):
                    if d is not None and pd is not None and d > pd:
                        raise errors.InvalidArgumentError(
                            f"padded_batch: component {i} has shape {s}, larger than its padded shape {ps} in "
                            f"dimension {k}")
            flat_padded.append(convert_to_tensor(np.array([-1 if d is None else d for d in ps.dims], np.int64),
                                                 name=f"padded_shape_{i}"))
            static.append(ps)
        if padding_values is None:
            flat_values = [convert_to_tensor(b"" if dt.is_string else np.zeros((), dt.np_dtype), dtype=dt,
                                             name=f"padding_value_{i}")
                           for i, dt in enumerate(self._flat_types)]
        else:
            flat_values = []
            for i, (v, dt) in enumerate(zip(nest.flatten(padding_values), self._flat_types)):
                t = convert_to_tensor(v, dtype=dt, name=f"padding_value_{i}") if not isinstance(v, Tensor) else v
                if t.dtype is not dt:
                    raise StructureTypeError(
                        f"padded_batch: padding value {i} has dtype {t.dtype.name}, component {i} is {dt.name}")
                flat_values.append(t)
        bs = _int64(batch_size, "batch_size")
        n = dataset_ops.static_int(bs) if drop_remainder is True else None
        shapes = nest.pack_as(self._types, [TensorShape([n]).concatenate(s) for s in static])
        v = dataset_ops.dataset_op("PaddedBatchDatasetV2", [self._variant, bs, flat_padded + flat_values,
                                                            _bool(drop_remainder, "drop_remainder")],
                                   self._flat_types, nest.flatten(shapes))
        return Dataset(v, self._types, shapes)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None):
        """Elements in a random order, from a buffer of ``buffer_size``; deterministic given a
        graph seed (``tw.set_random_seed``) or ``seed``; a new order each pass unless
        ``reshuffle_each_iteration=False``."""
        s1, s2 = get_seed(seed)
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        return self._derive("ShuffleDataset", [_int64(buffer_size, "buffer_size"), _int64(s1 or 0, "seed"),
                                               _int64(s2 or 0, "seed2")],
                            attrs={"reshuffle_each_iteration": reshuffle})

    def repeat(self, count=None):
        """The elements ``count`` times (forever when None or -1)."""
        return self._derive("RepeatDataset", [_int64(-1 if count is None else count, "count")])

    def take(self, count):
        """At most the first ``count`` elements (all when -1)."""
        return self._derive("TakeDataset", [_int64(count, "count")])

    def skip(self, count):
        """All but the first ``count`` elements (none when -1)."""
        return self._derive("SkipDataset", [_int64(count, "count")])

    def shard(self, num_shards, index):
        """Every ``num_shards``-th element, starting with element ``index`` (one worker's
        share of the input in distributed training)."""
        return self._derive("ShardDataset", [_int64(num_shards, "num_shards"), _int64(index, "index")])

    def prefetch(self, buffer_size):
        """The same elements, produced ahead by a background thread into a buffer of
        ``buffer_size``, so producing overlaps with the consumer's work."""
        return self._derive("PrefetchDataset", [_int64(buffer_size, "buffer_size")])

    def cache(self, filename=""):
        """The same elements, read from the input once: kept in memory, or in the file
        ``filename`` + ``.twcache`` (reused by later runs) when ``filename`` is given."""
        f = filename if isinstance(filename, Tensor) else convert_to_tensor(filename or "", dtype=dtypes_mod.string)
        return self._derive("CacheDataset", [f])

    def apply(self, transformation_func):
        """``transformation_func(self)``, which must return a Dataset (for chaining)."""
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise StructureTypeError(f"apply: the transformation must return a Dataset, returned {type(out).__name__}")
        return out


def _flatten_up_to(types, value) -> list:
    """The components of one generated value, following the structure of ``types``; a value
    of another structure is a ValueError saying what was expected."""
    out = []

    def walk(t, v):
        if isinstance(t, dict):
            if not isinstance(v, dict) or sorted(v) != sorted(t):
                raise ValueError(_yield_mismatch(types, value))
            for k in sorted(t):
                walk(t[k], v[k])
        elif isinstance(t, tuple):
            if not isinstance(v, tuple | list) or len(v) != len(t):
                raise ValueError(_yield_mismatch(types, value))
            for a, b in zip(t, v):
                walk(a, b)
        else:
            out.append(v)

    walk(types, value)
    return out


def _yield_mismatch(types, value) -> str:
    return (f"the generator yielded {value!r:.100}, which does not have the structure of output_types "
            f"{nest.describe(types)}")

