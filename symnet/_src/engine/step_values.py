"""How a planned step's values are made: row labels, row movements as Tape nodes, descriptor values.

The pieces of `Computation` (engine/computation.py) that depend on nothing of
it: a value's row labels (`Rows`, `IndexedRows`), whether a layer may run on
`[T, N, D]` operands (`leading_axes_safe`), a descriptor node's value from its
operands (`descriptor_fn`), the Tape nodes that select, cast or reshape a
value, and the context a call's program runs in (`call_contexts`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError, ShapeError, at
from ..core import rng
from ..core.arithmetic import Divide, Dot, Minus, Negate, Plus, Times
from ..core.descriptor import Combine
from ..core.elementwise import Exp, Log, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from ..core.index import IndexSet, decode, encode
from ..core.layer import Layer
from ..core.tape import Tape
from .layout import as_frames, as_layout, moved
from .rowmap import RowMap
from .semantics import combine
from .values_only import linearized

__all__ = [
    "call_contexts",
    "cast_tape",
    "chained_pullback",
    "compute_dtype",
    "descriptor_fn",
    "first_cotangent",
    "IndexedRows",
    "leading_axes_safe",
    "reshaped_tape",
    "Rows",
    "same",
    "selection_tape",
]


class Rows:
    """The row labels of an indexed value: `keys` (one sequence's rows) times `batch` sequences.

    In a regular plan a value is `[len(keys) * batch, dim]`, row `r * batch + n`
    being Index `(n, t_r, x_r)`; in an irregular plan `batch` is 1 and the keys
    carry n.
    """

    __slots__ = ("keys", "batch", "regular")

    def __init__(self, keys: np.ndarray, batch: int, regular: bool):
        self.keys, self.batch, self.regular = keys, batch, regular

    def __len__(self) -> int:
        return len(self.keys) * self.batch

    def index_set(self) -> IndexSet:
        """The Indexes of the value's rows, in row order."""
        if not self.regular:
            return IndexSet(self.keys)
        _, t, x = decode(self.keys)
        n = np.tile(np.arange(self.batch), len(t))
        return IndexSet(encode(n, np.repeat(t, self.batch), np.repeat(x, self.batch)))

    def __repr__(self) -> str:
        return repr(self.index_set())


class IndexedRows(RowMap):
    """The input rows an IndexedLayer reads (a gather), and the output row each belongs to."""

    __slots__ = ("owner", "num_rows")

    def __init__(self, src: np.ndarray, num_src: int, owner: np.ndarray, num_rows: int):
        super().__init__(src, num_src)
        self.owner, self.num_rows = owner, num_rows


_ELEMENTWISE: frozenset[type] = frozenset({Plus, Minus, Times, Divide, Negate, Exp, Log, Tanh, Sigmoid, ReLU})
_LAST_AXIS: frozenset[type] = frozenset({Softmax, LogSoftmax})


def leading_axes_safe(layer: Layer, values: Sequence[jax.Array], maps: Sequence[RowMap | None]) -> bool:
    """Whether the row-wise `layer` gives the same rows on `[T, N, D]` operands as on `[T * N, D]` ones.

    True for the core arithmetic and nonlinearities (exact types: a subclass may
    assume matrices) whose unindexed operands broadcast over rows (at most 1-D),
    and for `indexed @ matrix`. Other layers get flat rows.
    """
    kind = type(layer)
    if kind is Dot:
        return maps[0] is not None and maps[1] is None and values[1].ndim == 2
    if kind in _ELEMENTWISE or kind in _LAST_AXIS:
        return all(m is not None or jnp.ndim(v) <= 1 for v, m in zip(values, maps))
    return False


def chained_pullback(
    apply_vjp: Callable[..., tuple[jax.Array, ...]], transposes: Sequence[Callable[..., Any] | None]
) -> Callable[[jax.Array], tuple[jax.Array | None, ...]]:
    """The pullback of a layer applied to moved rows: its vjp, then each row movement's transpose."""

    def pullback(d: jax.Array) -> tuple[jax.Array | None, ...]:
        return tuple(dd if t is None else t(dd)[0] for dd, t in zip(apply_vjp(d), transposes))

    return pullback


def descriptor_fn(
    layer: Layer,
    maps: tuple[RowMap | None, ...],
    batch: int,
    batched: bool,
    uses: tuple[jax.Array | None, ...] = (),
) -> Callable[..., jax.Array]:
    """The value of a descriptor node from its operands' values (linear in them).

    `uses[i]` (`[rows, batch]` booleans, or None) masks operand i per row and sequence (sequence ends).
    """

    def take(i: int, v: jax.Array) -> jax.Array:
        rowmap = maps[i]
        assert rowmap is not None  # parts no row reads are left out before this
        out = rowmap(as_frames(v, batch))  # [rows, batch, dim]
        use = uses[i] if i < len(uses) else None
        if use is not None:
            out = jnp.where(use[:, :, None], out, jnp.zeros_like(out))
        return as_layout(out, batch, batched)

    how = combine(layer)
    if how is Combine.APPEND:
        return lambda *vs: jnp.concatenate([take(i, v) for i, v in enumerate(vs)], axis=-1)
    if how is Combine.SUM:

        def total(*vs: jax.Array) -> jax.Array:
            terms = [take(i, v) for i, v in enumerate(vs) if maps[i] is not None]
            out = terms[0]
            for t in terms[1:]:
                if t.shape != out.shape:
                    raise ShapeError(
                        f"{type(layer).__name__}: parts of dims {out.shape[-1]} and {t.shape[-1]}{at(layer.where)}"
                    )
                out = out + t
            return out

        return total
    if how is Combine.FORWARD:
        return lambda v: take(0, v)
    raise PlanError(f"cannot lower {type(layer).__name__}{at(layer.where)}")


def selection_tape(tape: Tape, rowmap: RowMap, batch: int, rows: IndexSet, batched: bool) -> Tape:
    """A tape node picking the requested rows, in the request's order, from an output node."""
    value, vjp = linearized(lambda v: moved(rowmap, v, batch, batched), tape.value)
    return Tape(tape.layer, value, (tape,), rows=rows, pullback=vjp, parameters=tape.parameters)


def cast_tape(tape: Tape, dtype: Any) -> Tape:
    """A tape node showing `tape`'s value cast to `dtype` (a policy's output); its delta is cast back."""
    back = tape.value.dtype
    pullback = lambda d: (d.astype(back),)  # noqa: E731
    value = tape.value.astype(dtype)
    return Tape(tape.layer, value, (tape,), rows=tape.rows, pullback=pullback, parameters=tape.parameters)


def same(value: jax.Array) -> jax.Array:
    return value


def compute_dtype(*trees: Mapping[str, jax.Array]) -> Any:
    """The dtype of the constants a call makes: JAX's promotion of its floating arrays (float without any)."""
    floats = [v.dtype for tree in trees for v in tree.values() if jnp.issubdtype(v.dtype, jnp.floating)]
    return jnp.result_type(*floats) if floats else jnp.result_type(float)


def reshaped_tape(tape: Tape, value: jax.Array) -> Tape:
    """A tape node showing `tape`'s value reshaped (flat rows as `[T, N, D]` or back); its delta is reshaped back."""
    shape = tape.value.shape
    pullback = lambda d: (d.reshape(shape),)  # noqa: E731
    return Tape(tape.layer, value, (tape,), rows=tape.rows, pullback=pullback, parameters=tape.parameters)


def first_cotangent(vjp: Callable[[jax.Array], tuple[jax.Array, ...]]) -> Callable[[jax.Array], jax.Array]:
    """The one cotangent of a one-argument `jax.vjp` pullback."""
    return lambda d: vjp(d)[0]


def call_contexts(key: jax.Array | None, proportions: Mapping[str, jax.Array] | None) -> contextlib.ExitStack:
    """The context a call's program runs in: its dropout key and proportions (`symnet.rng`)."""
    stack = contextlib.ExitStack()
    if key is not None:
        stack.enter_context(rng.randomness(key))
    if proportions:
        stack.enter_context(rng.dropout_proportions(proportions))
    return stack
