"""Normalisation layers: `BatchNorm` (Kaldi's BatchNormComponent) and `LayerNorm` (no Kaldi component).

`BatchNorm(h)` normalises every column over the rows of a minibatch in
training mode and with stored statistics in test mode, exactly as Kaldi's
BatchNormComponent (it is one: the math, the statistics as FixedWeights in
`network.state`, their update by `fit` and `symnet.components.batchnorm_stats_updates`,
test mode by `symnet.components.set_test_mode`). On an image (rows of
height x width x channels, see `symnet._src.layers.image`) it normalises each
channel over every pixel by default, as PyTorch's BatchNorm2d.

`LayerNorm(h)` normalises each row to mean 0 and variance 1, then scales and
offsets every column by learned vectors:
`y = (x - mean(x)) / sqrt(var(x) + epsilon) * scale + offset`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..base.errors import ShapeError, at
from ..components.base import rows_sum
from ..components.normalize import BatchNormComponent
from ..core.broadcast import unbroadcast
from ..core.initializers import Full, Zeros
from ..core.layer import FixedWeight, Layer, Literal, Weight, child, layer_class
from .base import (
    Typed,
    as_component,
    boolean,
    derived,
    image_shape_of,
    input_dim,
    option,
    optional_name,
    param,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["BatchNorm", "LayerNorm"]


def _block_dim(layer: Any) -> int:
    image = image_shape_of(layer.input)
    return image[2] if image is not None and image[0] * image[1] * image[2] == layer.dim else layer.dim


@layer_class
class BatchNorm(Typed, BatchNormComponent):
    """Batch normalisation: `y = (x - mean) * target_rms / sqrt(var + epsilon)` per column (per block of
    `block_dim` columns: the statistics of a block are shared, blocks count as rows).

    Training mode (the default) uses the minibatch's mean and variance; test
    mode (`test_mode=True`, or `set_test_mode`) the stored statistics, which
    training accumulates. `block_dim` defaults to the number of channels when
    the input is an image, else to the dim. Kaldi: BatchNormComponent.
    """

    # mypy takes the base component's fields as positional ones with defaults; attrs makes them keyword-only
    input: Layer = child()  # type: ignore[misc]
    epsilon: float = option(1.0e-3, converter=positive_float("BatchNorm", "epsilon"))
    target_rms: float = option(1.0, converter=positive_float("BatchNorm", "target_rms"))
    test_mode: bool = option(False, converter=boolean("BatchNorm", "test_mode"))
    name: str | None = option(None, converter=optional_name)  # type: ignore[assignment]
    dim: int = derived(lambda self: input_dim(self, "dim"), converter=positive_int("BatchNorm", "dim"))
    block_dim: int = derived(_block_dim, converter=positive_int("BatchNorm", "block_dim"))
    stats_mean: Layer = param(lambda self: FixedWeight(Zeros((self.block_dim,))))
    stats_var: Layer = param(lambda self: FixedWeight(Zeros((self.block_dim,))))
    count: Layer = param(lambda self: FixedWeight(0.0))

    name_stem = "batchnorm"
    keeps_layout = True

    def __attrs_post_init__(self) -> None:
        if self.dim % self.block_dim:
            raise ShapeError(f"BatchNorm{at(self.where)}: block_dim={self.block_dim} does not divide dim={self.dim}")

    def kaldi_form(self, name: str) -> Layer:
        return as_component(self, BatchNormComponent, name=self.name or name)


@layer_class
class LayerNorm(Typed, Layer):
    """Layer normalisation of each row: `(x - mean(x)) / sqrt(var(x) + epsilon) * scale + offset`.

    The mean and (biased) variance are over the row's `dim` columns; `scale`
    (ones) and `offset` (zeros) are learned vectors of `dim` values, or
    neither with `affine=False`. No Kaldi component has this math (Kaldi's
    NormalizeComponent divides by the root mean square without subtracting
    the mean), so it does not write to Kaldi configs.
    """

    input: Layer = child()
    epsilon: float = option(1.0e-5, converter=positive_float("LayerNorm", "epsilon"))
    affine: bool = option(True, converter=boolean("LayerNorm", "affine"))
    name: str | None = option(None, converter=optional_name)
    dim: int = derived(lambda self: input_dim(self, "dim"), converter=positive_int("LayerNorm", "dim"))
    scale: Layer = param(lambda self: Weight(Full((self.dim,), 1.0)) if self.affine else Literal(1.0))
    offset: Layer = param(lambda self: Weight(Zeros((self.dim,))) if self.affine else Literal(0.0))

    name_stem = "layernorm"
    keeps_layout = True
    param_fields: ClassVar[tuple[str, ...]] = ("scale", "offset")

    @property
    def output_dim(self) -> int:
        return self.dim

    def check(self, x: tuple[int, ...], *params: tuple[int, ...]) -> None:
        if not x or x[-1] != self.dim:
            raise ShapeError(f"LayerNorm{at(self.where)}: the input has shape {x}, expected rows of {self.dim}")
        for field, shape in zip(self.param_fields, params, strict=False):
            if shape not in ((), (1,), (self.dim,)):
                raise ShapeError(f"LayerNorm{at(self.where)}: {field} has shape {shape}, expected ({self.dim},)")

    def _normalised(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        centred = x - mean
        inv = jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + self.epsilon)
        return centred * inv, inv

    def apply(self, x: jax.Array, scale: jax.Array, offset: jax.Array) -> jax.Array:
        return self._normalised(x)[0] * scale + offset

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, scale: jax.Array, offset: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        xhat, inv = self._normalised(x)
        g = delta * scale
        dx = inv * (g - jnp.mean(g, axis=-1, keepdims=True) - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))
        if not self.affine:
            return dx, None, None
        return dx, rows_sum(delta * xhat).reshape(scale.shape), unbroadcast(delta, offset.shape)

    def _kaldi_gap(self) -> str:
        return (
            "Kaldi's NormalizeComponent divides by the root mean square without subtracting the mean, and no "
            "Kaldi component centres a row"
        )
