"""Initialisers: what a `Weight` stores instead of a live array.

An initialiser is an immutable description (a shape and a distribution);
`Network` turns it into an array with a `jax.random` key derived from the
parameter's name, so initial values do not depend on construction order.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError, at
from .registry import INITIALIZER_CLASSES
from .source import user_line

__all__ = ["Full", "Glorot", "Initializer", "Normal", "Uniform", "Zeros"]

_BLOCK = 1 << 16


#: The smallest block drawn: a parameter's last block is the power of two that holds the rest, from this up.
_SMALLEST = 1 << 8


@functools.partial(jax.jit, static_argnums=1)
def _normal_block(key: jax.Array, size: int) -> jax.Array:
    return jax.random.normal(key, (size,), jnp.float32)


@functools.partial(jax.jit, static_argnums=1)
def _uniform_block(key: jax.Array, size: int) -> jax.Array:
    return jax.random.uniform(key, (size,), jnp.float32)


def _draw(block: Any, key: jax.Array, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values of any shape from blocks of `_BLOCK` values keyed `fold_in(key, i)`.

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
    parts = [np.asarray(block(_fold_in(key, i), _BLOCK if i < count - 1 else last)) for i in range(count)]
    flat = np.concatenate(parts)
    return flat[:size].reshape(shape).astype(dtype)  # numpy: no compile per shape


_fold_in = jax.jit(jax.random.fold_in)


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
        return jnp.asarray(self.mean + self.stddev * _draw(_normal_block, key, self.shape, dtype), dtype)


@attrs.frozen
class Uniform(Initializer):
    """Independent values uniform on `[low, high)`."""

    low: float = -1.0
    high: float = 1.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.asarray(self.low + (self.high - self.low) * _draw(_uniform_block, key, self.shape, dtype), dtype)


@attrs.frozen
class Glorot(Initializer):
    """Glorot/Xavier uniform for a `(fan_in, fan_out)` matrix."""

    def __attrs_post_init__(self) -> None:
        if len(self.shape) != 2:
            raise ShapeError(f"Glorot needs a 2-d (fan_in, fan_out) shape, got {self.shape}{at(user_line())}")

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        limit = math.sqrt(6.0 / (self.shape[0] + self.shape[1]))
        return jnp.asarray(limit * (2.0 * _draw(_uniform_block, key, self.shape, dtype) - 1.0), dtype)
