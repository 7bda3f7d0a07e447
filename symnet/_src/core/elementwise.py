"""Elementwise functions as layers: `Exp`, `Log`, `Tanh`, `Sigmoid`, `ReLU`, `Softmax`, `LogSoftmax`.

Each works on every element (softmaxes on each row, the last axis), so it is
row-wise: inside the Index engine it keeps its operand's row labels. The
derivatives are written out (`vjp`) and checked against `jax.grad`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.errors import ShapeError, at
from .layer import Layer, child, layer_class
from .precision import in_float32

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from .lazyjax import jax, jnp

__all__ = ["Elementwise", "Exp", "Log", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh"]


@layer_class
class Elementwise(Layer):
    """Base of functions applied to each element (or each row, for softmax)."""

    arg: Layer = child()


@layer_class
class Exp(Elementwise):
    """`exp(a)`."""

    def apply(self, a: jax.Array) -> jax.Array:
        return jnp.exp(a)

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d * value,)


@layer_class
class Log(Elementwise):
    """Natural logarithm `log(a)`."""

    def apply(self, a: jax.Array) -> jax.Array:
        return jnp.log(a)

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d / a,)


@layer_class
class Tanh(Elementwise):
    """`tanh(a)`."""

    def apply(self, a: jax.Array) -> jax.Array:
        return jnp.tanh(a)

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d * (1.0 - value * value),)


@layer_class
class Sigmoid(Elementwise):
    """The logistic function `1 / (1 + exp(-a))`."""

    def apply(self, a: jax.Array) -> jax.Array:
        return jax.nn.sigmoid(a)

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d * value * (1.0 - value),)


@layer_class
class ReLU(Elementwise):
    """`max(a, 0)`; the derivative at 0 is taken as 0 (as Kaldi and JAX do)."""

    def apply(self, a: jax.Array) -> jax.Array:
        return jax.nn.relu(a)  # NaN stays NaN (as in Kaldi), and the derivative at 0 is 0

    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (jnp.where(a > 0, d, jnp.zeros_like(d)),)


@layer_class
class Softmax(Elementwise):
    """Softmax over the last axis (each row of a matrix)."""

    def check(self, a: tuple[int, ...]) -> None:
        if not a:
            raise ShapeError(f"Softmax needs at least one axis, got a scalar{at(self.where)}")

    @in_float32
    def apply(self, a: jax.Array) -> jax.Array:
        return jax.nn.softmax(a, axis=-1)

    @in_float32
    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (value * (d - jnp.sum(d * value, axis=-1, keepdims=True)),)


@layer_class
class LogSoftmax(Elementwise):
    """Log of the softmax over the last axis, computed stably."""

    check = Softmax.check

    @in_float32
    def apply(self, a: jax.Array) -> jax.Array:
        return jax.nn.log_softmax(a, axis=-1)

    @in_float32
    def vjp(self, d: jax.Array, value: jax.Array, a: jax.Array) -> tuple[jax.Array | None, ...]:
        return (d - jnp.exp(value) * jnp.sum(d, axis=-1, keepdims=True),)
