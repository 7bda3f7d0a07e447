"""A value computed once, into a buffer of its own, where XLA's CPU backend would recompute or copy it.

XLA's CPU fuser copies a cheap elementwise producer into every consumer,
transposes included, where it can run several times slower than a transpose
of a buffer (a spliced product's source, engine/splice.py); and a loop that
writes a frame into a buffer it also reads must order every read of the
frame before the write, or XLA copies the whole buffer every frame
(engine/fused_scan.py). `lax.optimization_barrier` helps with neither: the
CPU backend drops it before fusing.
"""

from __future__ import annotations

import jax

__all__ = ["materialized"]


def materialized(value: jax.Array, key: jax.Array) -> jax.Array:
    """`value`, computed once into a buffer of its own on CPU (elsewhere: `value` as it is).

    A conditional is a boundary XLA does not fuse across: on CPU the value goes through one whose branches
    both return it (one as `value * 1`, so that JAX does not forward the value around it), on a predicate
    read from `key` that XLA cannot fold: the value itself, or an array computed before it, such as a
    product's matrix (a constant `key` folds it: no boundary)."""
    if key.size == 0:
        return value

    def on_cpu(v: jax.Array, k: jax.Array) -> jax.Array:
        first = k.reshape(-1)[0]
        kept: jax.Array = jax.lax.cond(first == first, lambda u: u, lambda u: u * 1, v)
        return kept

    out: jax.Array = jax.lax.platform_dependent(value, key, cpu=on_cpu, default=lambda v, k: v)
    return out
