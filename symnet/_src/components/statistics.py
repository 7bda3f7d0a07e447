"""Kaldi's statistics components (nnet-general-component.cc): the pooling behind x-vectors.

`StatisticsExtractionComponent` turns frames into sufficient statistics over
blocks of `output-period` frames; `StatisticsPoolingComponent` sums those
statistics over a window of frames and normalises them into means (and
standard deviations). Both read other frames than their own, with Kaldi's
rules for which frames and when an output is computable, so each is a macro
layer whose expansion is an `IndexedLayer` (`_StatisticsExtraction`,
`_StatisticsPooling`): the engine plans which rows they read and gathers them.

Extraction, output Index `(n, t, x)`: with `p = output_period`,
`s = floor(t / p) * p` (floor also for negative t), it reads the input at
`(n, s + k * input_period, x)` for `0 <= k < p / input_period`, and is
computable when *any* of those is. Its row is

    [count, sum of x, sum of x^2]      (the x^2 block only with include-variance)

over the input rows that are computable (count = how many).

Pooling, output `(n, t, x)`: only `t` that are multiples of `input_period`
are computable; it reads the input at `(n, t + o, x)` for
`o = -left_context, ..., right_context` in steps of `input_period`, and is
computable when any of those is. With `c` the sum of the count column of the
rows read and `S` the sum of the other columns, the row is

    [log(c) x num_log_count_features, S / c]

and with output-stddevs the second half of `S / c` (the mean of x^2) is
replaced by `sqrt(max(E[x^2] - E[x]^2, variance_floor))`.

Gradients are JAX's, shaped to be Kaldi's backprop: the count is a constant
(Kaldi does not propagate into the count column, nor through the log-count
features), and the variance floor passes the gradient straight through (Kaldi
ignores the floor in its backprop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..base.errors import ShapeError, at
from ..core.descriptor import IndexedLayer
from ..core.index import decode, encode
from ..core.layer import Layer, child, layer_class
from ..core.precision import in_float32
from .base import Component

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = ["StatisticsExtractionComponent", "StatisticsPoolingComponent"]


def _segment_sum(values: jnp.ndarray, owner: np.ndarray, num_rows: int) -> jnp.ndarray:
    return jax.ops.segment_sum(
        values, jnp.asarray(owner), num_segments=num_rows, indices_are_sorted=bool(np.all(np.diff(owner) >= 0))
    )


def _any_per_row(available: np.ndarray, owner: np.ndarray, num_rows: int) -> np.ndarray:
    return np.bincount(owner, weights=available, minlength=num_rows) > 0


def _check_dim(layer: Layer, values: jnp.ndarray, want: int) -> None:
    if values.shape[-1] != want:
        raise ShapeError(f"{type(layer).__name__}: input dim is {values.shape[-1]}, expected {want}{at(layer.where)}")


# ----- the Index-level layers ------------------------------------------------------------------


@layer_class
class _StatisticsExtraction(IndexedLayer):
    """The Index rules and arithmetic of StatisticsExtractionComponent (see the module doc)."""

    input: Layer = child()
    input_dim: int = 1
    input_period: int = 1
    output_period: int = 1
    include_variance: bool = True

    def requirements(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, t, x = decode(keys)
        start = (t // self.output_period) * self.output_period
        k = np.arange(0, self.output_period, self.input_period)
        tt = (start[:, None] + k[None, :]).ravel()
        owner = np.repeat(np.arange(len(keys)), len(k))
        return encode(n[owner], tt, x[owner]), owner

    def computable_from(self, available: np.ndarray, owner: np.ndarray, num_rows: int) -> np.ndarray:
        return _any_per_row(available, owner, num_rows)

    def reach(self) -> int:
        return self.output_period

    @in_float32
    def apply_rows(self, values: jax.Array, owner: np.ndarray, num_rows: int, *weights: jax.Array) -> jax.Array:
        _check_dim(self, values, self.input_dim)
        counts = np.bincount(owner, minlength=num_rows).astype(np.float64)
        count_col = jnp.broadcast_to(jnp.asarray(counts, values.dtype)[:, None, None], (num_rows, values.shape[1], 1))
        parts = [count_col, _segment_sum(values, owner, num_rows)]
        if self.include_variance:
            parts.append(_segment_sum(values * values, owner, num_rows))
        return jnp.concatenate(parts, axis=-1)


@layer_class
class _StatisticsPooling(IndexedLayer):
    """The Index rules and arithmetic of StatisticsPoolingComponent (see the module doc)."""

    input: Layer = child()
    input_dim: int = 2
    input_period: int = 1
    left_context: int = 0
    right_context: int = 1
    num_log_count_features: int = 0
    output_stddevs: bool = False
    variance_floor: float = 1.0e-10

    def requirements(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, t, x = decode(keys)
        rows = np.flatnonzero(t % self.input_period == 0)  # other frames read nothing: never computable
        o = np.arange(-self.left_context, self.right_context + 1, self.input_period)
        owner = np.repeat(rows, len(o))
        tt = (t[rows][:, None] + o[None, :]).ravel()
        return encode(n[owner], tt, x[owner]), owner

    def computable_from(self, available: np.ndarray, owner: np.ndarray, num_rows: int) -> np.ndarray:
        return _any_per_row(available, owner, num_rows)

    def reach(self) -> int:
        return max(self.left_context, self.right_context)

    @in_float32
    def apply_rows(self, values: jax.Array, owner: np.ndarray, num_rows: int, *weights: jax.Array) -> jax.Array:
        _check_dim(self, values, self.input_dim)
        sums = _segment_sum(values, owner, num_rows)
        # Kaldi's backprop treats the count as a constant (no derivative into the count column).
        counts = jax.lax.stop_gradient(sums[..., :1])
        stats = sums[..., 1:] / counts
        if self.output_stddevs:
            d = (self.input_dim - 1) // 2
            mean, mean_sq = stats[..., :d], stats[..., d:]
            var = mean_sq - mean * mean
            # The floor as Kaldi's backprop sees it: the value is floored, the derivative is not.
            var = var + jax.lax.stop_gradient(jnp.maximum(var, self.variance_floor) - var)
            stats = jnp.concatenate([mean, jnp.sqrt(var)], axis=-1)
        if self.num_log_count_features:
            log_counts = jnp.broadcast_to(jnp.log(counts), counts.shape[:-1] + (self.num_log_count_features,))
            stats = jnp.concatenate([log_counts, stats], axis=-1)
        return stats


# ----- the components ------------------------------------------------------------------------


@layer_class
class StatisticsExtractionComponent(Component):
    """Per block of `output_period` frames: `[count, sum x, sum x^2]` of the computable input frames.

    A macro layer: the engine plans `expand()`, an IndexedLayer with Kaldi's
    GetInputIndexes / IsComputable rules.
    """

    input: Layer = child()
    in_dim: int = 1
    input_period: int = 1
    output_period: int = 1
    include_variance: bool = True

    kaldi_type: ClassVar[str] = "StatisticsExtractionComponent"
    rowwise: ClassVar[bool] = False

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return 1 + self.in_dim * (2 if self.include_variance else 1)

    def expand(self) -> Layer:
        return _StatisticsExtraction(
            self.input, self.in_dim, self.input_period, self.output_period, self.include_variance, where=self.where
        )


@layer_class
class StatisticsPoolingComponent(Component):
    """Means (and standard deviations) of extracted statistics over a window of frames.

    A macro layer: the engine plans `expand()`, an IndexedLayer with Kaldi's
    GetInputIndexes / IsComputable rules.
    """

    input: Layer = child()
    in_dim: int = 2
    input_period: int = 1
    left_context: int = 0
    right_context: int = 1
    num_log_count_features: int = 0
    output_stddevs: bool = False
    variance_floor: float = 1.0e-10

    kaldi_type: ClassVar[str] = "StatisticsPoolingComponent"
    rowwise: ClassVar[bool] = False

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return self.in_dim + self.num_log_count_features - 1

    def expand(self) -> Layer:
        return _StatisticsPooling(
            self.input,
            self.in_dim,
            self.input_period,
            self.left_context,
            self.right_context,
            self.num_log_count_features,
            self.output_stddevs,
            self.variance_floor,
            where=self.where,
        )
