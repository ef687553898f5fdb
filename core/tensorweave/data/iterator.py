"""``tw.data.Iterator`` (TF 1.4+): the graph side of an iterator resource.

Kinds, as in TF1: one-shot (``Dataset.make_one_shot_iterator``: starts itself), initializable
(``make_initializable_iterator``: ``initializer`` restarts it, with fresh values of the
placeholders the dataset uses), reinitializable (``Iterator.from_structure`` plus
``make_initializer(dataset)`` for any dataset of that structure), and feedable
(``Iterator.from_string_handle``: which iterator runs is chosen per step by feeding the
string from another iterator's ``string_handle()``). ``get_next()`` returns the element
structure of tensors; running it past the end raises ``tw.errors.OutOfRangeError`` (and
keeps raising it) until the iterator is initialised again.
"""

from __future__ import annotations

from tensorweave.data import structure as nest
from tensorweave.data.structure import StructureTypeError
from tensorweave.framework import dtypes as dtypes_mod
from tensorweave.framework import errors, function
from tensorweave.framework.graph import Tensor, convert_to_tensor, get_default_graph
from tensorweave.framework.tensor_shape import TensorShape, as_shape
from tensorweave.ops import dataset_ops

__all__ = ["Iterator", "make_one_shot_iterator", "make_initializable_iterator", "get_output_types",
           "get_output_shapes", "get_output_classes"]


def _types_and_shapes(output_types, output_shapes):
    types = nest.map_structure(dtypes_mod.as_dtype, output_types)
    if output_shapes is None:
        shapes = nest.map_structure(lambda _: TensorShape(None), types)
    else:
        try:
            nest.assert_same(types, output_shapes, "output_types and output_shapes")
        except errors.InvalidArgumentError as e:
            raise StructureTypeError(e.message) from None
        shapes = nest.map_structure(as_shape, output_shapes)
    return types, shapes


class Iterator(nest.ElementStructure):
    """An iterator over the elements of a dataset (``tf.data.Iterator``)."""

    def __init__(self, iterator_resource: Tensor, initializer, output_types, output_shapes, output_classes=None):
        self._resource = iterator_resource
        self._initializer = initializer
        self._types = output_types
        self._shapes = output_shapes

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None, output_classes=None):
        """An iterator not bound to a dataset: ``make_initializer(dataset)`` gives the op that
        starts it on any dataset with this structure (and compatible shapes)."""
        types, shapes = _types_and_shapes(output_types, output_shapes)
        res = dataset_ops.iterator(nest.flatten(types), nest.flatten(shapes), shared_name=shared_name or "",
                                   container=get_default_graph()._current_container())
        return Iterator(res, None, types, shapes)

    @staticmethod
    def from_string_handle(string_handle, output_types, output_shapes=None, output_classes=None):
        """An iterator chosen when the step runs: feed ``string_handle`` (a string scalar
        placeholder) with the value of another iterator's ``string_handle()``."""
        types, shapes = _types_and_shapes(output_types, output_shapes)
        h = convert_to_tensor(string_handle, dtype=dtypes_mod.string)
        res = dataset_ops.iterator_from_string_handle(h, nest.flatten(types), nest.flatten(shapes))
        return Iterator(res, None, types, shapes)

    @staticmethod
    def _one_shot(dataset):
        g = get_default_graph()
        name = g.unique_name("OneShotIterator", mark_as_used=False)  # the name the op will get
        what = f"the dataset of one-shot iterator '{name}'"
        definition = function.from_subgraph([dataset._variant], f"{name}/dataset_factory", what)
        res = dataset_ops.one_shot_iterator(definition, dataset._flat_types, dataset._flat_shapes,
                                            container=g._current_container())
        return Iterator(res, None, dataset._types, dataset._shapes)


    @property
    def initializer(self):
        """The op that (re)starts an iterator made by ``make_initializable_iterator``."""
        if self._initializer is None:
            raise errors.InvalidArgumentError(
                "this iterator has no initializer: one-shot iterators start themselves, and iterators made "
                "with Iterator.from_structure are started by the op make_initializer(dataset) returns")
        return self._initializer

    # -- ops ------------------------------------------------------------------------------------
    def make_initializer(self, dataset, name=None):
        """The op that starts this iterator on ``dataset`` (same structure and types; its
        shapes compatible with the iterator's)."""
        if not hasattr(dataset, "_as_variant_tensor"):
            raise StructureTypeError(f"make_initializer takes a Dataset, got {type(dataset).__name__}")
        if not nest.same(self._types, dataset._types):
            raise StructureTypeError(
                f"make_initializer: the iterator's elements have the structure {nest.describe(self._types)}, the "
                f"dataset's {nest.describe(dataset._types)}")
        mine, theirs = nest.flatten(self._types), dataset._flat_types
        if mine != theirs:
            raise StructureTypeError(
                f"make_initializer: expected output types {nest.describe(self._types)} but got a dataset with "
                f"output types {nest.describe(dataset._types)}")
        for a, b in zip(nest.flatten(self._shapes), dataset._flat_shapes):
            if not a.is_compatible_with(b):
                raise StructureTypeError(
                    f"make_initializer: expected output shapes compatible with {nest.describe(self._shapes)} but got "
                    f"a dataset with output shapes {nest.describe(dataset._shapes)}")
        return dataset_ops.make_iterator(dataset._variant, self._resource, name=name)

    def get_next(self, name=None):
        """The next element, as tensors in the element structure; running them past the end
        raises ``tw.errors.OutOfRangeError``."""
        flat = dataset_ops.iterator_get_next(self._resource, nest.flatten(self._types), nest.flatten(self._shapes),
                                             name=name)
        return nest.pack_as(self._types, flat)

    def string_handle(self, name=None):
        """A string scalar naming this iterator, to feed to ``Iterator.from_string_handle``."""
        return dataset_ops.iterator_to_string_handle(self._resource, name=name)

    def __repr__(self):
        return f"<tw.data.Iterator '{self._resource.op.name}' types={nest.describe(self._types)}>"


# TF 1.13+'s function forms (``tf.compat.v1.data.make_one_shot_iterator(dataset)``, ...).
def make_one_shot_iterator(dataset) -> Iterator:
    return dataset.make_one_shot_iterator()


def make_initializable_iterator(dataset, shared_name=None) -> Iterator:
    return dataset.make_initializable_iterator(shared_name)


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes


def get_output_classes(dataset_or_iterator):
    return dataset_or_iterator.output_classes
