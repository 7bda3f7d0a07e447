"""The values of a Kaldi model file's tokens: normalised on construction, compared exactly.

A field value is normalised to what the file holds (`scalar_value`,
`array_value`): Python floats become float32 (float64 for double tokens),
lists become read-only arrays, so a value built in Python compares equal to
the same value read back from a file. `value_key` is a hashable key that
compares values exactly (dtype, shape and bits); `ByValue` gives a class
equality and hashing by its `key()`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...base.errors import ModelFormatError
from ...kaldi_io.numbers import INT32_MAX, INT32_MIN
from .token_kinds import BOOL, DMATRIX, DOUBLE, DVECTOR, FLAG, FLOAT, INT, INTS, MATRIX, PAIRS, VECTOR

__all__ = ["ByValue", "array_value", "frozen_array", "scalar_value", "value_key"]


def frozen_array(array: np.ndarray) -> np.ndarray:
    """`array` as a read-only C-contiguous array (a copy unless it is one already)."""
    if array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C", copy=True)
        array.setflags(write=False)
    return array


def _bad(where: str, message: str) -> ModelFormatError:
    return ModelFormatError(f"{where}: {message}")


def scalar_value(value: Any, kind: str | None, where: str) -> Any:
    """A scalar field value of `kind` (or of the kind its Python type says, for None) as the file holds
    it: int, numpy float32/float64, bool, a word, or None for a flag. ModelFormatError naming `where`."""
    if kind == FLAG:
        if value is not None:
            raise _bad(where, f"a flag token takes no value, got {value!r}")
        return None
    if kind == BOOL or (kind is None and isinstance(value, (bool, np.bool_))):
        if not isinstance(value, (bool, np.bool_)):
            raise _bad(where, f"expected a bool, got {value!r}")
        return bool(value)
    if kind == INT or (kind is None and isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise _bad(where, f"expected an int32, got {value!r}")
        if not INT32_MIN <= int(value) <= INT32_MAX:
            raise _bad(where, f"{value} does not fit in an int32")
        return int(value)
    if kind in (FLOAT, DOUBLE) or (kind is None and isinstance(value, (float, np.floating))):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise _bad(where, f"expected a number, got {value!r}")
        if isinstance(value, (np.float32, np.float64)):
            return value  # the precision the file (or the caller) has
        return np.float64(value) if kind == DOUBLE else np.float32(value)
    if kind is None and isinstance(value, str):
        if not value or any(c in " \t\n\v\f\r" for c in value):
            raise _bad(where, f"a word value must be non-empty and without whitespace, got {value!r}")
        return value
    if kind is None and value is None:
        return None
    raise _bad(where, f"expected a {kind or 'scalar'}, got {value!r}")


def array_value(value: Any, kind: str | None, where: str) -> np.ndarray:
    """An array field value of `kind` (or of the kind its dtype says, for None) as a read-only array:
    int32 vectors or (n, 2) pairs, float32 or float64 vectors and matrices. ModelFormatError naming `where`."""
    array = np.asarray(value)
    if kind in (INTS, PAIRS) or (kind is None and array.dtype.kind in "iu"):
        if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
            raise _bad(where, f"expected integers, got an array of {array.dtype}")
        if array.size and (array.min() < INT32_MIN or array.max() > INT32_MAX):
            raise _bad(where, "integers do not fit in int32")
        pairs = kind == PAIRS or (kind is None and array.ndim == 2)
        if pairs and not (array.ndim == 2 and array.shape[1] == 2) and not (array.size == 0):
            raise _bad(where, f"expected an (n, 2) array of integer pairs, got shape {array.shape}")
        if not pairs and array.ndim != 1:
            raise _bad(where, f"expected a 1-d integer vector, got shape {array.shape}")
        array = array.reshape((-1, 2)) if pairs else array
        return frozen_array(array.astype(np.int32, copy=False))
    if array.dtype.kind not in "fiub":
        raise _bad(where, f"expected numbers, got an array of {array.dtype}")
    ndim = {VECTOR: 1, MATRIX: 2, DVECTOR: 1, DMATRIX: 2}.get(kind or "", array.ndim)
    if array.ndim != ndim or ndim not in (1, 2):
        raise _bad(where, f"expected a {'vector' if ndim == 1 else 'matrix'}, got shape {array.shape}")
    # a float64 numpy array stays double (DV/DM); lists and other arrays become float32 but for double kinds
    explicit = isinstance(value, np.ndarray) and array.dtype in (np.float32, np.float64)
    double = array.dtype == np.float64 if explicit else kind in (DVECTOR, DMATRIX)
    dtype = np.float64 if double else np.float32
    return frozen_array(array.astype(dtype, copy=False))


def value_key(value: Any) -> Any:
    """A hashable key that compares values exactly (dtype, shape and bits for arrays and numpy scalars)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, tuple):
        return ("tuple",) + tuple(value_key(v) for v in value)
    if isinstance(value, ByValue):
        return value.key()
    return (type(value).__name__, value)


class ByValue:
    """Equality and hashing by `key()`."""

    def key(self) -> Any:
        """What equality compares: a hashable key of the value (see `value_key`)."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.key() == other.key()

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self.key())
