"""Column-wise rearrangements, dropout, and the gradient-shaping components.

NoOp, ElementwiseProduct, SumGroup, SumBlock, Permute, Dropout, GeneralDropout
(with SpecAugment's frequency masks), DropoutMask (the dropout scales of an
LSTM, with no input), ClipGradient and BackpropTruncation (identity or scaling
forward, Kaldi's clipping of the backward delta).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from ..core import rng
from ..core.descriptor import Const
from ..core.layer import Layer, child, layer_class
from .base import Component, ComponentModeError, InOutDims, SameDim, auto_vjp

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "BackpropTruncationComponent",
    "ClipGradientComponent",
    "DropoutComponent",
    "DropoutMaskComponent",
    "ElementwiseProductComponent",
    "GeneralDropoutComponent",
    "NoOpComponent",
    "PermuteComponent",
    "SumBlockComponent",
    "SumGroupComponent",
]


def _int_tuple(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


@layer_class
class _SameDim(SameDim, Component):
    input: Layer = child()
    dim: int = 0


@layer_class
class NoOpComponent(_SameDim):
    """Identity forward; the backward delta is scaled by `backprop_scale`."""

    backprop_scale: float = 1.0

    kaldi_type = "NoOpComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        return x

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (delta if self.backprop_scale == 1.0 else delta * self.backprop_scale,)


@layer_class
class ElementwiseProductComponent(InOutDims, Component):
    """The elementwise product of the `input_dim / output_dim` consecutive blocks of `output_dim` columns."""

    input: Layer = child()
    in_dim: int = 0
    out_dim: int = 0

    kaldi_type = "ElementwiseProductComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        blocks = x.reshape(x.shape[:-1] + (self.in_dim // self.out_dim, self.out_dim))
        return jnp.prod(blocks, axis=-2)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return auto_vjp(self, delta, x)


@layer_class
class SumGroupComponent(Component):
    """Output column i is the sum of the i-th group of consecutive input columns (`sizes[i]` of them)."""

    input: Layer = child()
    sizes: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)

    kaldi_type = "SumGroupComponent"

    @property
    def input_dim(self) -> int:
        return sum(self.sizes)

    @property
    def output_dim(self) -> int:
        return len(self.sizes)

    def _uniform(self) -> int | None:
        return self.sizes[0] if len(set(self.sizes)) == 1 else None

    def _membership(self) -> np.ndarray:
        """The `[input_dim, output_dim]` 0/1 matrix of which group each input column belongs to."""
        group = np.repeat(np.arange(len(self.sizes)), self.sizes)
        return (group[:, None] == np.arange(len(self.sizes))[None, :]).astype(np.float32)

    def apply(self, x: jax.Array) -> jax.Array:
        size = self._uniform()
        if size is not None:
            return jnp.sum(x.reshape(x.shape[:-1] + (len(self.sizes), size)), axis=-1)
        return jnp.matmul(x, jnp.asarray(self._membership(), dtype=x.dtype))

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        group = np.repeat(np.arange(len(self.sizes)), self.sizes)
        return (jnp.take(delta, jnp.asarray(group), axis=-1),)


@layer_class
class SumBlockComponent(InOutDims, Component):
    """`scale` times the sum of the `input_dim / output_dim` consecutive blocks of `output_dim` columns."""

    input: Layer = child()
    in_dim: int = 0
    out_dim: int = 0
    scale: float = 1.0

    kaldi_type = "SumBlockComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        blocks = x.reshape(x.shape[:-1] + (self.in_dim // self.out_dim, self.out_dim))
        return self.scale * jnp.sum(blocks, axis=-2)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        k = self.in_dim // self.out_dim
        return (jnp.tile(self.scale * delta, (1,) * (delta.ndim - 1) + (k,)),)


@layer_class
class PermuteComponent(Component):
    """Output column i is input column `column_map[i]`."""

    input: Layer = child()
    column_map: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)

    kaldi_type = "PermuteComponent"

    @property
    def input_dim(self) -> int:
        return len(self.column_map)

    @property
    def output_dim(self) -> int:
        return len(self.column_map)

    @property
    def reverse_column_map(self) -> tuple[int, ...]:
        reverse = [0] * len(self.column_map)
        for i, c in enumerate(self.column_map):
            reverse[c] = i
        return tuple(reverse)

    def apply(self, x: jax.Array) -> jax.Array:
        return jnp.take(x, jnp.asarray(self.column_map), axis=-1)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (jnp.take(delta, jnp.asarray(self.reverse_column_map), axis=-1),)


@layer_class
class DropoutComponent(_SameDim):
    """Kaldi's dropout. Training mode: `y = x * mask`, each mask value 0 with probability
    `dropout_proportion` and 1 otherwise (no rescaling; one value per row with
    `dropout_per_frame`). Test mode: `y = (1 - dropout_proportion) x`.

    The mask comes from `symnet.rng.key_for(name)`, so backward sees the forward's mask. Inside
    `symnet.rng.dropout_proportions({name: p})` (a dropout schedule) the proportion is that block's.
    """

    dropout_proportion: float = 0.0
    dropout_per_frame: bool = False
    test_mode: bool = False

    kaldi_type = "DropoutComponent"

    def _proportion(self) -> Any:
        return rng.proportion(self.name, self.dropout_proportion)

    def _mask(self, x: jax.Array) -> jax.Array:
        key = rng.key_for(self.name, f"{type(self).__name__} {self.name!r}")
        shape = x.shape[:-1] + (1,) if self.dropout_per_frame else x.shape
        return (jax.random.uniform(key, shape, x.dtype) >= self._proportion()).astype(x.dtype)

    def apply(self, x: jax.Array) -> jax.Array:
        p = self._proportion()
        if self.test_mode:
            return x * (1.0 - p)
        if _is_zero(p):
            return x
        return x * self._mask(x)

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        p = self._proportion()
        if self.test_mode:
            return (delta * (1.0 - p),)
        if _is_zero(p):
            return (delta,)
        return (delta * self._mask(x),)


def _is_zero(p: Any) -> bool:
    """Whether a proportion is known to be 0 while tracing (a traced one, from a schedule, is not)."""
    return isinstance(p, (int, float)) and p == 0.0


@layer_class
class GeneralDropoutComponent(_SameDim):
    """Kaldi's general dropout. Training mode: each row's blocks of `block_dim` columns are
    multiplied by one mask row of `block_dim` values: uniform on `[1 - 2p, 1 + 2p]` with
    `continuous`, else 0 with probability p and `1 / (1 - p)` otherwise. Test mode: the identity.
    Masks shared over `time_period` frames need the rows' Indexes and are not supported.
    `specaugment_max_proportion` > 0 makes it SpecAugment's frequency mask (random bands of at most
    that proportion of the columns, in at most `specaugment_max_regions` regions): the identity in
    test mode as in Kaldi; its random bands in training mode are not supported yet.
    """

    block_dim: int = 0
    time_period: int = 0
    dropout_proportion: float = 0.5
    continuous: bool = False
    test_mode: bool = False
    specaugment_max_proportion: float = 0.0
    specaugment_max_regions: int = 1

    kaldi_type = "GeneralDropoutComponent"

    def _mask(self, x: jax.Array) -> tuple[jax.Array, int]:
        if self.time_period > 0:
            raise ComponentModeError(
                f"GeneralDropoutComponent {self.name!r}: training with time-period={self.time_period} "
                "(masks shared across frames) is not supported; use time-period=0 or test mode"
            )
        if self.specaugment_max_proportion > 0.0:
            raise ComponentModeError(
                f"GeneralDropoutComponent {self.name!r}: SpecAugment's random frequency masks in training mode "
                "are not supported yet; run it in test mode (symnet.components.set_test_mode)"
            )
        key = rng.key_for(self.name, f"{type(self).__name__} {self.name!r}")
        block = self.block_dim or x.shape[-1]
        u = jax.random.uniform(key, x.shape[:-1] + (1, block), x.dtype)
        p = rng.proportion(self.name, self.dropout_proportion)
        mask = 1.0 - 2.0 * p + 4.0 * p * u if self.continuous else (u >= p).astype(x.dtype) / (1.0 - p)
        return mask, block

    def _apply_mask(self, v: jax.Array, mask: jax.Array, block: int) -> jax.Array:
        blocks = v.reshape(v.shape[:-1] + (v.shape[-1] // block, block))
        return (blocks * mask).reshape(v.shape)

    def _identity(self) -> bool:
        p = rng.proportion(self.name, self.dropout_proportion)
        return self.test_mode or (_is_zero(p) and self.specaugment_max_proportion == 0.0)

    def apply(self, x: jax.Array) -> jax.Array:
        if self._identity():
            return x
        return self._apply_mask(x, *self._mask(x))

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        if self._identity():
            return (delta,)
        return (self._apply_mask(delta, *self._mask(x)),)


@layer_class
class _DropoutMaskRows(Component):
    """The rows of DropoutMaskComponent (see there); its input only supplies the rows."""

    input: Layer = child()
    dim: int = 1
    dropout_proportion: float = 0.5
    continuous: bool = False
    test_mode: bool = False

    @property
    def input_dim(self) -> int:
        return 1

    @property
    def output_dim(self) -> int:
        return self.dim

    def apply(self, x: jax.Array) -> jax.Array:
        shape, p = x.shape[:-1] + (self.dim,), rng.proportion(self.name, self.dropout_proportion)
        if _is_zero(p) or (self.test_mode and self.continuous):
            return jnp.ones(shape, x.dtype)
        if self.test_mode:
            return jnp.full(shape, 1.0 - p, x.dtype)
        key = rng.key_for(self.name, f"{type(self).__name__} {self.name!r}")
        u = jax.random.uniform(key, shape, x.dtype)
        if self.continuous:
            return 1.0 - 2.0 * p + 4.0 * p * u
        mask = (u > p).astype(x.dtype)
        if self.dim in (2, 3):  # Kaldi's LSTM case: the first two scales of a row are never both zero
            first = u[..., :1]
            mask = jnp.concatenate([(first > p), (first < 1.0 - p), mask[..., 2:]], axis=-1).astype(x.dtype)
        return mask

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        return (None,)


@layer_class
class DropoutMaskComponent(Component):
    """Kaldi's DropoutMaskComponent: a dropout mask of `dim` columns at every Index, with no input.

    It feeds the dropout scales of an LstmNonlinearityComponent (`use-dropout`);
    its node is written `input=<itself>`. Test mode: every value `1 - p` (1 with
    `continuous`). Training mode: per value 1 where a uniform draw exceeds p, else
    0; with 2 or 3 columns the first two come from one draw u, `u > p` and
    `u < 1 - p`, so a row never drops both; with `continuous`, uniform on
    `[1 - 2p, 1 + 2p]`. `input` is kept only for writing the node line (see
    `Component.reads_input`).
    """

    input: Layer = child()
    dim: int = 1
    dropout_proportion: float = 0.5
    continuous: bool = False
    test_mode: bool = False

    kaldi_type = "DropoutMaskComponent"
    rowwise: ClassVar[bool] = False
    reads_input: ClassVar[bool] = False

    @property
    def input_dim(self) -> int:
        return self.dim  # Kaldi's InputDim: a don't-care that makes `input=<itself>` type-check

    @property
    def output_dim(self) -> int:
        return self.dim

    def expand(self) -> Layer:
        return _DropoutMaskRows(
            self.name,
            Const(0.0, 1, where=self.where),
            self.dim,
            self.dropout_proportion,
            self.continuous,
            self.test_mode,
            where=self.where,
        )


def _row_norm_scales(delta: jax.Array, threshold: float) -> jax.Array:
    """Per row, `min(1, threshold / ||row||)` (Kaldi's norm-based clipping scales)."""
    sq = jnp.sum(delta * delta, axis=-1, keepdims=True) / (threshold * threshold)
    return jnp.where(sq > 1.0, 1.0 / jnp.sqrt(jnp.maximum(sq, 1.0)), 1.0)


@layer_class
class ClipGradientComponent(_SameDim):
    """Identity forward; backward clips the delta: each element to `[-t, t]`, or with
    `norm_based_clipping` each row to norm at most `t`; `t == 0` zeroes it.

    Kaldi's self-repair options (which need running clipping counts) are kept in `options`.
    """

    clipping_threshold: float = 15.0
    norm_based_clipping: bool = False

    kaldi_type = "ClipGradientComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        return x

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        t = self.clipping_threshold
        if t == 0.0:
            return (jnp.zeros_like(delta),)
        if self.norm_based_clipping:
            return (delta * _row_norm_scales(delta, t),)
        return (jnp.clip(delta, -t, t),)


def _floor_div(a: np.ndarray, b: int) -> np.ndarray:
    return np.floor_divide(a, b)


@layer_class
class BackpropTruncationComponent(_SameDim):
    """`y = scale x`; backward scales the delta by `scale`, then clips each row's norm to
    `clipping_threshold` and zeroes rows at truncation boundaries whose norm exceeds
    `zeroing_threshold` (the zeroing needs each row's Index: see `backprop`)."""

    scale: float = 1.0
    clipping_threshold: float = 30.0
    zeroing_threshold: float = 15.0
    zeroing_interval: int = 20
    recurrence_interval: int = 1

    kaldi_type = "BackpropTruncationComponent"

    def apply(self, x: jax.Array) -> jax.Array:
        return x if self.scale == 1.0 else x * self.scale

    def zeroing_rows(self, n: Any, t: Any) -> np.ndarray:
        """Kaldi's PrecomputeIndexes: whether a row with Index (n, t) lies on a truncation boundary.

        `floor((t - n) / zi) != floor((t - ri - n) / zi)`: the boundary moves with n,
        so that not every sequence is cut at frame 0.
        """
        n, t = np.asarray(n), np.asarray(t)
        zi, ri = self.zeroing_interval, self.recurrence_interval
        return _floor_div(t - n, zi) != _floor_div(t - ri - n, zi)

    def backprop(self, delta: jax.Array, zeroing: Any = None) -> jax.Array:
        """The input delta; `zeroing` (bool per row, shaped like delta's leading axes) marks boundary rows."""
        d = delta if self.scale == 1.0 else delta * self.scale
        clip = self.clipping_threshold if self.clipping_threshold > 0.0 else 1.0e10
        scales = _row_norm_scales(d, clip)
        if zeroing is not None:
            zero = self.zeroing_threshold if self.zeroing_threshold > 0.0 else 1.0e10
            norm_sq = jnp.sum(d * d, axis=-1, keepdims=True)
            kill = jnp.logical_and(jnp.asarray(zeroing)[..., None], norm_sq > zero * zero)
            scales = jnp.where(kill, 0.0, scales)
        return d * scales

    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        # Without row Indexes only the scaling and clipping apply; the engine, which knows
        # each row's (n, t), should call backprop(delta, zeroing_rows(n, t)) instead.
        return (self.backprop(delta),)
