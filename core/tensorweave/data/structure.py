"""Nested element structures of ``tw.data``, with TensorFlow's rules for datasets: tuples
(namedtuples too) and dicts are structures, dict items in sorted key order; anything else —
a list included — is one component (a list of numbers is a tensor, as in ``tf.data``).
"""

from __future__ import annotations

from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor


class StructureTypeError(errors.InvalidArgumentError, TypeError):
    """Element types or structures that do not fit together (TF raises TypeError there)."""


def is_structure(x) -> bool:
    return isinstance(x, tuple | dict)


def flatten(s) -> list:
    if isinstance(s, dict):
        return [leaf for k in sorted(s) for leaf in flatten(s[k])]
    if isinstance(s, tuple):
        return [leaf for v in s for leaf in flatten(v)]
    return [s]


def pack_as(structure, flat):
    """``flat`` (a sequence of leaves) in the shape of ``structure``."""
    flat = list(flat)
    pos = 0

    def pack(s):
        nonlocal pos
        if isinstance(s, dict):
            items = {k: pack(s[k]) for k in sorted(s)}
            return items if type(s) is dict else type(s)(items)
        if isinstance(s, tuple):
            vals = [pack(v) for v in s]
            return type(s)(*vals) if hasattr(s, "_fields") else tuple(vals)
        v = flat[pos]
        pos += 1
        return v

    out = pack(structure)
    if pos != len(flat):
        raise errors.InternalError(f"structure {describe(structure)} has {pos} components, got {len(flat)}")
    return out


def map_structure(fn, *structures):
    """``fn`` applied leaf by leaf to structures of the same shape."""
    first = structures[0]
    for s in structures[1:]:
        assert_same(first, s)
    flats = [flatten(s) for s in structures]
    return pack_as(first, [fn(*leaves) for leaves in zip(*flats)])


def same(a, b) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b) and \
            all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and \
            all(same(x, y) for x, y in zip(a, b))
    return True


def assert_same(a, b, what: str = "the two structures") -> None:
    if not same(a, b):
        raise StructureTypeError(
            f"{what} do not have the same nested structure: {describe(a)} and {describe(b)}")


def describe(s) -> str:
    """A short picture of a structure: ``(int64, {'a': float32})``."""
    if isinstance(s, dict):
        return "{" + ", ".join(f"{k!r}: {describe(s[k])}" for k in sorted(s)) + "}"
    if isinstance(s, tuple):
        return "(" + ", ".join(describe(v) for v in s) + ("," if len(s) == 1 else "") + ")"
    name = getattr(s, "name", None)
    if isinstance(name, str) and hasattr(s, "as_numpy_dtype"):
        return name
    if hasattr(s, "dims") and hasattr(s, "ndims"):
        return str(s)
    return type(s).__name__


class ElementStructure:
    """TF1's ``output_types``, ``output_shapes`` and ``output_classes`` of a Dataset or an
    Iterator, from its ``_types`` and ``_shapes`` (nested like its elements; every component
is a Tensor: there are no sparse ones yet)."""

    @property
    def output_types(self):
        return self._types

    @property
    def output_shapes(self):
        return self._shapes

    @property
    def output_classes(self):
        return map_structure(lambda _: Tensor, self._types)
