"""Static shapes: ``TensorShape`` with possibly unknown rank or dimensions.

Dimensions are plain ints or ``None`` (unknown). Shapes are inferred at graph construction
and checked against fed values at run time.
"""

from __future__ import annotations

from tensorweave.framework import errors


class TensorShape:
    __slots__ = ("_dims",)

    def __init__(self, dims=None):
        if dims is None:
            self._dims = None
        elif isinstance(dims, TensorShape):
            self._dims = dims._dims
        else:
            try:
                it = list(dims)
            except TypeError:
                it = [dims]
            out = []
            for d in it:
                if d is None or (hasattr(d, "value") and d.value is None):
                    out.append(None)
                    continue
                try:
                    d = int(d)
                except (TypeError, ValueError):
                    raise errors.InvalidArgumentError(f"invalid dimension {d!r} in shape {dims!r}") from None
                if d < 0:
                    if d == -1:
                        out.append(None)
                        continue
                    raise errors.InvalidArgumentError(f"negative dimension {d} in shape {dims!r}")
                out.append(d)
            self._dims = tuple(out)

    @property
    def dims(self):
        return None if self._dims is None else list(self._dims)

    @property
    def ndims(self):
        return None if self._dims is None else len(self._dims)

    rank = ndims

    def as_list(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("as_list() is not defined on an unknown TensorShape")
        return list(self._dims)

    def as_tuple(self):
        return self._dims

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d
        return n

    def is_compatible_with(self, other) -> bool:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def merge_with(self, other) -> TensorShape:
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise errors.InvalidArgumentError(f"shapes {self} and {other} are not compatible")
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def with_rank(self, rank: int) -> TensorShape:
        if self._dims is None:
            return TensorShape([None] * rank)
        if len(self._dims) != rank:
            raise errors.InvalidArgumentError(f"shape {self} must have rank {rank}")
        return self

    def with_rank_at_least(self, rank: int) -> TensorShape:
        if self._dims is not None and len(self._dims) < rank:
            raise errors.InvalidArgumentError(f"shape {self} must have rank at least {rank}")
        return self

    def concatenate(self, other) -> TensorShape:
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def __len__(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("cannot take the length of a shape with unknown rank")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise errors.InvalidArgumentError("cannot iterate over a shape with unknown rank")
        return iter(self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            if isinstance(key, slice):
                return TensorShape(None)
            return None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except errors.InvalidArgumentError:
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self):
        return hash(self._dims)

    def __repr__(self):
        return f"TensorShape({self.dims!r})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        return "(" + ", ".join("?" if d is None else str(d) for d in self._dims) + ("," if len(self._dims) == 1 else "") + ")"

    def __reduce__(self):
        return (TensorShape, (self.dims,))


def as_shape(shape) -> TensorShape:
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(ndims=None) -> TensorShape:
    return TensorShape(None if ndims is None else [None] * ndims)


def scalar() -> TensorShape:
    return TensorShape(())
