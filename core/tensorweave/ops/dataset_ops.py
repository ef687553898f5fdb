"""Dataset and iterator ops (``tw.data``, TF 1.4+): their definitions and flat graph-side
wrappers. The Python API with nested structures is ``tensorweave.data``; the kernels are in
``kernels/datasets.py`` and the run-time objects in ``runtime/datasets.py``.

As in TensorFlow, every source and transformation is an op that outputs a *dataset tensor*
(``handle``: a scalar; see below), taking its input datasets and parameters as inputs, and
declaring its elements' flat ``output_types``/``output_shapes`` as attrs. Functions
(``map``, ``filter``, ``flat_map``, ``interleave``) are ``func`` attrs holding a FunctionDef
(``framework/function.py``); the tensors they capture are the op's ``other_arguments``, so a
captured placeholder is fed when the dataset op runs. Dataset ops are cheap descriptions:
they run when an iterator is initialised (``MakeIterator``), which is why re-running an
initializer with a new feed restarts the pipeline with the new values.

Iterators: ``Iterator`` outputs a resource handle ``b"<container>:<name>"`` (a string, like
queue handles); ``MakeIterator(dataset, iterator)`` starts a pass; ``IteratorGetNext`` takes
the next element (``OutOfRangeError`` at the end); ``OneShotIterator`` initialises itself
from its ``dataset_factory`` function the first time it runs;
``IteratorToStringHandle``/``IteratorFromStringHandle`` convert to and from the string a
feedable iterator is fed.

A dataset tensor has dtype ``string``: there is no ``variant`` dtype. Its run-time value is
the dataset object itself, in the process (never bytes), so dataset tensors are not fetched
or sent between processes; every dataset op is stateful (never folded, merged or cached away)
and has a CPU kernel only.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors
from tensorweave.framework.graph import apply_op, constant_value
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import shape_fns

# Datasets and iterators declare their elements with these two attrs.
_ELEMENT = ["output_types: list(type) >= 1", "output_shapes: list(shape) >= 1"]
_FN = ["Targuments: list(type) >= 0"]

DATASET_OPS = (
    "TensorDataset", "TensorSliceDataset", "RangeDataset", "TextLineDataset", "TFRecordDataset",
    "FixedLengthRecordDataset", "GeneratorDataset", "ZipDataset", "ConcatenateDataset", "MapDataset",
    "ParallelMapDataset", "FilterDataset", "FlatMapDataset", "InterleaveDataset", "BatchDatasetV2",
    "PaddedBatchDatasetV2", "ShuffleDataset", "RepeatDataset", "PrefetchDataset", "TakeDataset", "SkipDataset",
    "ShardDataset", "CacheDataset",
)


def _scalar_inputs(*names):
    """A shape function: the named inputs must be scalars; the output is a scalar handle."""
    def shape_fn(op):
        args = op.op_def.flat_inputs(op._attrs)
        for arg, t in zip(args, op.inputs):
            if arg.name in names and t.shape.ndims not in (None, 0):
                raise errors.InvalidArgumentError(f"{arg.name} must be a scalar, got '{t.name}' of shape {t.shape}")
        return [TensorShape([])]
    return shape_fn


def _vector_or_scalar(name, *scalars):
    base = _scalar_inputs(*scalars)

    def shape_fn(op):
        for arg, t in zip(op.op_def.flat_inputs(op._attrs), op.inputs):
            if arg.name == name and t.shape.ndims not in (None, 0, 1):
                raise errors.InvalidArgumentError(
                    f"{name} must be a string scalar or vector, got '{t.name}' of shape {t.shape}")
        return base(op)
    return shape_fn


def _slice_shape(op):
    n = None
    for i, t in enumerate(op.inputs):
        s = t.shape
        if s.ndims == 0:
            raise errors.InvalidArgumentError(f"component {i} ('{t.name}') is a scalar; slicing needs rank >= 1")
        if s.ndims:
            d = s.dims[0]
            if d is not None and n is not None and d != n:
                raise errors.InvalidArgumentError(
                    f"all components must have the same size in dimension 0: {n} and {d} ('{t.name}')")
            n = d if d is not None else n
    return [TensorShape([])]


def _get_next_shapes(op):
    return [as_shape(s) for s in op.get_attr("output_shapes")]


def register_ops(reg):
    def dataset(name, inputs, attrs=(), shape_fn=None, doc=""):
        reg.op(name, inputs=inputs, outputs=["handle: string"], attrs=list(attrs),
               shape_fn=shape_fn or shape_fns.scalar, stateful=True, doc=doc)

    # sources
    dataset("TensorDataset", ["components: Toutput_types"], ["Toutput_types: list(type) >= 1", "output_shapes: list(shape) >= 1"],
            doc="A dataset of one element: the components.")
    dataset("TensorSliceDataset", ["components: Toutput_types"],
            ["Toutput_types: list(type) >= 1", "output_shapes: list(shape) >= 1"], _slice_shape,
            doc="A dataset of the slices of the components along dimension 0.")
    dataset("RangeDataset", ["start: int64", "stop: int64", "step: int64"], _ELEMENT,
            _scalar_inputs("start", "stop", "step"), doc="The int64 values of range(start, stop, step).")
    for op, what in (("TextLineDataset", "The lines of text files, without their line ends."),
                     ("TFRecordDataset", "The records of TFRecord files.")):
        dataset(op, ["filenames: string", "compression_type: string", "buffer_size: int64"], (),
                _vector_or_scalar("filenames", "compression_type", "buffer_size"), doc=what)
    dataset("FixedLengthRecordDataset", ["filenames: string", "header_bytes: int64", "record_bytes: int64",
                                         "footer_bytes: int64", "buffer_size: int64"], (),
            _vector_or_scalar("filenames", "header_bytes", "record_bytes", "footer_bytes", "buffer_size"),
            doc="Fixed-length records of binary files (between a header and a footer).")
    dataset("GeneratorDataset", ["args: Targs"], ["generator: string", "Targs: list(type) >= 0"] + _ELEMENT,
            doc="Elements of a Python generator of this process, named by a token (Dataset.from_generator).")
    dataset("ZipDataset", ["input_datasets: N * string"], ["N: int >= 1"] + _ELEMENT,
            doc="Elements of its inputs side by side, as long as all have elements.")
    dataset("ConcatenateDataset", ["input_dataset: string", "another_dataset: string"], _ELEMENT,
            doc="The elements of input_dataset, then those of another_dataset.")
    # transformations with functions
    dataset("MapDataset", ["input_dataset: string", "other_arguments: Targuments"], ["f: func"] + _FN + _ELEMENT,
            doc="f(element, *other_arguments) for each element.")
    dataset("ParallelMapDataset", ["input_dataset: string", "other_arguments: Targuments",
                                   "num_parallel_calls: int32"], ["f: func"] + _FN + _ELEMENT,
            _scalar_inputs("num_parallel_calls"),
            doc="MapDataset with up to num_parallel_calls calls at once on the inter-op pool, in order.")
    dataset("FilterDataset", ["input_dataset: string", "other_arguments: Targuments"],
            ["predicate: func"] + _FN + _ELEMENT, doc="The elements for which predicate returns true.")
    dataset("FlatMapDataset", ["input_dataset: string", "other_arguments: Targuments"], ["f: func"] + _FN + _ELEMENT,
            doc="The elements of the datasets f returns, one dataset after another.")
    dataset("InterleaveDataset", ["input_dataset: string", "other_arguments: Targuments", "cycle_length: int64",
                                  "block_length: int64"], ["f: func"] + _FN + _ELEMENT,
            _scalar_inputs("cycle_length", "block_length"),
            doc="The elements of the datasets f returns, cycle_length at a time, block_length from each in turn.")
    # transformations
    dataset("BatchDatasetV2", ["input_dataset: string", "batch_size: int64", "drop_remainder: bool"], _ELEMENT,
            _scalar_inputs("batch_size", "drop_remainder"),
            doc="Consecutive elements stacked along a new dimension 0.")
    # One list input for the padded shapes and the padding values (N int64 vectors, then N
    # scalars): a GraphDef node's flat inputs regroup into at most one list argument.
    dataset("PaddedBatchDatasetV2", ["input_dataset: string", "batch_size: int64",
                                     "padded_shapes_and_values: Tpadding", "drop_remainder: bool"],
            ["Tpadding: list(type) >= 2"] + _ELEMENT, _scalar_inputs("batch_size", "drop_remainder"),
            doc="Batches whose components are padded to padded_shapes (-1: the longest in the batch) with the "
                "padding values; padded_shapes_and_values holds one int64 shape vector per component, then one "
                "scalar padding value per component.")
    dataset("ShuffleDataset", ["input_dataset: string", "buffer_size: int64", "seed: int64", "seed2: int64"],
            ["reshuffle_each_iteration: bool = true"] + _ELEMENT, _scalar_inputs("buffer_size", "seed", "seed2"),
            doc="Elements in a random order, drawn from a buffer of buffer_size.")
    for op, what in (("RepeatDataset", "The input count times (-1: forever)."),
                     ("TakeDataset", "At most the first count elements (-1: all)."),
                     ("SkipDataset", "All but the first count elements (-1: none).")):
        dataset(op, ["input_dataset: string", "count: int64"], _ELEMENT, _scalar_inputs("count"), doc=what)
    dataset("ShardDataset", ["input_dataset: string", "num_shards: int64", "index: int64"], _ELEMENT,
            _scalar_inputs("num_shards", "index"), doc="Every num_shards-th element, from element index on.")
    dataset("PrefetchDataset", ["input_dataset: string", "buffer_size: int64"], _ELEMENT,
            _scalar_inputs("buffer_size"),
            doc="The input, produced ahead by a background thread into a buffer of buffer_size elements.")
    dataset("CacheDataset", ["input_dataset: string", "filename: string"], _ELEMENT, _scalar_inputs("filename"),
            doc="The input, cached in memory (filename '') or in a file after the first complete pass.")

    # iterators
    _res = ["container: string = ''", "shared_name: string = ''"]
    reg.op("Iterator", outputs=["handle: string"], attrs=_res + _ELEMENT, shape_fn=shape_fns.scalar, stateful=True,
           doc="An iterator resource; outputs its handle. MakeIterator starts it on a dataset.")
    reg.op("OneShotIterator", outputs=["handle: string"], attrs=["dataset_factory: func"] + _res + _ELEMENT,
           shape_fn=shape_fns.scalar, stateful=True,
           doc="An iterator that starts itself, the first time it runs, on the dataset dataset_factory makes.")
    reg.op("MakeIterator", inputs=["dataset: string", "iterator: string"], stateful=True,
           shape_fn=_scalar_inputs("iterator"),
           doc="Starts (or restarts) the iterator on the dataset.")
    reg.op("IteratorGetNext", inputs=["iterator: string"], outputs=["components: output_types"],
           attrs=_ELEMENT, shape_fn=_get_next_shapes, stateful=True,
           doc="The next element of the iterator; OutOfRangeError at the end of the dataset.")
    reg.op("IteratorToStringHandle", inputs=["resource_handle: string"], outputs=["string_handle: string"],
           shape_fn=shape_fns.scalar, stateful=True, doc="The string that names the iterator (for feeding).")
    reg.op("IteratorFromStringHandle", inputs=["string_handle: string"], outputs=["resource_handle: string"],
           attrs=["output_types: list(type) >= 0 = []", "output_shapes: list(shape) >= 0 = []"],
           shape_fn=_scalar_inputs("string_handle"), stateful=True,
           doc="The iterator a string handle names; checked to produce output_types when given.")


# ----------------------------------------------------------------------------------------
# graph-side wrappers (flat: lists of tensors and dtypes; structures are tensorweave.data's)
def _element_attrs(output_types, output_shapes) -> dict:
    return {"output_types": [dtypes_mod.as_dtype(d) for d in output_types],
            "output_shapes": [as_shape(s) for s in output_shapes]}


def dataset_op(op_type: str, inputs, output_types, output_shapes, attrs=None, name=None, exact_name=False):
    """Add dataset op ``op_type`` (one of ``DATASET_OPS``) and return its dataset tensor.
    ``inputs`` has one entry per input argument (a list for list arguments); with
    ``exact_name``, ``name`` was already made unique (its function was traced under it)."""
    if op_type in ("TensorDataset", "TensorSliceDataset"):
        a = {"Toutput_types": [dtypes_mod.as_dtype(d) for d in output_types],
             "output_shapes": [as_shape(s) for s in output_shapes]}
    elif op_type in ("TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset"):
        a = {}
    else:
        a = _element_attrs(output_types, output_shapes)
    a.update(attrs or {})
    if exact_name:
        return apply_op(op_type, inputs, a, _exact_name=name)
    return apply_op(op_type, inputs, a, name=name or op_type)


def iterator(output_types, output_shapes, shared_name="", container="", name=None):
    return apply_op("Iterator", [], dict(_element_attrs(output_types, output_shapes), shared_name=shared_name or "",
                                         container=container or ""), name=name or "Iterator")


def one_shot_iterator(dataset_factory: str, output_types, output_shapes, shared_name="", container="", name=None):
    return apply_op("OneShotIterator", [], dict(_element_attrs(output_types, output_shapes),
                                                dataset_factory=dataset_factory, shared_name=shared_name or "",
                                                container=container or ""), name=name or "OneShotIterator")


def make_iterator(dataset, iterator_handle, name=None):
    return apply_op("MakeIterator", [dataset, iterator_handle], name=name or "MakeIterator")


def iterator_get_next(iterator_handle, output_types, output_shapes, name=None) -> list:
    out = apply_op("IteratorGetNext", [iterator_handle], _element_attrs(output_types, output_shapes),
                   name=name or "IteratorGetNext")
    return list(out) if isinstance(out, tuple) else [out]


def iterator_to_string_handle(iterator_handle, name=None):
    return apply_op("IteratorToStringHandle", [iterator_handle], name=name or "IteratorToStringHandle")


def iterator_from_string_handle(string_handle, output_types=(), output_shapes=(), name=None):
    return apply_op("IteratorFromStringHandle", [string_handle], _element_attrs(output_types, output_shapes),
                    name=name or "IteratorFromStringHandle")


def static_int(t):
    """The value of a scalar int tensor when it is known while building, else None."""
    v = constant_value(t)
    if v is None:
        return None
    v = np.asarray(v)
    return int(v) if v.ndim == 0 and v.dtype.kind in "iu" else None
