"""A recurrence's scan with a hand-written backward pass (a custom VJP of the whole scan).

Left to `jax.vjp`, the backward of a `lax.scan` is JAX's transpose of it: it
saves what partial evaluation keeps and accumulates each weight's gradient
inside the loop, one small `[dim, batch] x [batch, dim]` product per frame.
Here instead:

- the forward scan computes the frames as `FrameProgram.values` does (gate
  activations fused) and saves, per frame, only the members' values that the
  backward reads;
- it writes each saved activation group's `tanh` (an LSTM's gates) into the
  external operand it reads (the input projection), frame by frame, where
  nothing reads that operand after the loop, instead of into a fresh
  zero-filled buffer (`scan_lanes`' `into`);
- the backward is one reverse scan carrying the deltas of the lagged members;
  each frame pulls its deltas through the members' `vjp`s (`FrameProgram.member_vjp`)
  and, on CPU, writes the deltas it emits over a saved activation of the same
  shape that nothing reads after the loop (an LSTM's gates), the frame read
  first through `materialized` (`scan_lanes`' `overwrite`);
- the weight of every `Dot(member, weight)` gets its gradient after the loop,
  from the frames' saved operands and the deltas the loop emits: one large
  matrix product.

The values equal the plain scan's (the fused activations to float rounding) and
so do the gradients; tests compare both against `jax.grad`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal as JaxprLiteral

from ..core.descriptor import Descriptor
from .frame import FrameProgram
from .materialize import materialized

__all__ = [
    "BackwardCarry",
    "BackwardXs",
    "frame_mask",
    "frame_reads",
    "fused_scan",
    "Lane",
    "LaneStep",
    "operand_reader",
    "Read",
    "scan_lanes",
    "shifted",
    "UNROLL",
]

UNROLL = 1  # frames per loop iteration: unrolling 2 or 4 was not faster on CPU for the LSTM, GRU and BLSTM together

Read = Callable[[Any, Mapping[int, jax.Array]], jax.Array]
# `scan_lanes`' step: (carries, one frame of operands) -> (carries, one frame of outputs), one pytree per lane each
LaneStep = Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[tuple[Any, ...], tuple[Any, ...]]]
# `_LaneBackward`'s loop carry: the pending deltas of the lagged members, the accumulated deltas of the statics
BackwardCarry = tuple[dict[int, jax.Array], dict[int, jax.Array]]
# `_LaneBackward`'s operands (per frame inside the loop): the exports' deltas, the stored values, the lagged values,
# the external operands, the mask and the optional reads
BackwardXs = tuple[
    tuple[jax.Array, ...],
    tuple[jax.Array, ...],
    tuple[jax.Array, ...],
    tuple[jax.Array, ...],
    jax.Array,
    jax.Array | None,
]


def shifted(values: jax.Array, k: int, init: jax.Array, reverse: bool) -> jax.Array:
    """Per frame (in `values`' order), the value `k` frames earlier in scan order; `init` before the first."""
    steps = values.shape[0]
    if not reverse:  # init[j] is frame -1 - j
        return jnp.concatenate([init[:k][::-1], values], axis=0)[:steps]
    return jnp.concatenate([values, init[:k]], axis=0)[k : k + steps]  # init[j] is frame steps + j


def operand_reader(
    statics: Mapping[int, jax.Array],
    ext: Mapping[int, jax.Array],
    lagged: Callable[[int, int], jax.Array],
    masked: Callable[[jax.Array, int], jax.Array],
    per_sequence: Callable[[jax.Array, int], jax.Array] | None = None,
) -> Read:
    """`read(edge, values)`: an operand's value from statics, externals, members at this frame or lagged ones.

    `per_sequence(v, k)` zeroes the sequences whose own request does not make read `k` (`edge.dyn`) here.
    """

    def read(e: Any, vals: Mapping[int, jax.Array]) -> jax.Array:
        if e.kind == "static":
            return statics[e.op]
        if e.kind == "external":
            v = ext[e.external]
        else:
            v = vals[e.op] if e.kind == "same" else lagged(e.op, abs(e.lag))
            v = v if e.mask_slot < 0 else masked(v, e.mask_slot)
        return v if per_sequence is None or e.dyn < 0 else per_sequence(v, e.dyn)

    return read


def frame_mask(mask: jax.Array) -> Callable[[jax.Array, int], jax.Array]:
    """One frame's descriptor masks (`[slots]`) as `operand_reader`'s `masked`: zeros where a read is absent."""
    return lambda v, slot: jnp.where(mask[slot], v, jnp.zeros_like(v))


def _all_frames_mask(masks: jax.Array) -> Callable[[jax.Array, int], jax.Array]:
    return lambda v, slot: jnp.where(masks[:, slot, None, None], v, jnp.zeros_like(v))


def frame_reads(reads: jax.Array | None) -> Callable[[jax.Array, int], jax.Array] | None:
    """Per-sequence read masks of one frame (`[reads, batch]`) as `operand_reader`'s `per_sequence`."""
    if reads is None:
        return None
    return lambda v, k: jnp.where(reads[k][:, None], v, jnp.zeros_like(v))


def _all_frames_reads(reads: jax.Array | None) -> Callable[[jax.Array, int], jax.Array] | None:
    """Per-sequence read masks of all frames (`[steps, reads, batch]`) as `operand_reader`'s `per_sequence`."""
    if reads is None:
        return None
    return lambda v, k: jnp.where(reads[:, k, :, None], v, jnp.zeros_like(v))


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
            padded = [jnp.pad(p, pad + [(start, width - end)]) for (start, p), end in zip(pieces, ends)]
            summed = functools.reduce(jnp.add, padded)
        return summed if self.whole is None else self.whole + summed


def _add(a: jax.Array | None, b: jax.Array | None) -> jax.Array | None:
    if a is None:
        return b
    return a if b is None else a + b


class Lane:
    """One scanned group's part of a loop: its frame program and operands (several lanes can share one loop).

    `xs_ext` are the external operands per frame (`[steps, batch, dim]`),
    `statics` the weights by node id, `carry0` each lagged member's buffer
    before the first frame (`[depth, batch, dim]`, most recent first), `masks`
    the per-frame masks of masked edges, `dims` every member's dim; `reverse`
    runs it from the last frame to the first. `reads` (`[steps, reads, batch]`
    booleans, or None), in a request with sequence ends, says per frame and
    sequence whether each optional read (edge `dyn`) is made.
    """

    def __init__(
        self,
        program: FrameProgram,
        xs_ext: tuple[jax.Array, ...],
        statics: Mapping[int, jax.Array],
        carry0: Mapping[int, jax.Array],
        masks: np.ndarray,
        dims: Mapping[int, int],
        dtype: Any,
        reverse: bool,
        reads: jax.Array | None = None,
    ):
        self.reverse, self.sequence_reads = reverse, reads
        self.program, self.xs_ext, self.statics, self.carry0 = program, tuple(xs_ext), dict(statics), dict(carry0)
        self.masks, self.dims, self.dtype = masks, dims, dtype
        p = program
        self.shapes = {m: (p.batch, dims[m]) for m in p.order}
        static_specs = {op: jax.ShapeDtypeStruct(v.shape, v.dtype) for op, v in self.statics.items()}
        self.reads = p.vjp_reads(self.shapes, static_specs, [tuple(x.shape[1:]) for x in self.xs_ext], dtype)
        self.loop = p.needs(p.read_roots(p.edges, self.reads))  # what the backward loop reads per frame
        self.after = p.needs([("edge", p.edges[m][0]) for m in p.deferred])  # the deferred Dots' operands
        self.outs = p.exported + sorted((self.loop.stored | self.after.stored) - set(p.exported))

    def forward_step(
        self,
        carry: dict[int, jax.Array],
        ext: tuple[jax.Array, ...],
        mask: jax.Array,
        reads: jax.Array | None,
        statics: Mapping[int, jax.Array],
        names: Sequence[int],
    ) -> tuple[dict[int, jax.Array], tuple[jax.Array, ...]]:
        """One frame: the new buffers and the values of `names`."""
        lagged = lambda op, k: carry[op][k - 1]  # noqa: E731
        read = operand_reader(statics, dict(enumerate(ext)), lagged, frame_mask(mask), frame_reads(reads))
        vals = self.program.values(read, self.dims, self.dtype)
        new = {op: jnp.concatenate([vals[op][None], buf[:-1]], axis=0) for op, buf in carry.items()}
        return new, tuple(vals[m] for m in names)


def scan_lanes(
    step: LaneStep,
    carry0: tuple[Any, ...],
    xs: tuple[Any, ...],
    backward: Sequence[bool],
    unroll: int,
    into: Sequence[Mapping[int, int]] | None = None,
    overwrite: Sequence[Sequence[int]] | None = None,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """`lax.scan` where each lane reads its frames in its own direction (`backward[k]`: last frame first).

    `xs[k]` are lane k's per-frame operands (leading axis: frames); `step`
    maps (carries, one frame of each lane) to (carries, one frame of each
    lane's outputs), and the outputs come back in frame order. Lanes of one
    direction are a plain scan; mixed directions index the frames explicitly,
    as `lax.scan` does inside.

    `into[k]` maps lane k's outputs (leaf positions) to operands of the same
    shape and dtype (leaf positions in `xs[k]`) that nothing reads after the
    loop: the output is written into the operand, each frame after the step
    has read it, instead of into a fresh zero-filled buffer (`_reuse`).

    `overwrite[k]` names more of lane k's operands (leaf positions) that
    nothing reads after the loop: each output of the same shape and dtype,
    in order, is written into one, and the step reads that operand's frame
    through `materialized` (a copy of the frame on CPU), so that every read
    of the frame comes before the write whatever the step does with it. On
    other platforms these operands are not overwritten.
    """
    steps = jax.tree.leaves(xs)[0].shape[0]
    leaves = [jax.tree.leaves(x) for x in xs]
    trees = [jax.tree.structure(x) for x in xs]

    def frame(i: jax.Array, k: int) -> jax.Array:
        return steps - 1 - i if backward[k] else i

    def take(i: jax.Array, sources: Sequence[Sequence[jax.Array]]) -> list[list[jax.Array]]:
        return [
            [jax.lax.dynamic_index_in_dim(a, frame(i, k), 0, keepdims=False) for a in ls]
            for k, ls in enumerate(sources)
        ]

    def frames(taken: list[list[jax.Array]]) -> tuple[Any, ...]:
        return tuple(jax.tree.unflatten(tree, ls) for tree, ls in zip(trees, taken))

    traced, (_, out_shapes) = jax.make_jaxpr(step, return_shape=True)(carry0, frames(take(jnp.int32(0), leaves)))
    outs = [jax.tree.leaves(o) for o in out_shapes]
    reuse = _reuse(
        traced.jaxpr,
        len(jax.tree.leaves(carry0)),
        leaves,
        outs,
        steps,
        [{} for _ in xs] if into is None else into,
    )
    copied: list[set[int]] = [set() for _ in xs]  # operands whose frame the step reads through `materialized`
    if overwrite is not None and jax.default_backend() == "cpu":
        for k, positions in enumerate(overwrite):
            free = [p for p in positions if p not in reuse[k].values()]
            for j, o in enumerate(outs[k]):
                if j in reuse[k]:
                    continue
                match = next(
                    (p for p in free if leaves[k][p].shape == (steps,) + o.shape and leaves[k][p].dtype == o.dtype),
                    None,
                )
                if match is not None:
                    reuse[k][j] = match
                    copied[k].add(match)
                    free.remove(match)
    if len(set(backward)) <= 1 and not any(reuse):
        return jax.lax.scan(step, carry0, xs, reverse=bool(backward and backward[0]), unroll=unroll)
    buffers0 = [
        [leaves[k][reuse[k][j]] if j in reuse[k] else jnp.zeros((steps,) + o.shape, o.dtype) for j, o in enumerate(out)]
        for k, out in enumerate(outs)
    ]
    # An overwritten operand is read from its buffer in the loop, so that nothing else keeps it alive.
    read_from = [{x: j for j, x in r.items()} for r in reuse]

    def body(state: tuple[Any, ...], i: jax.Array) -> tuple[tuple[Any, ...], None]:
        carries, buffers = state
        sources = [
            [buffers[k][read_from[k][p]] if p in read_from[k] else a for p, a in enumerate(ls)]
            for k, ls in enumerate(leaves)
        ]
        taken = [
            [materialized(a, a) if p in copied[k] else a for p, a in enumerate(ls)]
            for k, ls in enumerate(take(i, sources))
        ]
        carries, ys = step(carries, frames(taken))
        ys_leaves = [jax.tree.leaves(y) for y in ys]
        buffers = [
            [jax.lax.dynamic_update_index_in_dim(b, y, frame(i, k), 0) for b, y in zip(buffers[k], ys_leaves[k])]
            for k in range(len(xs))
        ]
        return (carries, buffers), None

    state0 = (carry0, buffers0)
    (carries, buffers), _ = jax.lax.scan(body, state0, jnp.arange(steps, dtype=jnp.int32), unroll=unroll)
    return carries, tuple(jax.tree.unflatten(jax.tree.structure(o), b) for o, b in zip(out_shapes, buffers))


def _reuse(
    jaxpr: Any,
    num_carries: int,
    leaves: Sequence[Sequence[jax.Array]],
    outs: Sequence[Sequence[Any]],
    steps: int,
    into: Sequence[Mapping[int, int]],
) -> list[dict[int, int]]:
    """`into`, less the pairs that XLA would not update in place.

    On XLA's CPU backend a fresh `[frames, batch, dim]` output buffer costs a
    zero fill and, for large ones, its page faults: about as much as the
    loop's elementwise work on it. An operand nothing reads after the loop is
    updated in place instead (a frame is overwritten after the step has read
    it). JAX values are immutable, so this is only a hint: where the operand
    is still read after the loop, XLA copies it once. But XLA copies the whole
    buffer every frame unless it can order every read of the frame before the
    write: so the caller names only outputs XLA computes once (a `tanh`, not an
    elementwise sum it would recompute inside each reader), and here a pair is
    kept only if every other output that depends on the operand's frame does so
    through that output (`_only_through`, on the step's jaxpr `jaxpr`, whose
    inputs are the `num_carries` carries and then the lanes' operands, its
    outputs the carries and then the lanes' outputs).
    """
    in_base = np.cumsum([num_carries] + [len(ls) for ls in leaves])
    out_base = np.cumsum([num_carries] + [len(o) for o in outs])
    return [
        {
            j: p
            for j, p in pairs.items()
            if leaves[k][p].shape == (steps,) + tuple(outs[k][j].shape)
            and leaves[k][p].dtype == outs[k][j].dtype
            and _only_through(jaxpr, int(in_base[k]) + p, int(out_base[k]) + j)
        }
        for k, pairs in enumerate(into)
    ]


def _only_through(jaxpr: Any, source: int, through: int) -> bool:
    """Whether every output of `jaxpr` but output `through` is independent of input `source` given that output."""
    cut = jaxpr.outvars[through]
    if isinstance(cut, JaxprLiteral):
        return False
    tainted = {id(jaxpr.invars[source])} - {id(cut)}
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, JaxprLiteral) and id(v) in tainted for v in eqn.invars):
            tainted.update(id(v) for v in eqn.outvars if v is not cut)
    return not any(
        i != through and not isinstance(v, JaxprLiteral) and id(v) in tainted for i, v in enumerate(jaxpr.outvars)
    )


def fused_scan(lanes: Sequence[Lane], *, unroll: int | None = None) -> list[tuple[jax.Array, ...]]:
    """Per lane, its exported members' values at every frame (`[steps, batch, dim]` each), differentiable.

    All lanes run in one loop, each in its own direction (`lane.reverse`), and
    so does their backward pass.
    """
    lanes = list(lanes)
    unroll = UNROLL if unroll is None else unroll
    masks = tuple(jnp.asarray(lane.masks) for lane in lanes)
    directions = [lane.reverse for lane in lanes]

    def loop(
        xs_ext: tuple[tuple[jax.Array, ...], ...],
        statics: tuple[dict[int, jax.Array], ...],
        carry0: tuple[dict[int, jax.Array], ...],
        reads: tuple[jax.Array | None, ...],
        save: bool,
        in_place: bool,
    ) -> tuple[tuple[jax.Array, ...], ...]:
        names = [lane.outs if save else lane.program.exported for lane in lanes]

        def step(carries: tuple[Any, ...], xs: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            out = [
                lane.forward_step(c, ext, mask, rd, st, nm)
                for lane, c, (ext, mask, rd), st, nm in zip(lanes, carries, xs, statics, names)
            ]
            return tuple(o[0] for o in out), tuple(o[1] for o in out)

        into = [
            _gates_into_externals(lane, nm, x, save) if in_place else {} for lane, nm, x in zip(lanes, names, xs_ext)
        ]
        return scan_lanes(step, carry0, tuple(zip(xs_ext, masks, reads)), directions, unroll, into)[1]

    @functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
    def forward(
        xs_ext: tuple[tuple[jax.Array, ...], ...],
        statics: tuple[dict[int, jax.Array], ...],
        carry0: tuple[dict[int, jax.Array], ...],
        reads: tuple[jax.Array | None, ...],
        save: bool,
    ) -> tuple[tuple[jax.Array, ...], ...]:
        """The loop, its gates written in place; JAX differentiates it as the loop without (`gradient="jax"`, or
        `jax.grad` of a Tape's value): its derivative of a buffer updated in place copies the buffer every frame."""
        return loop(xs_ext, statics, carry0, reads, save, True)

    @forward.defjvp
    def forward_jvp(save: bool, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        return jax.jvp(lambda x, st, c, r: loop(x, st, c, r, save, False), primals, tangents)

    @jax.custom_vjp
    def run(
        xs_ext: tuple[tuple[jax.Array, ...], ...],
        statics: tuple[dict[int, jax.Array], ...],
        carry0: tuple[dict[int, jax.Array], ...],
        reads: tuple[jax.Array | None, ...],
    ) -> tuple[tuple[jax.Array, ...], ...]:
        return forward(xs_ext, statics, carry0, reads, False)

    def run_fwd(
        xs_ext: tuple[tuple[jax.Array, ...], ...],
        statics: tuple[dict[int, jax.Array], ...],
        carry0: tuple[dict[int, jax.Array], ...],
        reads: tuple[jax.Array | None, ...],
    ) -> tuple[tuple[tuple[jax.Array, ...], ...], tuple[Any, ...]]:
        ys = forward(xs_ext, statics, carry0, reads, True)
        exported = tuple(y[: len(lane.program.exported)] for lane, y in zip(lanes, ys))
        return exported, (xs_ext, statics, carry0, reads, ys)

    def run_bwd(
        res: tuple[Any, ...], dys: tuple[tuple[jax.Array, ...], ...]
    ) -> tuple[
        tuple[tuple[jax.Array, ...], ...],
        tuple[dict[int, Any], ...],
        tuple[dict[int, jax.Array], ...],
        tuple[np.ndarray | None, ...],
    ]:
        xs_ext, statics, carry0, reads, ys = res
        backs = [
            _LaneBackward(lane, x, st, c0, dict(zip(lane.outs, y)), dy, m, rd)
            for lane, x, st, c0, y, dy, m, rd in zip(lanes, xs_ext, statics, carry0, ys, dys, masks, reads)
        ]

        def step(carries: tuple[Any, ...], xs: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            out = [b.step(c, x) for b, c, x in zip(backs, carries, xs)]
            return tuple(o[0] for o in out), tuple(o[1] for o in out)

        finals, per_frame = scan_lanes(
            step,
            tuple(b.carry0() for b in backs),
            tuple(b.xs() for b in backs),
            [not d for d in directions],
            unroll,
            overwrite=[b.overwritable() for b in backs],
        )
        grads = [b.finish(f, pf) for b, f, pf in zip(backs, finals, per_frame)]
        no_reads = tuple(None if r is None else np.zeros(r.shape, dtype=jax.dtypes.float0) for r in reads)
        return tuple(g[0] for g in grads), tuple(g[1] for g in grads), tuple(g[2] for g in grads), no_reads

    run.defvjp(run_fwd, run_bwd)
    xs_ext = tuple(lane.xs_ext for lane in lanes)
    reads = tuple(lane.sequence_reads for lane in lanes)
    return list(run(xs_ext, tuple(lane.statics for lane in lanes), tuple(lane.carry0 for lane in lanes), reads))


def _gates_into_externals(lane: Lane, names: Sequence[int], xs_ext: Sequence[jax.Array], save: bool) -> dict[int, int]:
    """Which saved activation groups' `tanh`s (output positions) the forward loop writes into which external
    operands (positions in `xs_ext`): an LSTM's gates into its input projection.

    Only the groups' `tanh`s, which XLA computes once a frame; an external the backward pass reads is kept.
    """
    kept = lane.loop.externals | lane.after.externals if save else set()
    free = [s for s in range(len(xs_ext)) if s not in kept]
    widths = {g.key: sum(lane.dims[m] for m in g.members) for g in lane.program.groups}
    out: dict[int, int] = {}
    for j, m in enumerate(names):
        for s in free:
            if m in widths and xs_ext[s].shape[1:] == (lane.program.batch, widths[m]) and xs_ext[s].dtype == lane.dtype:
                out[j] = s
                free.remove(s)
                break
    return out


class _LaneBackward:
    """One lane's part of the reverse scan, and its deltas once the scan is done.

    The loop carries the deltas of the lagged members (`pending[op][j]`: the
    delta of `op` at `j` frames before the current one, from later frames) and
    of weights used inside the frame; it emits, per frame, the deltas of the
    external operands and of the deferred Dots' outputs.
    """

    def __init__(
        self,
        lane: Lane,
        xs_ext: tuple[jax.Array, ...],
        statics: Mapping[int, jax.Array],
        carry0: Mapping[int, jax.Array],
        saved: Mapping[int, jax.Array],
        dys: tuple[jax.Array, ...],
        masks: jax.Array,
        reads: jax.Array | None = None,
    ):
        self.lane, self.xs_ext, self.statics, self.carry0_values = lane, xs_ext, statics, carry0
        self.saved, self.dys, self.masks, self.reads = saved, dys, masks, reads
        p = lane.program
        self.lagged = {
            (op, k): shifted(saved[op], k, carry0[op], lane.reverse) for op, k in lane.loop.lags | lane.after.lags
        }
        self.stored_names = sorted(lane.loop.stored)
        self.lag_names = sorted(lane.loop.lags)
        self.ext_slots = sorted(lane.loop.externals)
        self.accumulated = sorted(
            {
                e.op
                for m in p.order
                if m not in p.deferred
                for e in p.edges[m]
                if e.kind == "static" and jnp.issubdtype(statics[e.op].dtype, jnp.inexact)
            }
        )
        # The deferred Dots' weights, transposed once: inside the loop `d @ W^T` is then a plain product (XLA's
        # CPU backend runs a transposed-operand product slower); the barrier keeps XLA from folding it back.
        self.transposed = {
            p.edges[m][1].op: jax.lax.optimization_barrier(statics[p.edges[m][1].op].T) for m in p.deferred
        }
        self.layout: dict[str, list[int]] = {}  # which emitted per-frame array holds each delta (set while tracing)

    def carry0(self) -> BackwardCarry:
        lane, p = self.lane, self.lane.program
        pending = {op: jnp.zeros((p.depth[op],) + lane.shapes[op], lane.dtype) for op in p.depth}
        return pending, {op: jnp.zeros_like(self.statics[op]) for op in self.accumulated}

    def xs(self) -> BackwardXs:
        return (
            tuple(self.dys),
            tuple(self.saved[m] for m in self.stored_names),
            tuple(self.lagged[k] for k in self.lag_names),
            tuple(self.xs_ext[s] for s in self.ext_slots),
            self.masks,
            self.reads,
        )

    def overwritable(self) -> list[int]:
        """The leaf positions in `xs()` of the saved values that nothing reads after the loop (neither `finish`
        nor the caller: not the exported members), which the loop may overwrite with its per-frame deltas."""
        p = self.lane.program
        kept = set(self.lane.after.stored) | set(p.exported)
        return [len(self.dys) + i for i, m in enumerate(self.stored_names) if m not in kept]

    def width(self, e: Any) -> int:
        if e.kind == "static":
            return int(self.statics[e.op].shape[-1])
        return int(self.xs_ext[e.external].shape[-1]) if e.kind == "external" else self.lane.dims[e.op]

    def step(self, carry: BackwardCarry, xs: BackwardXs) -> tuple[BackwardCarry, tuple[jax.Array, ...]]:
        lane, p = self.lane, self.lane.program
        edges, shapes, dtype, reads, statics = p.edges, lane.shapes, lane.dtype, lane.reads, self.statics
        pending, acc = carry
        dy, stored, lags, ext, mask, step_reads = xs
        frame_lags = dict(zip(self.lag_names, lags))
        per_sequence = frame_reads(step_reads)
        lagged = lambda op, k: frame_lags[(op, k)]  # noqa: E731
        read = operand_reader(statics, dict(zip(self.ext_slots, ext)), lagged, frame_mask(mask), per_sequence)
        vals = p.resolve(lane.loop, read, dict(zip(self.stored_names, stored)), (p.batch,), lane.dims, dtype)

        def value(m: int) -> Callable[[], jax.Array]:
            return lambda: vals[m] if reads[m][0] else jnp.zeros(shapes[m], dtype)

        def operands(m: int) -> Callable[[], list[jax.Array]]:
            def placeholder(e: Any) -> jax.Array:  # a value this vjp does not read
                if e.kind == "static":
                    return statics[e.op]
                shape = shapes[e.op] if e.kind in ("same", "lag") else tuple(self.xs_ext[e.external].shape[1:])
                return jnp.zeros(shape, dtype)

            return lambda: [read(e, vals) if used else placeholder(e) for e, used in zip(edges[m], reads[m][1])]

        deltas: dict[int, _Delta] = {}

        def delta_of(m: int) -> _Delta:
            return deltas.setdefault(m, _Delta())

        for m, exported_delta in zip(p.exported, dy):
            delta_of(m).add(exported_delta)
        for op, buf in pending.items():
            delta_of(op).add(buf[0])
        earlier: dict[int, list[jax.Array | None]] = {op: [None] * p.depth[op] for op in pending}
        d_ext: list[jax.Array | None] = [None] * len(self.xs_ext)
        acc = dict(acc)
        d_dots: dict[int, jax.Array] = {}
        for m in reversed(p.order):
            gathered = deltas.pop(m, None)
            d = None if gathered is None else gathered.total(lane.dims[m])
            if m in p.deferred:
                d_dots[m] = jnp.zeros(shapes[m], dtype) if d is None else d
            if d is None:
                continue
            layer = p.layers[m]
            columns = layer.column_range() if isinstance(layer, Descriptor) else None
            if columns is not None and edges[m][0].kind == "same" and edges[m][0].mask_slot < 0:
                delta_of(edges[m][0].op).pieces.append((columns[0], d))
                continue
            widths = lambda m=m: [self.width(e) for e in edges[m]]  # noqa: E731
            vjp_statics = self.transposed if m in p.deferred else statics
            for e, c in zip(edges[m], p.member_vjp(m, d, value(m), operands(m), vjp_statics, widths)):
                if c is None:
                    continue
                if e.kind in ("same", "lag") and e.mask_slot >= 0:
                    c = jnp.where(mask[e.mask_slot], c, jnp.zeros_like(c))
                if per_sequence is not None and e.dyn >= 0:
                    c = per_sequence(c, e.dyn)
                if e.kind == "same":
                    delta_of(e.op).add(c)
                elif e.kind == "lag":
                    earlier[e.op][abs(e.lag) - 1] = _add(earlier[e.op][abs(e.lag) - 1], c)
                elif e.kind == "external":
                    d_ext[e.external] = _add(d_ext[e.external], c)
                elif e.op in acc:
                    acc[e.op] = acc[e.op] + c
        new_pending = {}
        for op, buf in pending.items():
            depth = p.depth[op]
            rows = [_add(buf[j + 1] if j + 1 < depth else None, earlier[op][j]) for j in range(depth)]
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

        self.layout["ext"] = [emit(v) for v in d_ext]
        self.layout["dots"] = [emit(d_dots[m]) for m in p.deferred]
        return (new_pending, acc), tuple(emitted)

    def finish(
        self, final: BackwardCarry, per_frame: tuple[jax.Array, ...]
    ) -> tuple[tuple[jax.Array, ...], dict[int, Any], dict[int, jax.Array]]:
        """(deltas of the external operands, of the statics, of the initial buffers), after the scan."""
        lane, p = self.lane, self.lane.program
        d_carry, acc = final
        d_statics: dict[int, jax.Array | None] = dict(acc)
        d_ext = [per_frame[i] if i >= 0 else None for i in self.layout["ext"]]
        d_dots = [per_frame[i] for i in self.layout["dots"]]
        # The deferred weight gradients: all frames' operands against all frames' deltas, one product each.
        read = operand_reader(
            self.statics,
            dict(enumerate(self.xs_ext)),
            lambda op, k: self.lagged[(op, k)],
            _all_frames_mask(self.masks),
            _all_frames_reads(self.reads),
        )
        frames = (self.masks.shape[0], p.batch)
        vals = p.resolve(lane.after, read, {m: self.saved[m] for m in lane.after.stored}, frames, lane.dims, lane.dtype)
        for m, d in zip(p.deferred, d_dots):
            a = read(p.edges[m][0], vals)
            weight = p.edges[m][1].op
            # As one 2-D product, which XLA's CPU backend runs faster than a contraction over two axes.
            product = a.reshape(-1, a.shape[-1]).T @ d.reshape(-1, d.shape[-1])
            d_statics[weight] = _add(d_statics.get(weight), product)
        d_statics_out: dict[int, Any] = {}
        for op, v in self.statics.items():
            g = d_statics.get(op)
            if not jnp.issubdtype(v.dtype, jnp.inexact):
                d_statics_out[op] = np.zeros(v.shape, dtype=jax.dtypes.float0)
            else:
                d_statics_out[op] = jnp.zeros_like(v) if g is None else g.astype(v.dtype)
        d_ext_out = tuple(jnp.zeros_like(x) if g is None else g.astype(x.dtype) for x, g in zip(self.xs_ext, d_ext))
        d_carry_out = {op: d_carry[op].astype(v.dtype) for op, v in self.carry0_values.items()}
        return d_ext_out, d_statics_out, d_carry_out
