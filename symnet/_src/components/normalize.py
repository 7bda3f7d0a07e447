"""NormalizeComponent and BatchNormComponent (Kaldi's nnet-normalize-component.cc).

BatchNorm's statistics (`<Count>`, `<StatsMean>`, `<StatsVar>`) are
non-trained state: FixedWeights named `{name}.count`, `{name}.stats_mean`,
`{name}.stats_var` in the Network's parameter mapping (so model files map
1:1). In test mode the forward pass uses them; in training mode it uses the
minibatch's statistics, and `batchnorm_stats_updates(tape)` returns the
accumulated statistics for the training loop to store (Kaldi's StoreStats).
Inside `statistics_across(axis)` (data-parallel training in `jax.shard_map`)
the minibatch statistics are summed over the devices of mesh axis `axis`:
every device normalises with, and stores, the whole minibatch's statistics.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.layer import Layer, child, layer_class
from ..core.precision import in_float32, wide
from .base import Component, SameDim

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
else:
    from ..core.lazyjax import jax, jnp

__all__ = [
    "batchnorm_stats_updates",
    "BatchNormComponent",
    "minibatch_sums",
    "NormalizeComponent",
    "SQUARED_NORM_FLOOR",
    "statistics_across",
]

#: Kaldi's floor on the squared norm (2^-66: its square root is exact in float).
SQUARED_NORM_FLOOR = 2.0**-66

_ACROSS: contextvars.ContextVar[str | None] = contextvars.ContextVar("batchnorm_across", default=None)


@contextlib.contextmanager
def statistics_across(axis: str | None) -> Iterator[None]:
    """Training-mode batch-norm traced inside takes its minibatch statistics over mesh axis `axis`
    (a `jax.shard_map` axis; None: this device's rows only)."""
    token = _ACROSS.set(axis)
    try:
        yield
    finally:
        _ACROSS.reset(token)


def minibatch_sums(flat: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | int]:
    """(sum, sum of squares, rows) of `flat [rows, dim]`, over all devices inside `statistics_across`."""
    sums: tuple[jax.Array, jax.Array, jax.Array | int] = (
        jnp.sum(flat, axis=0),
        jnp.sum(flat * flat, axis=0),
        flat.shape[0],
    )
    axis = _ACROSS.get()
    return sums if axis is None else jax.lax.psum(sums, axis)


@layer_class
class NormalizeComponent(Component):
    """Scale each row (each block of `block_dim` columns) to root-mean-square `target_rms`.

    Per block x of dimension D: `p = x.x / (D target_rms^2)`,
    `y = x / sqrt(max(p, 2^-66))`; with `add_log_stddev` one more column
    `log(target_rms) + log(sqrt(max(p, 2^-66)))` (the log of the block's
    stddev) follows each block.
    """

    input: Layer = child()
    in_dim: int = 0
    block_dim: int = 0
    target_rms: float = 1.0
    add_log_stddev: bool = False

    kaldi_type = "NormalizeComponent"

    @property
    def input_dim(self) -> int:
        return self.in_dim

    @property
    def output_dim(self) -> int:
        return self.in_dim + (self.in_dim // self.block_dim if self.add_log_stddev else 0)

    def _blocks(self, x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[:-1] + (self.in_dim // self.block_dim, self.block_dim))

    def _scale(self, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        d_scaled = self.block_dim * self.target_rms * self.target_rms
        p = jnp.sum(xs * xs, axis=-1, keepdims=True) / d_scaled
        return jnp.maximum(p, SQUARED_NORM_FLOOR), p

    @in_float32
    def apply(self, x: jax.Array) -> jax.Array:
        xs = self._blocks(x)
        floored, _ = self._scale(xs)
        f = jax.lax.rsqrt(floored)
        y = xs * f
        if self.add_log_stddev:
            log_stddev = jnp.log(self.target_rms) - jnp.log(f)
            y = jnp.concatenate([y, log_stddev], axis=-1)
        return y.reshape(x.shape[:-1] + (self.output_dim,))

    @in_float32
    def vjp(self, delta: jax.Array, value: jax.Array, x: jax.Array) -> tuple[jax.Array | None, ...]:
        # Kaldi's DiffNormalizePerRow: the exact derivative except where the floor is active.
        xs = self._blocks(x)
        nb, bd = self.in_dim // self.block_dim, self.block_dim
        ds = delta.reshape(delta.shape[:-1] + (nb, bd + (1 if self.add_log_stddev else 0)))
        d_y = ds[..., :bd]
        floored, p = self._scale(xs)
        f = jax.lax.rsqrt(floored)
        d_scaled = bd * self.target_rms * self.target_rms
        dot = jnp.sum(d_y * xs, axis=-1, keepdims=True)
        coeff = jnp.where(p > SQUARED_NORM_FLOOR, -(f**3) / d_scaled, 0.0)
        dx = f * d_y + coeff * dot * xs
        if self.add_log_stddev:
            ssq = jnp.sum(xs * xs, axis=-1, keepdims=True)
            dx = dx + ds[..., bd:] / jnp.maximum(ssq, bd * SQUARED_NORM_FLOOR) * xs
        return (dx.reshape(x.shape),)


@layer_class
class BatchNormComponent(SameDim, Component):
    """Batch normalisation per block of `block_dim` columns (blocks of a row count as extra rows).

    Test mode: `y = (x - stats_mean) * target_rms / sqrt(max(stats_var, 0) + epsilon)`.
    Training mode: the same with the mean and variance of this minibatch
    (over every row, i.e. every leading axis, and every block); the stored
    statistics are not used (see `batchnorm_stats_updates`).
    """

    input: Layer = child()
    stats_mean: Layer = child()
    stats_var: Layer = child()
    count: Layer = child()
    dim: int = 0
    block_dim: int = 0
    epsilon: float = 1.0e-3
    target_rms: float = 1.0
    test_mode: bool = False

    kaldi_type = "BatchNormComponent"
    param_fields = ("stats_mean", "stats_var", "count")

    @property
    def matrixwise(self) -> bool:
        return not self.test_mode

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"stats_mean": (self.block_dim,), "stats_var": (self.block_dim,), "count": ()}

    def missing_statistics(self, values: Mapping[str, Any]) -> bool:
        count = values.get(getattr(self.count, "name", None) or "")
        return bool(self.test_mode and count is not None and not isinstance(count, jax.core.Tracer) and count == 0)

    def _blocks(self, x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[:-1] + (self.dim // self.block_dim, self.block_dim))

    def test_scale_offset(self, mean: jax.Array, var: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Kaldi's ComputeDerived: `scale = target_rms (max(var, 0) + epsilon)^-1/2`, `offset = -mean scale`."""
        scale = self.target_rms * jax.lax.rsqrt(jnp.maximum(var, 0.0) + self.epsilon)
        return scale, -mean * scale

    def _train(self, x: jax.Array) -> jax.Array:
        return _training_mode(self.block_dim, self.target_rms, self.epsilon, _ACROSS.get())(x)

    @in_float32
    def apply(self, x: jax.Array, mean: jax.Array, var: jax.Array, count: jax.Array) -> jax.Array:
        if not self.test_mode:
            return self._train(x)
        scale, offset = self.test_scale_offset(mean, var)
        return (self._blocks(x) * scale + offset).reshape(x.shape)

    @in_float32
    def vjp(
        self, delta: jax.Array, value: jax.Array, x: jax.Array, mean: jax.Array, var: jax.Array, count: jax.Array
    ) -> tuple[jax.Array | None, ...]:
        if self.test_mode:
            scale, _ = self.test_scale_offset(mean, var)
            return (self._blocks(delta) * scale).reshape(x.shape), None, None, None
        _, pullback = jax.vjp(self._train, x)
        return pullback(delta)[0], None, None, None

    def accumulate_stats(
        self, x: jax.Array, count: jax.Array, mean: jax.Array, var: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Kaldi's StoreStats, in mean/variance form: the statistics after adding minibatch `x`."""
        x = x.astype(wide(x.dtype))  # summed in float32 at least (symnet._src.core.precision)
        batch_sum, batch_sumsq, n = minibatch_sums(self._blocks(x).reshape(-1, self.block_dim))
        new_count = count + n
        stats_sum = count * mean + batch_sum
        stats_sumsq = count * (var + mean * mean) + batch_sumsq
        new_mean = stats_sum / new_count
        new_var = stats_sumsq / new_count - new_mean * new_mean
        return new_count, new_mean, new_var


@functools.cache
def _training_mode(block_dim: int, target_rms: float, epsilon: float, axis: str | None) -> Any:
    """Training-mode batch-norm of `x` (blocks of `block_dim` columns; statistics over mesh axis `axis` too),
    with its exact derivative written out: with `y = (x - mean) s`, `s = (c var + c epsilon)^-1/2`,
    `c = target_rms^-2`, `dx = s (g - mean(g) - c y mean(g y))` (the variance's term vanishes where Kaldi
    floors it at 0). The same derivative as JAX's transpose of the forward pass, in fewer kernels: the
    digits recipe's chain step takes about a tenth less time (docs/training.md)."""
    c = 1.0 / (target_rms * target_rms)

    def forward(x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        flat = x.reshape(-1, block_dim)
        total, squares, n = minibatch_sums(flat)
        mean = total / n
        scaled_var = jnp.maximum(c * (squares / n) - c * mean * mean, 0.0)
        scale = jax.lax.rsqrt(scaled_var + c * epsilon)
        y = (flat - mean) * scale
        return y.reshape(x.shape), (y, scale, jnp.asarray(n, flat.dtype), scaled_var > 0.0)

    @jax.custom_vjp
    def normalise(x: jax.Array) -> jax.Array:
        return forward(x)[0]

    def backward(res: tuple[jax.Array, ...], g: jax.Array) -> tuple[jax.Array]:
        y, scale, n, live = res
        flat = g.reshape(-1, block_dim)
        sums = (jnp.sum(flat, axis=0), jnp.sum(flat * y, axis=0))
        g_sum, gy_sum = sums if axis is None else jax.lax.psum(sums, axis)
        dx = scale * (flat - g_sum / n - jnp.where(live, c * y * (gy_sum / n), 0.0))
        return (dx.reshape(g.shape),)

    normalise.defvjp(forward, backward)
    return normalise


def batchnorm_stats_updates(tape: Any, state: Mapping[str, jax.Array] | None = None) -> dict[str, jax.Array]:
    """New values of the statistics of every training-mode BatchNormComponent the tape ran.

    Returns parameter name -> array (`{name}.count`, `{name}.stats_mean`,
    `{name}.stats_var`), to merge into the Network's parameters after a
    training step. A component run several times (shared, or over several
    chunks) accumulates every run. `state` (the network's) gives the stored
    statistics as kept, where the tape holds them cast by a precision policy;
    the new values have their dtypes.
    """
    state = state or {}
    current: dict[str, jax.Array] = {}
    for node in tape.nodes():
        layer = node.layer
        if not isinstance(layer, BatchNormComponent) or layer.test_mode or len(node.upstream) != 4:
            continue
        names = [getattr(layer, f).name for f in ("count", "stats_mean", "stats_var")]
        if any(n is None for n in names):
            continue
        x, mean, var, count = (u.value for u in node.upstream)
        # The stored statistics as kept (`state`), not as a precision policy cast them for the call.
        count = current.get(names[0], state.get(names[0], count))
        mean = current.get(names[1], state.get(names[1], mean))
        var = current.get(names[2], state.get(names[2], var))
        new = layer.accumulate_stats(x, count, mean, var)
        current.update((n, v.astype(old.dtype)) for n, v, old in zip(names, new, (count, mean, var), strict=True))
    return current
