"""Dataset and iterator kernels (``tw.data``): host logic, registered by the core for the CPU
device of every task.

A dataset op's kernel builds the run-time dataset (``runtime/datasets.py``) from its input
values and returns it wrapped as the dataset tensor's value; kernels of ops with a ``func``
attr instantiate the function once, when the kernel is built (``runtime/functions.py``), on
the same device. The iterator kernels create the iterator resource in the session's
containers (like queues) and forward to it.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.runtime import datasets as ds
from tensorweave.runtime import file_access
from tensorweave.runtime.functions import Function

CPU = "CPU"


def _what(ctx) -> str:
    return f"{ctx.op.type} '{ctx.op.name}'"


def _element(ctx):
    """(dtypes, shapes) of the node's elements; file sources have scalar strings."""
    a = ctx.attrs
    if "output_shapes" not in a:
        return [dtypes_mod.string], [TensorShape([])]
    types = a["output_types"] if "output_types" in a else a["Toutput_types"]
    return list(types), list(a["output_shapes"])


def _function(ctx, attr: str, env: ds.Env) -> Function:
    return Function(ctx.attrs[attr], ctx.device, ctx.resources, ctx.session, what=_what(ctx), pool=env.pool)


def _source(make):
    """A kernel whose dataset is ``make(name, dtypes, shapes, *inputs)``; bad input values are
    this node's InvalidArgumentError."""
    def factory(ctx):
        name = ctx.op.name
        types, shapes = _element(ctx)

        def compute(*inputs):
            return ds.wrap(make(name, types, shapes, *inputs))
        return compute
    return factory


def _file_source(make):
    """``_source`` for the datasets that read files: ``make(name, access, *inputs)`` gets the
    session's ``FileAccess`` (a worker only lets clients read the directories it allows)."""
    def factory(ctx):
        access = file_access.of(ctx.resources)
        return _source(lambda name, _types, _shapes, *inputs: make(name, access, *inputs))(ctx)
    return factory


def _unwrap(ctx, v):
    return ds.unwrap(v, _what(ctx))


def _with_input(make):
    """A transformation of one input dataset: ``make(name, input, dtypes, shapes, *rest)``."""
    def factory(ctx):
        name = ctx.op.name
        types, shapes = _element(ctx)

        def compute(input_dataset, *rest):
            return ds.wrap(make(name, _unwrap(ctx, input_dataset), types, shapes, *rest))
        return compute
    return factory


def _map(parallel: bool):
    def factory(ctx):
        env = ds.Env(ctx.session)
        fn = _function(ctx, "f", env)
        name = ctx.op.name
        types, shapes = _element(ctx)
        kind = ctx.op.type

        def compute(input_dataset, *args):
            n = 1
            if parallel:
                args, n = args[:-1], args[-1]
            return ds.wrap(ds.MapDataset(name, _unwrap(ctx, input_dataset), fn, args, types, shapes,
                                         int(n), kind=kind))
        return compute
    return factory


def _with_function(cls, attr, n_extra=0):
    """Filter/flat_map/interleave: one input dataset, captured arguments, then ``n_extra``
    scalar inputs."""
    def factory(ctx):
        env = ds.Env(ctx.session)
        fn = _function(ctx, attr, env)
        name = ctx.op.name
        types, shapes = _element(ctx)

        def compute(input_dataset, *args):
            extra = args[len(args) - n_extra:] if n_extra else ()
            captured = args[:len(args) - n_extra] if n_extra else args
            return ds.wrap(cls(name, _unwrap(ctx, input_dataset), fn, captured, *extra, types, shapes))
        return compute
    return factory


def _zip(ctx):
    name = ctx.op.name
    types, shapes = _element(ctx)

    def compute(*inputs):
        return ds.wrap(ds.ZipDataset(name, [_unwrap(ctx, v) for v in inputs], types, shapes))
    return compute


def _concatenate(ctx):
    name = ctx.op.name
    types, shapes = _element(ctx)

    def compute(a, b):
        return ds.wrap(ds.ConcatenateDataset(name, _unwrap(ctx, a), _unwrap(ctx, b), types, shapes))
    return compute


def _padded_batch(ctx):
    name = ctx.op.name
    types, shapes = _element(ctx)
    n = len(types)

    def compute(input_dataset, batch_size, *rest):
        padded, values, drop = rest[:n], rest[n:2 * n], rest[-1]
        return ds.wrap(ds.PaddedBatchDataset(name, _unwrap(ctx, input_dataset), batch_size, padded, values, drop,
                                             types, shapes))
    return compute


def _shuffle(ctx):
    name = ctx.op.name
    types, shapes = _element(ctx)
    reshuffle = ctx.attrs["reshuffle_each_iteration"]

    def compute(input_dataset, buffer_size, seed, seed2):
        return ds.wrap(ds.ShuffleDataset(name, _unwrap(ctx, input_dataset), buffer_size, seed, seed2, reshuffle,
                                         types, shapes))
    return compute


def _generator(ctx):
    name = ctx.op.name
    token = ctx.attrs["generator"]
    types, shapes = _element(ctx)

    def compute(*args):
        return ds.wrap(ds.GeneratorDataset(name, token, args, types, shapes))
    return compute


# ----------------------------------------------------------------------------------------
# iterators
def _resource(ctx):
    """(the handle value, ``get()`` -> the node's IteratorResource, created on first use)."""
    container = ctx.attrs["container"]
    name = ctx.attrs["shared_name"] or ctx.op.name
    types, shapes = list(ctx.attrs["output_types"]), list(ctx.attrs["output_shapes"])
    found = []  # containers reset resources but never drop them: the object found stays valid

    def get():
        if found:
            return found[0]
        r = ds.lookup_or_create(ctx.resources, container, name, lambda: ds.IteratorResource(name, types, shapes))
        if r.dtypes != types or not r.compatible_shapes(shapes):
            raise ctx.error(errors.InvalidArgumentError,
                            f"shared iterator {name!r} in container {container!r} already exists with types "
                            f"{[d.name for d in r.dtypes]} and shapes {[str(s) for s in r.shapes]}; this node "
                            "declares a different one")
        found.append(r)
        return r
    return ds.make_handle(container, name), get


def _iterator(ctx):
    handle, get = _resource(ctx)

    def iterator_op():
        get()
        return handle
    return iterator_op


def _one_shot(ctx):
    handle, get = _resource(ctx)
    env = ds.Env(ctx.session)
    factory = _function(ctx, "dataset_factory", env)

    def one_shot_op():
        r = get()
        with r.init_lock:
            if not r.one_shot_started:
                dataset = ds.unwrap(factory([])[0], _what(ctx))
                r.make_iterator(dataset, env)
                r.one_shot_started = True
        return handle
    return one_shot_op


def _lookup(ctx):
    """Handle value -> IteratorResource, cached per value (handles rarely change)."""
    resources = ctx.resources
    cache = {}

    def find(handle):
        key = handle.item() if isinstance(handle, np.ndarray) else handle
        r = cache.get(key)
        if r is None:
            r = cache[key] = ds.lookup(resources, handle)
        return r
    return find


def _make_iterator(ctx):
    find = _lookup(ctx)
    env = ds.Env(ctx.session)

    def make_iterator(dataset, handle):
        find(handle).make_iterator(_unwrap(ctx, dataset), env)
    return make_iterator


def _get_next(ctx):
    find = _lookup(ctx)
    types = list(ctx.attrs["output_types"])
    checked = set()

    def get_next(handle):
        r = find(handle)
        if id(r) not in checked:  # a handle fed through from_string_handle may name any iterator
            r.check_types(types, _what(ctx))
            checked.add(id(r))
        return r.get_next()
    return get_next


def _from_string_handle(ctx):
    find = _lookup(ctx)
    types = list(ctx.attrs["output_types"])

    def from_string_handle(string_handle):
        r = find(string_handle)
        if types:
            r.check_types(types, _what(ctx))
        return string_handle
    return from_string_handle


def register_kernels(reg):
    reg.register("TensorDataset", CPU, factory=_source(
        lambda name, types, shapes, *comps: ds.TensorDataset(name, comps, types, shapes)))
    reg.register("TensorSliceDataset", CPU, factory=_source(
        lambda name, types, shapes, *comps: ds.TensorSliceDataset(name, comps, types, shapes)))
    reg.register("RangeDataset", CPU, factory=_source(
        lambda name, types, shapes, start, stop, step: ds.RangeDataset(name, start, stop, step)))
    reg.register("TextLineDataset", CPU, factory=_file_source(
        lambda name, access, files, compression, _buf: ds.TextLineDataset(name, files, compression, access)))
    reg.register("TFRecordDataset", CPU, factory=_file_source(
        lambda name, access, files, compression, _buf: ds.TFRecordDataset(name, files, compression, access)))
    reg.register("FixedLengthRecordDataset", CPU, factory=_file_source(
        lambda name, access, files, header, record, footer, _buf:
        ds.FixedLengthRecordDataset(name, files, header, record, footer, access)))
    reg.register("GeneratorDataset", CPU, factory=_generator)
    reg.register("ZipDataset", CPU, factory=_zip)
    reg.register("ConcatenateDataset", CPU, factory=_concatenate)
    reg.register("MapDataset", CPU, factory=_map(False))
    reg.register("ParallelMapDataset", CPU, factory=_map(True))
    reg.register("FilterDataset", CPU, factory=_with_function(ds.FilterDataset, "predicate"))
    reg.register("FlatMapDataset", CPU, factory=_with_function(ds.FlatMapDataset, "f"))
    reg.register("InterleaveDataset", CPU, factory=_with_function(ds.InterleaveDataset, "f", n_extra=2))
    reg.register("BatchDatasetV2", CPU, factory=_with_input(
        lambda name, inp, types, shapes, bs, drop: ds.BatchDataset(name, inp, bs, drop, types, shapes)))
    reg.register("PaddedBatchDatasetV2", CPU, factory=_padded_batch)
    reg.register("ShuffleDataset", CPU, factory=_shuffle)
    reg.register("ShardDataset", CPU, factory=_with_input(
        lambda name, inp, types, shapes, n, i: ds.ShardDataset(name, inp, n, i, types, shapes)))
    for op, cls in (("RepeatDataset", ds.RepeatDataset), ("TakeDataset", ds.TakeDataset),
                    ("SkipDataset", ds.SkipDataset), ("PrefetchDataset", ds.PrefetchDataset),
                    ("CacheDataset", ds.CacheDataset)):
        reg.register(op, CPU, factory=_with_input(
            lambda name, inp, types, shapes, arg, _cls=cls: _cls(name, inp, arg, types, shapes)))
    reg.register("Iterator", CPU, factory=_iterator)
    reg.register("OneShotIterator", CPU, factory=_one_shot)
    reg.register("MakeIterator", CPU, factory=_make_iterator)
    reg.register("IteratorGetNext", CPU, factory=_get_next)
    reg.register("IteratorToStringHandle", CPU, factory=lambda ctx: lambda handle: handle)
    reg.register("IteratorFromStringHandle", CPU, factory=_from_string_handle)
