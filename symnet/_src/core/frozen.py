"""Hashable, immutable arrays, so literals and initial values can live inside layer trees."""

from __future__ import annotations

import hashlib
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.errors import LayerTypeError, at
from .source import user_line

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = ["constant_array", "FrozenArray", "literal_value"]


class FrozenArray:
    """A read-only numpy array with structural `==` and `hash`.

    Layer trees are hashable values (they key caches and are static arguments
    of `jax.jit`), so any array they hold is frozen into one of these.
    """

    __slots__ = ("array", "_hash")

    def __init__(self, value: Any):
        array = np.array(value)  # always a private copy
        if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise TypeError(f"not a numeric array: dtype {array.dtype}")
        array.setflags(write=False)
        self.array = array
        digest = hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()
        self._hash = hash((array.shape, array.dtype.str, digest))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FrozenArray):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.array.shape == other.array.shape
            and self.array.dtype == other.array.dtype
            and bool(np.array_equal(self.array, other.array))
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        body = np.array2string(self.array, separator=", ", threshold=8, precision=4)
        return f"array({body})"


def constant_array(value: float | FrozenArray) -> jax.Array:
    """A stored constant as a JAX array of the default float type (float64 under x64)."""
    dtype = jnp.result_type(float)
    if isinstance(value, FrozenArray):
        return jnp.asarray(value.array, dtype=dtype)
    return jnp.asarray(value, dtype=dtype)


def literal_value(value: Any) -> float | FrozenArray:
    """A Literal's value as the tree stores it: a float, or a FrozenArray of an array."""
    if isinstance(value, FrozenArray):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.ndarray)):
        return float(value)
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        try:
            return FrozenArray(np.asarray(value))
        except TypeError as e:
            raise LayerTypeError(f"cannot make a Literal of {value!r}: {e}{at(user_line())}") from None
    raise LayerTypeError(f"cannot make a Literal of {value!r} (a {type(value).__name__}){at(user_line())}")
