"""Element types of tensors (``tw.float32``, ``tw.int64``, ...) and conversion to NumPy.

A ``DType`` is an interned object: ``as_dtype`` maps names, NumPy dtypes and Python types to
the one instance, so dtypes compare with ``is``/``==`` cheaply. Strings are byte strings held
in NumPy object arrays, as in TensorFlow.
"""

from __future__ import annotations

import numpy as np

from tensorweave.framework import errors


class DType:
    __slots__ = ("name", "np_dtype", "_kind", "size")

    def __init__(self, name: str, np_dtype, kind: str):
        self.name = name
        self.np_dtype = np.dtype(np_dtype)
        self._kind = kind  # 'f' float, 'i' signed, 'u' unsigned, 'c' complex, 'b' bool, 's' string
        self.size = 0 if kind == "s" else self.np_dtype.itemsize

    @property
    def as_numpy_dtype(self):
        return self.np_dtype.type if self._kind != "s" else object

    @property
    def is_floating(self) -> bool:
        return self._kind == "f"

    @property
    def is_integer(self) -> bool:
        return self._kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self._kind == "u"

    @property
    def is_complex(self) -> bool:
        return self._kind == "c"

    @property
    def is_bool(self) -> bool:
        return self._kind == "b"

    @property
    def is_string(self) -> bool:
        return self._kind == "s"

    @property
    def is_numeric(self) -> bool:
        return self._kind in "fiuc"

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def real_dtype(self) -> DType:
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    @property
    def min(self):
        return np.finfo(self.np_dtype).min if self.is_floating else np.iinfo(self.np_dtype).min

    @property
    def max(self):
        return np.finfo(self.np_dtype).max if self.is_floating else np.iinfo(self.np_dtype).max

    def is_compatible_with(self, other) -> bool:
        return self is as_dtype(other)

    def __repr__(self) -> str:
        return f"tw.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))


float16 = half = DType("float16", np.float16, "f")
float32 = DType("float32", np.float32, "f")
float64 = double = DType("float64", np.float64, "f")
int8 = DType("int8", np.int8, "i")
int16 = DType("int16", np.int16, "i")
int32 = DType("int32", np.int32, "i")
int64 = DType("int64", np.int64, "i")
uint8 = DType("uint8", np.uint8, "u")
uint16 = DType("uint16", np.uint16, "u")
uint32 = DType("uint32", np.uint32, "u")
uint64 = DType("uint64", np.uint64, "u")
complex64 = DType("complex64", np.complex64, "c")
complex128 = DType("complex128", np.complex128, "c")
bool_ = DType("bool", np.bool_, "b")
string = DType("string", object, "s")

ALL_DTYPES = (
    float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    complex64, complex128, bool_, string,
)
FLOATING = frozenset({float16, float32, float64})
INTEGER = frozenset({int8, int16, int32, int64, uint8, uint16, uint32, uint64})
COMPLEX = frozenset({complex64, complex128})
REAL_NUMBER = FLOATING | INTEGER
NUMBER = REAL_NUMBER | COMPLEX

_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "bool_": bool_})
_BY_NP = {d.np_dtype: d for d in ALL_DTYPES if not d.is_string}
_BY_PY = {float: float32, int: int32, bool: bool_, complex: complex128, str: string, bytes: string}


def as_dtype(value) -> DType:
    """Convert a DType, name ('float32'), NumPy dtype/type or Python type to a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        try:
            return _BY_NAME[value]
        except KeyError:
            raise errors.InvalidArgumentError(
                f"unknown dtype {value!r}; expected one of {sorted(d.name for d in ALL_DTYPES)}"
            ) from None
    if value in _BY_PY:
        return _BY_PY[value]
    try:
        npd = np.dtype(value)
    except TypeError:
        raise errors.InvalidArgumentError(f"cannot interpret {value!r} as a tensorweave dtype") from None
    if npd.kind in "OSU":
        return string
    try:
        return _BY_NP[npd]
    except KeyError:
        raise errors.InvalidArgumentError(f"NumPy dtype {npd} has no tensorweave equivalent") from None


def dtype_of_value(value) -> DType:
    """The dtype a Python or NumPy value converts to by default (Python float -> float32,
    Python int -> int32, as in TensorFlow; NumPy arrays keep their dtype)."""
    if isinstance(value, np.ndarray | np.generic):
        return as_dtype(value.dtype)
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int32 if -(2**31) <= value < 2**31 else int64
    if isinstance(value, float):
        return float32
    if isinstance(value, complex):
        return complex128
    if isinstance(value, str | bytes):
        return string
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        return float32
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8 and arr.size and -(2**31) <= arr.min() and arr.max() < 2**31:
        return int32
    return as_dtype(arr.dtype)


def to_numpy(value, dtype: DType) -> np.ndarray:
    """Convert a Python/NumPy value to an ndarray of exactly ``dtype``."""
    if dtype.is_string:
        arr = np.asarray(value, dtype=object)
        if arr.ndim == 0:
            v = arr.item()
            return np.array(v.encode() if isinstance(v, str) else v, dtype=object)
        out = np.empty(arr.shape, dtype=object)
        for idx, v in np.ndenumerate(arr):
            out[idx] = v.encode() if isinstance(v, str) else v
        return out
    return np.asarray(value, dtype=dtype.np_dtype)
