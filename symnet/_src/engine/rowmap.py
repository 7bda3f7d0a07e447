"""Row movements lowered to the cheapest JAX ops: slices, concatenations, zero blocks, gathers.

A `RowMap` says, for each destination row, which source row it copies (or -1
for a row of zeros). Built in numpy at plan time, it picks its lowering once:
the identity, one slice, a few slices and zero blocks concatenated, or (only for
truly irregular lists) one gather. Its transpose, for backward, is JAX's own
(a slice transposes to a pad, a gather to a scatter-add).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MAX_PIECES", "RowMap"]

MAX_PIECES = 8  # more contiguous pieces than this: one gather is cheaper to compile and run


class RowMap:
    """Copy rows `src[i]` (or zeros where `src[i] == -1`) of a `[rows, batch, dim]` value."""

    __slots__ = ("src", "num_src", "pieces", "kind")

    def __init__(self, src: np.ndarray, num_src: int):
        src = np.asarray(src, dtype=np.int64)
        self.src = src
        self.num_src = num_src
        self.pieces = _pieces(src)
        if len(self.pieces) == 1 and self.pieces[0] == ("slice", 0, num_src) and len(src) == num_src:
            self.kind = "identity"
        elif len(self.pieces) <= MAX_PIECES:
            self.kind = "pieces"
        else:
            self.kind = "gather"

    @property
    def is_identity(self) -> bool:
        return self.kind == "identity"

    def __call__(self, value: jax.Array) -> jax.Array:
        """`value` is `[num_src, batch, dim]`; the result is `[len(src), batch, dim]`."""
        if self.kind == "identity":
            return value
        if self.kind == "pieces":
            parts = []
            for kind, start, length in self.pieces:
                if kind == "slice":
                    parts.append(jax.lax.slice_in_dim(value, start, start + length, axis=0))
                else:
                    parts.append(jnp.zeros((length,) + value.shape[1:], value.dtype))
            return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)
        valid = self.src >= 0
        if valid.all():
            idx = self.src
            sorted_ = bool(np.all(np.diff(idx) >= 0))
            unique = len(np.unique(idx)) == len(idx)
            return value.at[jnp.asarray(idx, jnp.int32)].get(
                indices_are_sorted=sorted_, unique_indices=unique, mode="promise_in_bounds"
            )
        padded = jnp.concatenate([value, jnp.zeros((1,) + value.shape[1:], value.dtype)], axis=0)
        idx = np.where(valid, self.src, self.num_src)
        return padded.at[jnp.asarray(idx, jnp.int32)].get(mode="promise_in_bounds")


def _pieces(src: np.ndarray) -> list[tuple[str, int, int]]:
    """Split `src` into runs of consecutive source rows and runs of zeros."""
    if not len(src):
        return [("zeros", 0, 0)]
    pieces: list[tuple[str, int, int]] = []
    # A new run starts where the row is not the continuation of the previous one.
    zero = src < 0
    cont = np.zeros(len(src), dtype=bool)
    cont[1:] = (zero[1:] & zero[:-1]) | (~zero[1:] & ~zero[:-1] & (src[1:] == src[:-1] + 1))
    starts = np.flatnonzero(~cont)
    if len(starts) > MAX_PIECES:
        return [("slice", 0, 0)] * (MAX_PIECES + 1)  # too many: the caller gathers
    ends = np.append(starts[1:], len(src))
    for s, e in zip(starts, ends):
        if zero[s]:
            pieces.append(("zeros", 0, int(e - s)))
        else:
            pieces.append(("slice", int(src[s]), int(e - s)))
    return pieces
