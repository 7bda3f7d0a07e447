"""Kaldi's nonlinearities: RectifiedLinear, Sigmoid, Tanh, Softmax, LogSoftmax, Pnorm.

Kaldi's self-repair (which nudges the derivative of units whose average
derivative is too small) needs running statistics and random numbers; its
options are kept in `options` but the backward pass here is the plain
derivative.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from ..core.layer import Layer, child, layer_class
from ..core.elementwise import LogSoftmax, ReLU, Sigmoid, Tanh
from .base import Component, OptionReader, register

#: Kaldi's "unset" self-repair threshold (kUnsetThreshold).
UNSET_THRESHOLD = -1000.0

#: SoftmaxComponent floors its output at this value (so log() of it stays finite).
SOFTMAX_FLOOR = 1.0e-20


@layer_class
class _Nonlinear(Component):
    input: Layer = child()
    dim: int = 0

    @property
    def input_dim(self) -> int:
        return self.dim

    @property
    def output_dim(self) -> int:
        return self.dim


@layer_class
class RectifiedLinearComponent(_Nonlinear):
    """`max(x, 0)`; the derivative is 1 where x > 0, else 0 (as Kaldi: it reads the output)."""

    kaldi_type = "RectifiedLinearComponent"

    # The core layer's formulas (symnet.layer.ReLU), which are Kaldi's.
    apply = ReLU.apply
    vjp = ReLU.vjp


@layer_class
class SigmoidComponent(_Nonlinear):
    """`1 / (1 + exp(-x))`."""

    kaldi_type = "SigmoidComponent"

    # The core layer's formulas (symnet.layer.Sigmoid), which are Kaldi's.
    apply = Sigmoid.apply
    vjp = Sigmoid.vjp


@layer_class
class TanhComponent(_Nonlinear):
    """`tanh(x)`."""

    kaldi_type = "TanhComponent"

    # The core layer's formulas (symnet.layer.Tanh), which are Kaldi's.
    apply = Tanh.apply
    vjp = Tanh.vjp


@layer_class
class SoftmaxComponent(_Nonlinear):
    """Softmax of each row, floored at 1e-20 as Kaldi does; backward uses the (floored) output."""

    kaldi_type = "SoftmaxComponent"

    def apply(self, x):
        return jnp.maximum(jax.nn.softmax(x, axis=-1), SOFTMAX_FLOOR)

    def vjp(self, delta, value, x):
        return (value * (delta - jnp.sum(delta * value, axis=-1, keepdims=True)),)


@layer_class
class LogSoftmaxComponent(_Nonlinear):
    """Log-softmax of each row: `x - log(sum(exp(x)))`."""

    kaldi_type = "LogSoftmaxComponent"

    apply = LogSoftmax.apply
    vjp = LogSoftmax.vjp


@layer_class
class PnormComponent(Component):
    """The 2-norm of each group of `input_dim / output_dim` consecutive columns."""

    input: Layer = child()
    in_dim: int = 0
    out_dim: int = 0

    kaldi_type = "PnormComponent"

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return self.out_dim

    def _groups(self, x):
        return x.reshape(x.shape[:-1] + (self.out_dim, self.in_dim // self.out_dim))

    def apply(self, x):
        return jnp.sqrt(jnp.sum(jnp.square(self._groups(x)), axis=-1))

    def vjp(self, delta, value, x):
        # d y_j / d x_i = x_i / y_j; Kaldi takes it as 0 where y_j == 0.
        safe = jnp.where(value == 0, 1.0, value)
        scale = jnp.where(value == 0, 0.0, delta / safe)
        return ((self._groups(x) * scale[..., None]).reshape(x.shape),)


# ----- builders ----------------------------------------------------------------------


def _nonlinear(cls: type):
    def build(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
        opts = OptionReader(cls.kaldi_type, name, options)
        dim = opts.int("dim")
        opts.positive("dim", dim)
        block_dim = opts.int("block-dim", dim)
        opts.require(block_dim > 0 and dim % block_dim == 0,
                     f"block-dim={block_dim} must be positive and divide dim={dim}", "block-dim")
        meta = [
            ("block-dim", block_dim),
            ("self-repair-lower-threshold", opts.float("self-repair-lower-threshold", UNSET_THRESHOLD)),
            ("self-repair-upper-threshold", opts.float("self-repair-upper-threshold", UNSET_THRESHOLD)),
            ("self-repair-scale", opts.float("self-repair-scale", 0.0)),
        ]
        opts.finish()
        return cls(name, input, dim, options=meta)

    build.__name__ = cls.kaldi_type
    build.__doc__ = (f"{cls.kaldi_type}: dim (required), block-dim (dim), self-repair-lower-threshold, "
                     "self-repair-upper-threshold, self-repair-scale (kept as metadata).")
    return register(cls.kaldi_type)(build)


for _cls in (RectifiedLinearComponent, SigmoidComponent, TanhComponent, SoftmaxComponent, LogSoftmaxComponent):
    _nonlinear(_cls)
del _cls


@register("PnormComponent")
def pnorm_component(name: str, options: Mapping[str, Any], input: Layer, *, read_matrix=None) -> Layer:
    """Options: input-dim, output-dim (required); output-dim must divide input-dim."""
    opts = OptionReader("PnormComponent", name, options)
    output_dim = opts.int("output-dim")
    input_dim = opts.int("input-dim")
    opts.positive("output-dim", output_dim)
    opts.positive("input-dim", input_dim)
    opts.require(input_dim % output_dim == 0, f"output-dim={output_dim} must divide input-dim={input_dim}",
                 "output-dim")
    opts.finish()
    return PnormComponent(name, input, input_dim, output_dim)
