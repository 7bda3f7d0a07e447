"""Per-element scales and offsets, fixed scales and biases, constant functions and constants."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..core.descriptor import Const
from ..core.layer import Layer, child, layer_class
from .base import Component, SameDim, known_shape, rows_sum

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "ConstantComponent",
    "ConstantFunctionComponent",
    "ensure_nonzero",
    "FixedBiasComponent",
    "FixedScaleComponent",
    "NaturalGradientPerElementScaleComponent",
    "PerElementOffsetComponent",
    "PerElementScaleComponent",
    "SCALE_EPSILON",
    "ScaleAndOffsetComponent",
]

#: ScaleAndOffsetComponent keeps its scales at least this far from zero in the forward pass.
SCALE_EPSILON = 1.0e-4


def _vector_dim(layer: Component, field: str) -> int:
    return known_shape(layer, field)[0]


def _blocks(x: jax.Array, block_dim: int) -> jax.Array:
    return x.reshape(x.shape[:-1] + (x.shape[-1] // block_dim, block_dim))


def ensure_nonzero(v: jax.Array, epsilon: float) -> jax.Array:
    """Kaldi's cu::EnsureNonzero: `x` if `|x| >= epsilon`, else `epsilon` (x >= 0) or `-epsilon` (x < 0)."""
    return jnp.where(jnp.abs(v) >= epsilon, v, jnp.where(v >= 0, epsilon, -epsilon))


@layer_class
class ScaleAndOffsetComponent(SameDim, Component):
    """`y = x * scales + offsets`, per block of `len(scales)` columns; scales kept >= 1e-4 from zero.

    Backward as Kaldi: the input delta uses the stored scales, and the scales'
    gradient is `sum(x * delta)` (as if the nonzero-clamp were the identity).
    """

    input: Layer = child()
    scales: Layer = child()
    offsets: Layer = child()
    dim: int = 0

    kaldi_type = "ScaleAndOffsetComponent"
    param_fields = ("scales", "offsets")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        block = _vector_dim(self, "scales")
        return {"scales": (block,), "offsets": (block,)}

    def apply(self, x: jax.Array, scales: jax.Array, offsets: jax.Array) -> jax.Array:
        y = _blocks(x, scales.shape[0]) * ensure_nonzero(scales, SCALE_EPSILON) + offsets
        return y.reshape(x.shape)

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, scales: jax.Array, offsets: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        block = scales.shape[0]
        ds, xs = _blocks(delta, block), _blocks(x, block)
        return (ds * scales).reshape(x.shape), rows_sum(xs * ds), rows_sum(ds)


@layer_class
class _ColumnVector(Component):
    """A component of one parameter vector (`param_fields[0]`) with one value per column: its length is the
    input and output dim."""

    @property
    def input_dim(self) -> int:
        return _vector_dim(self, self.param_fields[0])

    @property
    def output_dim(self) -> int:
        return self.input_dim


@layer_class
class _ColumnScale(_ColumnVector):
    """`y = x * scales`, one scale per column; the scales get a gradient where `trained`."""

    trained: ClassVar[bool] = True

    def apply(self, x: jax.Array, scales: jax.Array) -> jax.Array:
        return x * scales

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, scales: jax.Array) -> tuple[jax.Array | None, ...]:
        return delta * scales, (rows_sum(x * delta) if self.trained else None)


@layer_class
class PerElementScaleComponent(_ColumnScale):
    """`y = x * params` (one scale per column; Kaldi's `<Params>`)."""

    input: Layer = child()
    params: Layer = child()

    kaldi_type = "PerElementScaleComponent"
    param_fields = ("params",)


@layer_class
class NaturalGradientPerElementScaleComponent(PerElementScaleComponent):
    """PerElementScaleComponent trained by Kaldi with natural gradient; the forward pass is the same."""

    kaldi_type = "NaturalGradientPerElementScaleComponent"


@layer_class
class PerElementOffsetComponent(SameDim, Component):
    """`y = x + offsets`, per block of `len(offsets)` columns."""

    input: Layer = child()
    offsets: Layer = child()
    dim: int = 0

    kaldi_type = "PerElementOffsetComponent"
    param_fields = ("offsets",)

    def apply(self, x: jax.Array, offsets: jax.Array) -> jax.Array:
        return (_blocks(x, offsets.shape[0]) + offsets).reshape(x.shape)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, offsets: jax.Array) -> tuple[jax.Array | None, ...]:
        return delta, rows_sum(_blocks(delta, offsets.shape[0]))


@layer_class
class FixedScaleComponent(_ColumnScale):
    """`y = x * scales` with fixed (never trained) scales."""

    input: Layer = child()
    scales: Layer = child()

    kaldi_type = "FixedScaleComponent"
    param_fields = ("scales",)
    trained = False


@layer_class
class FixedBiasComponent(_ColumnVector):
    """`y = x + bias` with a fixed (never trained) bias."""

    input: Layer = child()
    bias: Layer = child()

    kaldi_type = "FixedBiasComponent"
    param_fields = ("bias",)

    def apply(self, x: jax.Array, bias: jax.Array) -> jax.Array:
        return x + bias

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, bias: jax.Array) -> tuple[jax.Array | None, ...]:
        return delta, None


@layer_class
class ConstantFunctionComponent(Component):
    """Every output row is the vector `output`, whatever the input (which only supplies the rows)."""

    input: Layer = child()
    output: Layer = child()
    in_dim: int = 0
    is_updatable: bool = True

    kaldi_type = "ConstantFunctionComponent"
    param_fields = ("output",)

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return _vector_dim(self, "output")

    def apply(self, x: jax.Array, output: jax.Array) -> jax.Array:
        return jnp.broadcast_to(output, x.shape[:-1] + output.shape).astype(jnp.result_type(x, output))

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array, output: jax.Array) -> tuple[jax.Array | None, ...]:
        return None, (rows_sum(delta) if self.is_updatable else None)


@layer_class
class ConstantComponent(Component):
    """Kaldi's ConstantComponent: every output row is the vector `output`, at every Index, with no input.

    Kaldi's component reads no input Indexes, so every output Index is computable
    (nnet-general-component.h); its node is written `input=<itself>`. `input` is
    kept only for writing that node line: the engine plans `expand()`, the
    constant rows of `output`, so the input adds no dependency and no cycle.
    """

    input: Layer = child()
    output: Layer = child()
    is_updatable: bool = True

    kaldi_type = "ConstantComponent"
    param_fields = ("output",)
    rowwise: ClassVar[bool] = False
    reads_input: ClassVar[bool] = False

    @property
    def input_dim(self) -> int:
        return self.output_dim  # Kaldi's InputDim: a don't-care that makes `input=<itself>` type-check

    @property
    def output_dim(self) -> int:
        return _vector_dim(self, "output")

    def expand(self) -> Layer:
        return ConstantFunctionComponent(
            self.name, Const(0.0, 1, where=self.where), self.output, 1, self.is_updatable, where=self.where
        )
