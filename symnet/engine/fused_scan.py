"""A recurrence's scan with a hand-written backward pass (a custom VJP of the whole scan).

Left to `jax.vjp`, the backward of a `lax.scan` is JAX's transpose of it: it
saves what partial evaluation keeps and accumulates each weight's gradient
inside the loop, one small `[dim, batch] x [batch, dim]` product per frame.
Here instead:

- the forward scan computes the frames as `FrameProgram.values` does (gate
  activations fused) and saves, per frame, only the members' values that the
  backward reads;
- the backward is one reverse scan carrying the deltas of the lagged members;
  each frame pulls its deltas through the members' `vjp`s (`FrameProgram.member_vjp`);
- the weight of every `Dot(member, weight)` gets its gradient after the loop,
  from the frames' saved operands and the deltas the loop emits: one large
  matrix product.

The values equal the plain scan's (the fused activations to float rounding) and
so do the gradients; tests compare both against `jax.grad`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import DimRange
from .frame import FrameProgram, Needs

UNROLL = 1  # frames per loop iteration (measured on CPU: see docs/performance.md)

Read = Callable[[Any, Mapping[int, jax.Array]], jax.Array]


def shifted(values: jax.Array, k: int, init: jax.Array, reverse: bool) -> jax.Array:
    """Per frame (in `values`' order), the value `k` frames earlier in scan order; `init` before the first."""
    steps = values.shape[0]
    if not reverse:  # init[j] is frame -1 - j
        return jnp.concatenate([init[:k][::-1], values], axis=0)[:steps]
    return jnp.concatenate([values, init[:k]], axis=0)[k : k + steps]  # init[j] is frame steps + j


def _reader(
    statics: Mapping[int, jax.Array],
    ext: Mapping[int, jax.Array],
    lagged: Callable[[int, int], jax.Array],
    masked: Callable[[jax.Array, int], jax.Array],
) -> Read:
    """`read(edge, values)`: an operand's value from statics, externals, members at this frame or lagged ones."""

    def read(e: Any, vals: Mapping[int, jax.Array]) -> jax.Array:
        if e.kind == "static":
            return statics[e.op]
        if e.kind == "external":
            return ext[e.slot]
        v = vals[e.op] if e.kind == "same" else lagged(e.op, abs(e.lag))
        return v if e.slot < 0 else masked(v, e.slot)

    return read


def _frame_mask(mask: jax.Array) -> Callable[[jax.Array, int], jax.Array]:
    return lambda v, slot: jnp.where(mask[slot], v, jnp.zeros_like(v))


def _all_frames_mask(masks: jax.Array) -> Callable[[jax.Array, int], jax.Array]:
    return lambda v, slot: jnp.where(masks[:, slot, None, None], v, jnp.zeros_like(v))


class _Delta:
    """A member's delta at one frame, summed from whole arrays and column pieces (from its DimRanges).

    Pieces that do not overlap are put side by side (one concatenation, zeros
    between); XLA's CPU backend runs a sum of padded pieces as a slow loop.
    """

    __slots__ = ("whole", "pieces")

    def __init__(self) -> None:
        self.whole: jax.Array | None = None
        self.pieces: list[tuple[int, jax.Array]] = []

    def add(self, d: jax.Array) -> None:
        self.whole = d if self.whole is None else self.whole + d

    def total(self, width: int) -> jax.Array | None:
        if not self.pieces:
            return self.whole
        pieces = sorted(self.pieces, key=lambda p: p[0])
        ends = [start + p.shape[-1] for start, p in pieces]
        if all(end <= nxt for end, (nxt, _) in zip(ends, pieces[1:])):
            parts, at_col = [], 0
            for (start, p), end in zip(pieces, ends):
                if start > at_col:
                    parts.append(jnp.zeros(p.shape[:-1] + (start - at_col,), p.dtype))
                parts.append(p)
                at_col = end
            if at_col < width:
                parts.append(jnp.zeros(pieces[0][1].shape[:-1] + (width - at_col,), pieces[0][1].dtype))
            summed = jnp.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
        else:
            pad = [(0, 0)] * (pieces[0][1].ndim - 1)
            summed = sum(jnp.pad(p, pad + [(start, width - end)]) for (start, p), end in zip(pieces, ends))
        return summed if self.whole is None else self.whole + summed


def _add(a: jax.Array | None, b: jax.Array | None) -> jax.Array | None:
    if a is None:
        return b
    return a if b is None else a + b


def fused_scan(
    program: FrameProgram,
    xs_ext: tuple[jax.Array, ...],
    statics: Mapping[int, jax.Array],
    carry0: Mapping[int, jax.Array],
    masks: np.ndarray,
    *,
    reverse: bool,
    dims: Mapping[int, int],
    dtype: Any,
    unroll: int | None = None,
) -> tuple[jax.Array, ...]:
    """The exported members' values at every frame (`[steps, batch, dim]` each), differentiable.

    `xs_ext` are the external operands per frame, `carry0` each lagged member's
    buffer before the first frame (`[depth, batch, dim]`, most recent first),
    `masks` the per-frame masks of masked edges.
    """
    batch, order, edges = program.batch, program.order, program.edges
    exported = program.exported
    unroll = UNROLL if unroll is None else unroll
    shapes = {m: (batch, dims[m]) for m in order}
    ext_shapes = [tuple(x.shape[1:]) for x in xs_ext]
    static_specs = {op: jax.ShapeDtypeStruct(v.shape, v.dtype) for op, v in statics.items()}
    reads = program.vjp_reads(shapes, static_specs, ext_shapes, dtype)
    loop = program.needs(program.read_roots(edges, reads))
    after = program.needs([("edge", edges[m][0]) for m in program.deferred])
    outs = exported + sorted((loop.stored | after.stored) - set(exported))
    mask_array = jnp.asarray(masks)

    def forward(
        xs_ext: tuple[jax.Array, ...],
        statics: Mapping[int, jax.Array],
        carry0: Mapping[int, jax.Array],
        names: Sequence[int],
    ) -> tuple[jax.Array, ...]:
        def step(carry: dict[int, jax.Array], xs: tuple) -> tuple[dict[int, jax.Array], tuple[jax.Array, ...]]:
            ext, mask = xs
            read = _reader(statics, dict(enumerate(ext)), lambda op, k: carry[op][k - 1], _frame_mask(mask))
            vals = program.values(read, dims, dtype)
            new = {op: jnp.concatenate([vals[op][None], buf[:-1]], axis=0) for op, buf in carry.items()}
            return new, tuple(vals[m] for m in names)

        return jax.lax.scan(step, dict(carry0), (xs_ext, mask_array), reverse=reverse, unroll=unroll)[1]

    @jax.custom_vjp
    def run(
        xs_ext: tuple[jax.Array, ...], statics: Mapping[int, jax.Array], carry0: Mapping[int, jax.Array]
    ) -> tuple[jax.Array, ...]:
        return forward(xs_ext, statics, carry0, exported)

    def run_fwd(
        xs_ext: tuple[jax.Array, ...], statics: Mapping[int, jax.Array], carry0: Mapping[int, jax.Array]
    ) -> tuple[tuple[jax.Array, ...], tuple]:
        ys = forward(xs_ext, statics, carry0, outs)
        return ys[: len(exported)], (xs_ext, statics, carry0, ys)

    def run_bwd(res: tuple, dys: tuple[jax.Array, ...]) -> tuple:
        xs_ext, statics, carry0, ys = res
        saved = dict(zip(outs, ys))
        lagged = {(op, k): shifted(saved[op], k, carry0[op], reverse) for op, k in loop.lags | after.lags}
        d_ext, d_statics, d_carry, d_dots = _backward(
            program, loop, reads, shapes, dims, statics, dys, saved, lagged, xs_ext, mask_array, reverse, dtype, unroll
        )
        # The deferred weight gradients: all frames' operands against all frames' deltas.
        read = _reader(statics, dict(enumerate(xs_ext)), lambda op, k: lagged[(op, k)], _all_frames_mask(mask_array))
        vals = program.resolve(
            after, read, {m: saved[m] for m in after.stored}, (mask_array.shape[0], batch), dims, dtype
        )
        for m, d in zip(program.deferred, d_dots):
            a = read(edges[m][0], vals)
            weight = edges[m][1].op
            d_statics[weight] = _add(d_statics.get(weight), jnp.tensordot(a, d, axes=((0, 1), (0, 1))))
        d_statics_out = {}
        for op, v in statics.items():
            g = d_statics.get(op)
            if not jnp.issubdtype(v.dtype, jnp.inexact):
                d_statics_out[op] = np.zeros(v.shape, dtype=jax.dtypes.float0)
            else:
                d_statics_out[op] = jnp.zeros_like(v) if g is None else g.astype(v.dtype)
        d_ext_out = tuple(jnp.zeros_like(x) if g is None else g.astype(x.dtype) for x, g in zip(xs_ext, d_ext))
        d_carry_out = {op: d_carry[op].astype(v.dtype) for op, v in carry0.items()}
        return d_ext_out, d_statics_out, d_carry_out

    run.defvjp(run_fwd, run_bwd)
    return run(tuple(xs_ext), dict(statics), dict(carry0))


def _backward(
    program: FrameProgram,
    loop: Needs,
    reads: Mapping[int, tuple[bool, list[bool]]],
    shapes: Mapping[int, tuple[int, ...]],
    dims: Mapping[int, int],
    statics: Mapping[int, jax.Array],
    dys: tuple[jax.Array, ...],
    saved: Mapping[int, jax.Array],
    lagged: Mapping[tuple[int, int], jax.Array],
    xs_ext: tuple[jax.Array, ...],
    masks: jax.Array,
    reverse: bool,
    dtype: Any,
    unroll: int,
) -> tuple[list, dict, dict, list]:
    """The reverse scan: (external deltas per slot, in-loop static deltas, initial-buffer deltas, deferred Dots' deltas)."""
    order, edges, depth = program.order, program.edges, program.depth
    stored_names = sorted(loop.stored)
    lag_names = sorted(loop.lags)
    ext_slots = sorted(loop.externals)
    accumulated = sorted(
        {
            e.op
            for m in order
            if m not in program.deferred
            for e in edges[m]
            if e.kind == "static" and jnp.issubdtype(statics[e.op].dtype, jnp.inexact)
        }
    )
    num_ext = len(xs_ext)
    layout: dict[str, list[int]] = {}  # which emitted per-frame array holds each delta (set while tracing)

    def width(e: Any) -> int:
        if e.kind == "static":
            return int(statics[e.op].shape[-1])
        return int(xs_ext[e.slot].shape[-1]) if e.kind == "external" else dims[e.op]

    def step(carry: tuple, xs: tuple) -> tuple[tuple, tuple[jax.Array, ...]]:
        pending, acc = carry
        dy, stored, lags, ext, mask = xs
        frame_lags = dict(zip(lag_names, lags))
        read = _reader(statics, dict(zip(ext_slots, ext)), lambda op, k: frame_lags[(op, k)], _frame_mask(mask))
        vals = program.resolve(loop, read, dict(zip(stored_names, stored)), (program.batch,), dims, dtype)

        def value(m: int) -> Callable[[], jax.Array]:
            return lambda: vals[m] if reads[m][0] else jnp.zeros(shapes[m], dtype)

        def operands(m: int) -> Callable[[], list[jax.Array]]:
            def placeholder(e: Any) -> jax.Array:  # a value this vjp does not read
                if e.kind == "static":
                    return statics[e.op]
                shape = shapes[e.op] if e.kind in ("same", "lag") else tuple(xs_ext[e.slot].shape[1:])
                return jnp.zeros(shape, dtype)

            return lambda: [read(e, vals) if used else placeholder(e) for e, used in zip(edges[m], reads[m][1])]

        deltas: dict[int, _Delta] = {}

        def delta_of(m: int) -> _Delta:
            return deltas.setdefault(m, _Delta())

        for m, d in zip(program.exported, dy):
            delta_of(m).add(d)
        for op, buf in pending.items():
            delta_of(op).add(buf[0])
        earlier: dict[int, list[jax.Array | None]] = {op: [None] * depth[op] for op in pending}
        d_ext: list[jax.Array | None] = [None] * num_ext
        acc = dict(acc)
        d_dots: dict[int, jax.Array] = {}
        for m in reversed(order):
            gathered = deltas.pop(m, None)
            d = None if gathered is None else gathered.total(dims[m])
            if m in program.deferred:
                d_dots[m] = jnp.zeros(shapes[m], dtype) if d is None else d
            if d is None:
                continue
            layer = program.layers[m]
            if isinstance(layer, DimRange) and edges[m][0].kind == "same" and edges[m][0].slot < 0:
                delta_of(edges[m][0].op).pieces.append((layer.offset, d))
                continue
            widths = lambda m=m: [width(e) for e in edges[m]]  # noqa: E731
            for e, c in zip(edges[m], program.member_vjp(m, d, value(m), operands(m), statics, widths)):
                if c is None:
                    continue
                if e.kind in ("same", "lag") and e.slot >= 0:
                    c = jnp.where(mask[e.slot], c, jnp.zeros_like(c))
                if e.kind == "same":
                    delta_of(e.op).add(c)
                elif e.kind == "lag":
                    earlier[e.op][abs(e.lag) - 1] = _add(earlier[e.op][abs(e.lag) - 1], c)
                elif e.kind == "external":
                    d_ext[e.slot] = _add(d_ext[e.slot], c)
                elif e.op in acc:
                    acc[e.op] = acc[e.op] + c
        new_pending = {}
        for op, buf in pending.items():
            rows = [_add(buf[j + 1] if j + 1 < depth[op] else None, earlier[op][j]) for j in range(depth[op])]
            new_pending[op] = jnp.stack([jnp.zeros(shapes[op], dtype) if r is None else r for r in rows])
        emitted: list[jax.Array] = []
        position: dict[int, int] = {}

        def emit(v: jax.Array | None) -> int:
            if v is None:
                return -1
            if id(v) not in position:
                position[id(v)] = len(emitted)
                emitted.append(v)
            return position[id(v)]

        layout["ext"] = [emit(v) for v in d_ext]
        layout["dots"] = [emit(d_dots[m]) for m in program.deferred]
        return (new_pending, acc), tuple(emitted)

    pending0 = {op: jnp.zeros((depth[op],) + shapes[op], dtype) for op in depth}
    acc0 = {op: jnp.zeros_like(statics[op]) for op in accumulated}
    xs = (
        tuple(dys),
        tuple(saved[m] for m in stored_names),
        tuple(lagged[k] for k in lag_names),
        tuple(xs_ext[s] for s in ext_slots),
        masks,
    )
    (d_carry, acc), per_frame = jax.lax.scan(step, (pending0, acc0), xs, reverse=not reverse, unroll=unroll)
    d_ext = [per_frame[i] if i >= 0 else None for i in layout["ext"]]
    d_dots = [per_frame[i] for i in layout["dots"]]
    return d_ext, dict(acc), d_carry, d_dots
