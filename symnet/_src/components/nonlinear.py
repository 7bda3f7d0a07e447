"""Kaldi's nonlinearities: RectifiedLinear, Sigmoid, Tanh, Softmax, LogSoftmax, Pnorm.

Kaldi's self-repair (which nudges the derivative of units whose average
derivative is out of range) is kept in `options`; `fit` with Kaldi's rules
applies it to RectifiedLinear, Sigmoid and Tanh components
(symnet._src.components.self_repair), elsewhere the backward pass is the plain
derivative.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.elementwise import LogSoftmax, ReLU, Sigmoid, Tanh
from ..core.layer import Layer, child, layer_class
from ..core.precision import in_float32
from . import self_repair
from .base import Component, InOutDims, SameDim

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "LogSoftmaxComponent",
    "PnormComponent",
    "RectifiedLinearComponent",
    "SigmoidComponent",
    "SOFTMAX_FLOOR",
    "SoftmaxComponent",
    "TanhComponent",
]

#: SoftmaxComponent floors its output at this value (so log() of it stays finite).
SOFTMAX_FLOOR = 1.0e-20


@layer_class
class _Nonlinear(SameDim, Component):
    input: Layer = child()
    dim: int = 0

    def step_apply(self, *operands: jax.Array) -> tuple[jax.Array, Any] | None:
        return self_repair.step_apply(self, *operands)


@layer_class
class RectifiedLinearComponent(_Nonlinear):
    """`max(x, 0)`; the derivative is 1 where x > 0, else 0 (as Kaldi: it reads the output)."""

    kaldi_type = "RectifiedLinearComponent"

    # The core layer's formulas (symnet._src.core.elementwise.ReLU), which are Kaldi's.
    apply = ReLU.apply
    vjp = ReLU.vjp


@layer_class
class SigmoidComponent(_Nonlinear):
    """`1 / (1 + exp(-x))`."""

    kaldi_type = "SigmoidComponent"

    # The core layer's formulas (symnet._src.core.elementwise.Sigmoid), which are Kaldi's.
    apply = Sigmoid.apply
    vjp = Sigmoid.vjp


@layer_class
class TanhComponent(_Nonlinear):
    """`tanh(x)`."""

    kaldi_type = "TanhComponent"

    # The core layer's formulas (symnet._src.core.elementwise.Tanh), which are Kaldi's.
    apply = Tanh.apply
    vjp = Tanh.vjp


@layer_class
class SoftmaxComponent(_Nonlinear):
    """Softmax of each row, floored at 1e-20 as Kaldi does; backward uses the (floored) output."""

    kaldi_type = "SoftmaxComponent"

    @in_float32
    def apply(self, x: jax.Array) -> jax.Array:
        return jnp.maximum(jax.nn.softmax(x, axis=-1), SOFTMAX_FLOOR)

    @in_float32
    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (value * (delta - jnp.sum(delta * value, axis=-1, keepdims=True)),)


@layer_class
class LogSoftmaxComponent(_Nonlinear):
    """Log-softmax of each row: `x - log(sum(exp(x)))`."""

    kaldi_type = "LogSoftmaxComponent"

    apply = LogSoftmax.apply
    vjp = LogSoftmax.vjp


@layer_class
class PnormComponent(InOutDims, Component):
    """The 2-norm of each group of `input_dim / output_dim` consecutive columns."""

    input: Layer = child()
    in_dim: int = 0
    out_dim: int = 0

    kaldi_type = "PnormComponent"

    def _groups(self, x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[:-1] + (self.out_dim, self.in_dim // self.out_dim))

    def apply(self, x: jax.Array) -> jax.Array:
        return jnp.sqrt(jnp.sum(jnp.square(self._groups(x)), axis=-1))

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        # d y_j / d x_i = x_i / y_j; Kaldi takes it as 0 where y_j == 0.
        safe = jnp.where(value == 0, 1.0, value)
        scale = jnp.where(value == 0, 0.0, delta / safe)
        return ((self._groups(x) * scale[..., None]).reshape(x.shape),)
