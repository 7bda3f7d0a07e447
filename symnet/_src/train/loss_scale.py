"""Dynamic loss scaling for float16 training: the scale is part of the optimiser state `fit` keeps.

float16's smallest normal number is 6e-5: small gradients of a float16
backward pass flush to zero. `fit` with a policy whose `loss_scale` is set
(`Precision(compute="float16")`'s preset) multiplies the objective's
derivative by the scale before the backward walk and divides the gradients
by it after. A step whose gradients are not all finite (the scaled backward
overflowed) changes no parameter, state or optimiser state, and halves the
scale; `growth_interval` finite steps in a row double it. The state is a
`LossScaled` (the optimiser's state, the scale, the finite steps in a row):
`fit`'s checkpoints save and resume it with the rest of the optimiser state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..core.precision import Precision

__all__ = ["advanced", "all_finite", "choose", "init", "inner", "LossScaled"]


class LossScaled(NamedTuple):
    """The optimiser state of a loss-scaled run: the optimiser's own `inner`, the `scale`, `good_steps` in a row."""

    inner: Any
    scale: jax.Array
    good_steps: jax.Array


def init(inner: Any, precision: Precision) -> LossScaled:
    """The state of a run's first step: the policy's initial scale, no good steps yet."""
    assert precision.loss_scale is not None
    return LossScaled(inner, jnp.asarray(precision.loss_scale, jnp.float32), jnp.zeros((), jnp.int32))


def inner(opt_state: Any) -> Any:
    """The optimiser's own state (`opt_state` itself without loss scaling)."""
    return opt_state.inner if isinstance(opt_state, LossScaled) else opt_state


def all_finite(tree: Any) -> jax.Array:
    """Whether every value of every array of `tree` is finite (a boolean scalar)."""
    leaves = [jnp.isfinite(leaf).all() for leaf in jax.tree.leaves(tree)]
    return jnp.stack(leaves).all() if leaves else jnp.asarray(True)


def choose(finite: jax.Array, new: Any, old: Any) -> Any:
    """`new` where `finite`, else `old` (a skipped step), leaf by leaf."""
    return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)


def advanced(state: LossScaled, new_inner: Any, finite: jax.Array, growth_interval: int) -> LossScaled:
    """The state after a step: `new_inner` and a grown scale if `finite`, the old inner and half the scale if not."""
    good = jnp.where(finite, state.good_steps + 1, 0)
    grow = good >= growth_interval
    scale = jnp.where(finite, jnp.where(grow, state.scale * 2.0, state.scale), state.scale * 0.5)
    return LossScaled(choose(finite, new_inner, state.inner), scale, jnp.where(grow, 0, good).astype(jnp.int32))
