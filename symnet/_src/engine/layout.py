"""The two layouts of a regular request's values: flat rows `[T * N, D]` and `[T, N, D]`.

Flat rows are in (t, n) order (frame-major, `N` sequences per frame), so the
two layouts are reshapes of each other. The computation keeps values
`[T, N, D]` in a batched call where it can; scans and most layers take flat rows.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

__all__ = ["as_flat_rows", "as_frames", "as_layout", "moved"]


def as_frames(value: jax.Array, batch: int) -> jax.Array:
    """`value` as `[T, N, D]` (`N = batch`); a value already 3-D is returned as is."""
    return value if value.ndim == 3 else value.reshape(value.shape[0] // batch, batch, value.shape[-1])


def as_flat_rows(value: jax.Array) -> jax.Array:
    """`value` as `[T * N, D]`, rows in (t, n) order; a value already 2-D is returned as is."""
    return value if value.ndim == 2 else value.reshape(value.shape[0] * value.shape[1], value.shape[2])


def as_layout(value: jax.Array, batch: int, batched: bool) -> jax.Array:
    """`value` as `[T, N, D]` in a batched call, as flat rows otherwise."""
    return as_frames(value, batch) if batched else as_flat_rows(value)


def moved(rows: Callable[[jax.Array], jax.Array], value: jax.Array, batch: int, batched: bool) -> jax.Array:
    """`value`'s rows moved by `rows` (a RowMap, which takes and gives `[T, N, D]`), in the layout asked for."""
    return as_layout(rows(as_frames(value, batch)), batch, batched)
