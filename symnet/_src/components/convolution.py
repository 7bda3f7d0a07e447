"""Kaldi's convolutional components.

TimeHeightConvolutionComponent (nnet-convolutional-component.cc, convolution.h)
-----------------------------------------------------------------------------
The input row at frame t is an image column of `height_in` pixels of
`num_filters_in` channels (column `h * num_filters_in + f`); the output row
is `height_out` pixels of `num_filters_out` channels (column
`h * num_filters_out + f`). The model is a list of `(time_offset,
height_offset)` pairs (`offsets`, sorted); `linear_params` is
`[num_filters_out, len(offsets) * num_filters_in]` (offset i owns columns
`i * num_filters_in .. (i + 1) * num_filters_in - 1`), `bias_params` is
`[num_filters_out]`:

    y(t)[h, :] = bias + sum_i W_i x(t + time_offset_i)[h * height_subsample_out + height_offset_i, :]

where a height outside `0 .. height_in - 1` reads zeros (implicit height
padding), and an input frame at a time offset that is not in
`required_time_offsets` reads zeros where it is not computable (time
padding); an output frame is computable where the input is at every required
time offset. The component is a macro layer: `expand()` is the input at each
time offset (`Offset`, or `IfDefined(Offset)` for the optional ones) appended,
followed by a row-wise layer for the height convolution, so regular requests
stay gather-free.

ConvolutionComponent and MaxpoolingComponent (nnet-simple-component.h, the older 2-D ones)
------------------------------------------------------------------------------------------
Row-wise: each row is a 3-D tensor over (x, y, z). For ConvolutionComponent
the input column of `(x, y, z)` is `(x * input_y_dim + y) * input_z_dim + z`
with `input-vectorization-order=zyx` (the default) or
`(x * input_z_dim + z) * input_y_dim + y` with `yzx` (Kaldi's model files write
`<InputVectorization>` 1 for zyx, 0 for yzx); a filter covers
`filt_x_dim x filt_y_dim x input_z_dim` (filter column `(x * filt_y_dim + y) *
input_z_dim + z`) and moves in steps of `filt_x_step`, `filt_y_step`; output
column `(x_step * num_y_steps + y_step) * num_filters + f`. MaxpoolingComponent
takes the input in zyx order and outputs the maximum over each pool, column
`(x_pool * num_pools_y + y_pool) * num_pools_z + z_pool`; its backprop passes
the delta to every input equal to the maximum (ties all get it), as Kaldi's.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from ..core.descriptor import Append, IfDefined, Offset
from ..core.layer import Layer, child, layer_class
from .base import Component, auto_vjp, known_shape

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["ConvolutionComponent", "MaxpoolingComponent", "TimeHeightConvolutionComponent"]


def _pairs(value: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in value)


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


# ----- TimeHeightConvolutionComponent ---------------------------------------------------------


@layer_class
class _HeightConvolution(Component):
    """The row-wise part of TimeHeightConvolutionComponent: its input is the input rows at
    `time_offsets` (the distinct time offsets of `offsets`, sorted) appended."""

    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()
    num_filters_in: int = 1
    height_in: int = 1
    height_out: int = 1
    height_subsample_out: int = 1
    offsets: tuple[tuple[int, int], ...] = attrs.field(default=((0, 0),), converter=_pairs)

    param_fields: ClassVar[tuple[str, ...]] = ("linear_params", "bias_params")

    @property
    def time_offsets(self) -> tuple[int, ...]:
        return tuple(sorted({t for t, _ in self.offsets}))

    @property
    def input_dim(self) -> int:
        return len(self.time_offsets) * self.height_in * self.num_filters_in

    @property
    def output_dim(self) -> int:
        return self.height_out * known_shape(self, "linear_params")[0]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out = known_shape(self, "linear_params")[0]
        return {"linear_params": (out, len(self.offsets) * self.num_filters_in), "bias_params": (out,)}

    def _gather_map(self) -> tuple[np.ndarray, np.ndarray]:
        """Per (output height, offset): which time block and which input height (height_in: a zero)."""
        slot = {t: i for i, t in enumerate(self.time_offsets)}
        h_out = np.arange(self.height_out)[:, None] * self.height_subsample_out
        k = np.array([slot[t] for t, _ in self.offsets])[None, :].repeat(self.height_out, 0)
        h = h_out + np.array([h for _, h in self.offsets])[None, :]
        h = np.where((h >= 0) & (h < self.height_in), h, self.height_in)
        return k, h

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        lead = x.shape[:-1]
        blocks = x.reshape(lead + (len(self.time_offsets), self.height_in, self.num_filters_in))
        pad = [(0, 0)] * len(lead) + [(0, 0), (0, 1), (0, 0)]
        blocks = jnp.pad(blocks, pad)
        k, h = self._gather_map()
        patches = blocks[..., k, h, :]  # [..., height_out, num_offsets, num_filters_in]
        patches = patches.reshape(lead + (self.height_out, len(self.offsets) * self.num_filters_in))
        y = jnp.matmul(patches, w.T) + b
        return y.reshape(lead + (self.height_out * w.shape[0],))

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w, b)


@layer_class
class TimeHeightConvolutionComponent(Component):
    """Convolution over time (frame offsets, like a TDNN) and height (within the feature dim).

    A macro layer: the engine plans `expand()`, the input at every time offset appended
    (optional offsets through IfDefined), then the row-wise height convolution.
    """

    input: Layer = child()
    linear_params: Layer = child()
    bias_params: Layer = child()
    num_filters_in: int = 1
    height_in: int = 1
    height_out: int = 1
    height_subsample_out: int = 1
    offsets: tuple[tuple[int, int], ...] = attrs.field(default=((0, 0),), converter=_pairs)
    required_time_offsets: tuple[int, ...] = attrs.field(default=(0,), converter=_ints)

    kaldi_type: ClassVar[str] = "TimeHeightConvolutionComponent"
    param_fields: ClassVar[tuple[str, ...]] = ("linear_params", "bias_params")
    rowwise: ClassVar[bool] = False

    @property
    def num_filters_out(self) -> int:
        return known_shape(self, "linear_params")[0]

    @property
    def time_offsets(self) -> tuple[int, ...]:
        return tuple(sorted({t for t, _ in self.offsets}))

    @property
    def height_offsets(self) -> tuple[int, ...]:
        return tuple(sorted({h for _, h in self.offsets}))

    @property
    def input_dim(self) -> int:
        return self.num_filters_in * self.height_in

    @property
    def output_dim(self) -> int:
        return self.num_filters_out * self.height_out

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        out = self.num_filters_out
        return {"linear_params": (out, len(self.offsets) * self.num_filters_in), "bias_params": (out,)}

    def expand(self) -> Layer:
        w = self.where
        parts = []
        for t in self.time_offsets:
            part = self.input if t == 0 else Offset(self.input, t, where=w)
            parts.append(part if t in self.required_time_offsets else IfDefined(part, where=w))
        spliced = parts[0] if len(parts) == 1 else Append(*parts, where=w)
        return _HeightConvolution(
            self.name,
            spliced,
            self.linear_params,
            self.bias_params,
            self.num_filters_in,
            self.height_in,
            self.height_out,
            self.height_subsample_out,
            self.offsets,
            where=w,
        )


# ----- ConvolutionComponent ----------------------------------------------------------------------


def _steps(size: int, filt: int, step: int) -> int:
    return 1 + (size - filt) // step


@layer_class
class ConvolutionComponent(Component):
    """Kaldi's 2-D convolution over the feature dim of each row (see the module doc)."""

    input: Layer = child()
    filter_params: Layer = child()
    bias_params: Layer = child()
    input_x_dim: int = 1
    input_y_dim: int = 1
    input_z_dim: int = 1
    filt_x_dim: int = 1
    filt_y_dim: int = 1
    filt_x_step: int = 1
    filt_y_step: int = 1
    input_vectorization_order: str = "zyx"

    kaldi_type: ClassVar[str] = "ConvolutionComponent"
    param_fields: ClassVar[tuple[str, ...]] = ("filter_params", "bias_params")

    @property
    def num_filters(self) -> int:
        return known_shape(self, "filter_params")[0]

    @property
    def input_dim(self) -> int:
        return self.input_x_dim * self.input_y_dim * self.input_z_dim

    @property
    def output_dim(self) -> int:
        return (
            _steps(self.input_x_dim, self.filt_x_dim, self.filt_x_step)
            * _steps(self.input_y_dim, self.filt_y_dim, self.filt_y_step)
            * self.num_filters
        )

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        nf = self.num_filters
        return {"filter_params": (nf, self.filt_x_dim * self.filt_y_dim * self.input_z_dim), "bias_params": (nf,)}

    def column_map(self) -> np.ndarray:
        """`[num_patches, filter_dim]`: the input column of each patch element (Kaldi's InputToInputPatches)."""
        nx = _steps(self.input_x_dim, self.filt_x_dim, self.filt_x_step)
        ny = _steps(self.input_y_dim, self.filt_y_dim, self.filt_y_step)
        xs = (
            np.arange(nx)[:, None, None, None, None] * self.filt_x_step
            + np.arange(self.filt_x_dim)[None, None, :, None, None]
        )
        ys = (
            np.arange(ny)[None, :, None, None, None] * self.filt_y_step
            + np.arange(self.filt_y_dim)[None, None, None, :, None]
        )
        zs = np.arange(self.input_z_dim)[None, None, None, None, :]
        if self.input_vectorization_order == "zyx":
            cols = (xs * self.input_y_dim + ys) * self.input_z_dim + zs
        else:  # yzx
            cols = (xs * self.input_z_dim + zs) * self.input_y_dim + ys
        return cols.reshape(nx * ny, self.filt_x_dim * self.filt_y_dim * self.input_z_dim)

    def apply(self, x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        patches = x[..., self.column_map()]  # [..., num_patches, filter_dim]
        y = jnp.matmul(patches, w.T) + b
        return y.reshape(x.shape[:-1] + (-1,))

    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, w: jax.Array, b: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x, w, b)


# ----- MaxpoolingComponent ------------------------------------------------------------------------


def _max(patches: jax.Array) -> jax.Array:
    return jnp.max(patches, axis=-1)


def _kaldi_max_fwd(patches: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    out = jnp.max(patches, axis=-1)
    return out, (patches, out)


def _kaldi_max_bwd(saved: tuple[jax.Array, jax.Array], delta: jax.Array) -> tuple[jax.Array]:
    patches, out = saved
    mask = (patches == out[..., None]).astype(delta.dtype)
    return (mask * delta[..., None],)


@functools.cache
def _kaldi_max() -> Any:
    """The max over the last axis, whose derivative goes to every element equal to the max (Kaldi's); a
    custom_vjp function made on first use (importing symnet imports no jax)."""
    function = jax.custom_vjp(_max)
    function.defvjp(_kaldi_max_fwd, _kaldi_max_bwd)
    return function


@layer_class
class MaxpoolingComponent(Component):
    """The maximum over each 3-D pool of the row's (x, y, z) tensor (see the module doc)."""

    input: Layer = child()
    input_x_dim: int = 1
    input_y_dim: int = 1
    input_z_dim: int = 1
    pool_x_size: int = 1
    pool_y_size: int = 1
    pool_z_size: int = 1
    pool_x_step: int = 1
    pool_y_step: int = 1
    pool_z_step: int = 1

    kaldi_type: ClassVar[str] = "MaxpoolingComponent"

    def _num_pools(self) -> tuple[int, int, int]:
        return (
            _steps(self.input_x_dim, self.pool_x_size, self.pool_x_step),
            _steps(self.input_y_dim, self.pool_y_size, self.pool_y_step),
            _steps(self.input_z_dim, self.pool_z_size, self.pool_z_step),
        )

    @property
    def input_dim(self) -> int:
        return self.input_x_dim * self.input_y_dim * self.input_z_dim

    @property
    def output_dim(self) -> int:
        return math.prod(self._num_pools())

    def column_map(self) -> np.ndarray:
        """`[num_pools, pool_size]`: the input column of each pool member."""
        px, py, pz = self._num_pools()
        xs = (
            np.arange(px)[:, None, None, None, None, None] * self.pool_x_step
            + np.arange(self.pool_x_size)[None, None, None, :, None, None]
        )
        ys = (
            np.arange(py)[None, :, None, None, None, None] * self.pool_y_step
            + np.arange(self.pool_y_size)[None, None, None, None, :, None]
        )
        zs = (
            np.arange(pz)[None, None, :, None, None, None] * self.pool_z_step
            + np.arange(self.pool_z_size)[None, None, None, None, None, :]
        )
        cols = (xs * self.input_y_dim + ys) * self.input_z_dim + zs
        return cols.reshape(px * py * pz, self.pool_x_size * self.pool_y_size * self.pool_z_size)

    def apply(self, x: jax.Array) -> jax.Array:
        return _kaldi_max()(x[..., self.column_map()])

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x)
