"""Broadcasting for the arithmetic layers: the shape check of the forward and its transpose for the backward."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..base.errors import ShapeError, at

if TYPE_CHECKING:
    import jax

    from .layer import Layer
else:
    from .lazyjax import jax

__all__ = ["check_broadcast", "unbroadcast"]


def unbroadcast(delta: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Sum `delta` down to `shape`: the transpose of broadcasting to delta's shape."""
    if delta.shape == tuple(shape):
        return delta
    extra = delta.ndim - len(shape)
    delta = delta.sum(axis=tuple(range(extra))) if extra > 0 else delta
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and delta.shape[i] != 1)
    if axes:
        delta = delta.sum(axis=axes, keepdims=True)
    return delta.reshape(shape)


def check_broadcast(layer: Layer, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """ShapeError naming `layer` unless operand shapes `a` and `b` broadcast (numpy's rules)."""
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        raise ShapeError(
            f"{type(layer).__name__}: operand shapes {a} and {b} do not broadcast{at(layer.where)}"
        ) from None
