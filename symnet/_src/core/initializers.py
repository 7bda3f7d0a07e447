"""Initialisers: what a `Weight` stores instead of a live array.

An initialiser is an immutable description (a shape and a distribution);
`Network` turns it into an array with a `jax.random` key derived from the
parameter's name, so initial values do not depend on construction order.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..base.errors import ShapeError, at
from .registry import INITIALIZER_CLASSES
from .source import user_line

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = ["Full", "Glorot", "Initializer", "Normal", "Uniform", "Zeros"]

_BLOCK = 1 << 16


#: The smallest block drawn: a parameter's last block is the power of two that holds the rest, from this up.
_SMALLEST = 1 << 8


@functools.cache
def _block(kind: str) -> Callable[[jax.Array, int], jax.Array]:
    """The jitted draw of `size` float32 values from `jax.random.<kind>`, made on first use."""
    draw = getattr(jax.random, kind)
    return jax.jit(lambda key, size: draw(key, (size,), jnp.float32), static_argnums=1)


@functools.cache
def _fold_in() -> Callable[[jax.Array, int], jax.Array]:
    return jax.jit(jax.random.fold_in)


def _draw(kind: str, key: jax.Array, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values of any shape (`jax.random.<kind>`) from blocks of `_BLOCK` values keyed `fold_in(key, i)`.

    Drawing in blocks of a few sizes compiles the random generator a few times
    per process instead of once per parameter shape (seconds each on a CPU).
    The last block is the smallest power of two (from 256) that holds the rest:
    JAX's partitionable threefry gives the first values of any block size
    alike, so the values are those of whole blocks, for a fraction of the work.
    """
    size = math.prod(shape)
    count = max(1, -(-size // _BLOCK))
    rest = size - (count - 1) * _BLOCK
    last = min(_BLOCK, max(_SMALLEST, 1 << max(rest - 1, 0).bit_length()))
    block, fold_in = _block(kind), _fold_in()
    parts = [np.asarray(block(fold_in(key, i), _BLOCK if i < count - 1 else last)) for i in range(count)]
    flat = np.concatenate(parts)
    return flat[:size].reshape(shape).astype(dtype)  # numpy: no compile per shape


def _shape(value: Any) -> tuple[int, ...]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
        raise ShapeError(f"a shape must be a tuple of integers, got {value!r}{at(user_line())}")
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative dimension in shape {shape}{at(user_line())}")
    return shape


@attrs.frozen
class Initializer:
    """Base class: `init(key, dtype)` returns the initial array.

    Subclasses (attrs frozen classes, like the ones below) are registered by
    their stable name (`symnet._src.core.registry`), so `symnet.save` can write a
    Weight's initialiser and `symnet.load` build it again.
    """

    shape: tuple[int, ...] = attrs.field(converter=_shape)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        INITIALIZER_CLASSES.register(cls)  # attrs' slotted class, made after the draft, replaces it

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        raise NotImplementedError


@attrs.frozen
class Zeros(Initializer):
    """All zeros."""

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.zeros(self.shape, dtype)


@attrs.frozen
class Full(Initializer):
    """Every element equal to `value` (`jnp.full`; Kaldi's `Set(value)`)."""

    value: float = 0.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.full(self.shape, self.value, dtype)


@attrs.frozen
class Normal(Initializer):
    """Independent normal values, `mean + stddev * N(0, 1)`."""

    stddev: float = 1.0
    mean: float = 0.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.asarray(self.mean + self.stddev * _draw("normal", key, self.shape, dtype), dtype)


@attrs.frozen
class Uniform(Initializer):
    """Independent values uniform on `[low, high)`."""

    low: float = -1.0
    high: float = 1.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.asarray(self.low + (self.high - self.low) * _draw("uniform", key, self.shape, dtype), dtype)


@attrs.frozen
class Glorot(Initializer):
    """Glorot/Xavier uniform for a `(fan_in, fan_out)` matrix."""

    def __attrs_post_init__(self) -> None:
        if len(self.shape) != 2:
            raise ShapeError(f"Glorot needs a 2-d (fan_in, fan_out) shape, got {self.shape}{at(user_line())}")

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        limit = math.sqrt(6.0 / (self.shape[0] + self.shape[1]))
        return jnp.asarray(limit * (2.0 * _draw("uniform", key, self.shape, dtype) - 1.0), dtype)
