"""Initialisers: what a `Weight` stores instead of a live array.

An initialiser is an immutable description (a shape and a distribution);
`Network` turns it into an array with a `jax.random` key derived from the
parameter's name, so initial values do not depend on construction order.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import jax
import jax.numpy as jnp


def _shape(value: Any) -> tuple[int, ...]:
    if isinstance(value, int):
        value = (value,)
    shape = tuple(int(d) for d in value)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


@attrs.frozen
class Initializer:
    """Base class: `init(key, dtype)` returns the initial array."""

    shape: tuple[int, ...] = attrs.field(converter=_shape)

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        raise NotImplementedError


@attrs.frozen
class Zeros(Initializer):
    """All zeros."""

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jnp.zeros(self.shape, dtype)


@attrs.frozen
class Normal(Initializer):
    """Independent normal values, `mean + stddev * N(0, 1)`."""

    stddev: float = 1.0
    mean: float = 0.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return self.mean + self.stddev * jax.random.normal(key, self.shape, dtype)


@attrs.frozen
class Uniform(Initializer):
    """Independent values uniform on `[low, high)`."""

    low: float = -1.0
    high: float = 1.0

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        return jax.random.uniform(key, self.shape, dtype, self.low, self.high)


@attrs.frozen
class Glorot(Initializer):
    """Glorot/Xavier uniform for a `(fan_in, fan_out)` matrix."""

    def init(self, key: jax.Array, dtype: Any) -> jax.Array:
        if len(self.shape) != 2:
            raise ValueError(f"Glorot needs a 2-d shape, got {self.shape}")
        limit = math.sqrt(6.0 / (self.shape[0] + self.shape[1]))
        return jax.random.uniform(key, self.shape, dtype, -limit, limit)
