"""Recurrences: a strongly connected group of nodes that reads itself at other frames, as one `lax.scan`.

In Kaldi nnet3 a recurrent network is a graph whose nodes refer to each other
through time offsets (`IfDefined(Offset(h, -1))`): the graph of nodes has a
cycle, the graph of (node, Index) pairs does not. Each cyclic group of nodes
becomes one `jax.lax.scan` over frames; everything outside the group stays
batched over all frames (an LSTM's input projection is one big matmul, hoisted
out of the scan and sliced per frame).

Per step (one frame t) every member is computed for all sequences at once
(`[batch, dim]`). An operand is read one of four ways, fixed at plan time:
`static` (weights, literals), `external` (a node outside the group, mapped to
frames before the scan), `same` (a member at this frame) or `lag` (a member
some frames back, from a buffer carried by the scan). Rows that a
descriptor reads as absent (IfDefined, Failover, Switch) are masked to zeros by
per-frame masks computed in numpy. In a request with sequence ends
(`symnet._src.engine.ends`) the optional reads (IfDefined, Failover) are masked
again per frame and sequence, by masks given with each call: a backward
recurrence then starts at each sequence's end as if nothing came after.

Each group is lowered one of two ways, chosen at plan time (`LOWERINGS`): the
fused scan (`fused_scan`, a hand-written backward pass through the members'
`vjp`s) or the plain scan (one `lax.scan` of the members' `apply`s, which JAX
differentiates). `lowering="auto"` fuses a group where every member that
needs one has a `vjp`; a layer may leave `vjp` out, and its group is then plain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError
from ..core.arithmetic import Divide, Minus, Negate, Plus, Times
from ..core.descriptor import Node
from ..core.index import decode
from ..core.layer import Layer, layer_class
from ..core.tape import Tape
from .dims import node_shapes, static_dim
from .frame import FrameProgram, passes_through, step_value
from .fused_scan import Lane, frame_mask, frame_reads, fused_scan, operand_reader
from .layout import as_flat_rows, as_frames
from .rowmap import RowMap
from .semantics import optional_reads
from .values_only import linearized

__all__ = [
    "check_lowering",
    "EdgeKind",
    "Lowering",
    "LOWERINGS",
    "Recurrence",
    "RecurrentBlock",
    "scan_tapes",
]

_ABSORBABLE = (Plus, Minus, Times, Divide, Negate)  # cheap row-wise layers an external may be, computed per frame

#: What `compile(..., lowering=...)` takes: `auto` (fused where every member has its `vjp`, else plain),
#: `fused` (every group fused; a PlanError where a member has no `vjp`) or `plain` (every group plain, and
#: every spliced product slices and a concatenation: engine/splice.py's `convolutions`).
Lowering = Literal["auto", "fused", "plain"]
LOWERINGS: tuple[Lowering, ...] = get_args(Lowering)


def check_lowering(lowering: object) -> None:
    """A PlanError unless `lowering` is one of `LOWERINGS` (checked before any work, by every caller that takes it)."""
    if lowering not in LOWERINGS:
        raise PlanError(f"lowering={lowering!r}: use one of {', '.join(map(repr, LOWERINGS))}")


@layer_class
class Recurrence(Layer):
    """The Tape's node for one scanned group: its members, in evaluation order."""

    members: tuple[Layer, ...]

    rowwise = False


#: How a member reads an operand at a frame: a weight or literal (`static`), a node outside the group (`external`),
#: a member at this frame (`same`) or a member `lag` frames back (`lag`).
EdgeKind = Literal["static", "external", "same", "lag"]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class _Edge:
    """One operand read of a member; planning passes that number slots replace edges, never change them."""

    kind: EdgeKind
    op: int
    lag: int = 0
    mask: np.ndarray | None = None  # `same` and `lag`: the steps at which the source row exists
    rowmap: RowMap | None = None  # `external`: the operand's rows per step
    mask_slot: int = -1  # `same` and `lag`: index into the per-step masks (-1: the source row always exists)
    external: int = -1  # `external`: index into the block's external inputs
    dyn: int = -1  # index into the per-sequence read masks (an optional read in a request with sequence ends)

    def present(self) -> np.ndarray:
        """The steps at which a `same` or `lag` edge's source row exists."""
        assert self.mask is not None, self.kind  # same and lag edges carry their mask
        return self.mask

    def gather(self, values: jax.Array) -> jax.Array:
        """An `external` edge's rows, per step, of the operand's `values`."""
        assert self.rowmap is not None, self.kind  # external edges carry their row map
        return self.rowmap(values)


class _Operands(NamedTuple):
    """A group's operands at run time, as both lowerings take them."""

    xs_ext: tuple[jax.Array, ...]  # external operands per frame, `[steps, batch, dim]`
    statics: dict[int, jax.Array]  # weights and literals by node id
    carry0: dict[int, jax.Array]  # each lagged member's buffer before the first frame
    given: dict[int, jax.Array]  # given values by member, `[rows, batch, dim]`
    dims: dict[int, int]
    dtype: Any


class RecurrentBlock:
    """The plan of one scanned group: steps, edges, buffers and what leaves the scan."""

    def __init__(
        self,
        graph: Any,
        members: list[int],
        rows: Mapping[int, Any],
        maps: Mapping[int, tuple[RowMap | None, ...]],
        exported: list[int],
        given: Mapping[int, np.ndarray] | None = None,
        sequence_ends: bool = False,
        lowering: Lowering = "auto",
    ):
        self.graph = graph
        self.batch = next(iter(rows.values())).batch
        self.exported = exported
        given = dict(given or {})
        self.given = sorted(given)  # members with values given by the request (a carried state)
        step_t, computed = {}, {}
        for m in members:
            if not rows[m].regular:
                raise PlanError(
                    f"{graph.describe(m)} is recurrent: recurrences need a regular request "
                    "(every sequence with the same frames, e.g. IndexSet.range or network.compute)"
                )
            n, t, x = decode(rows[m].keys)
            if len(np.unique(t)) != len(t):
                raise PlanError(f"{graph.describe(m)} is recurrent and has several x per frame: not supported")
            step_t[m] = t
            computed[m] = ~np.isin(rows[m].keys, given[m]) if m in given else np.ones(len(t), dtype=bool)
        t_all = np.concatenate([step_t[m][computed[m]] for m in members])
        self.t0 = int(t_all.min())
        #: Frames between steps: where every computed frame is t0 plus a multiple of some s > 1 (a recurrence
        #: that reads 3 frames back, needed at every third frame only), the scan steps over those frames alone.
        #: (Frames the request gives, such as a stream's carried state, count too: they stay on the stride.)
        t_given = [decode(given[m])[1] for m in members if m in given]
        self.stride = max(int(np.gcd.reduce(np.concatenate([t_all, *t_given]) - self.t0)), 1)
        self.num_steps = (int(t_all.max()) - self.t0) // self.stride + 1
        # Steps of every row; rows the request gives lie outside 0 .. num_steps - 1 (off the stride: far outside).
        self.step_of = {m: self._steps(step_t[m]) for m in members}
        self.edges: dict[int, list[_Edge]] = {}
        lags: set[int] = set()
        member_set = set(members)
        for m in members:
            edges = []
            for pos, op in enumerate(graph.operands[m]):
                if not graph.indexed[op]:
                    edges.append(_Edge("static", op))
                    continue
                rowmap = maps[m][pos]
                assert rowmap is not None  # an indexed operand has a row map
                src = rowmap.src
                valid = (src >= 0) & computed[m]
                mask = np.zeros(self.num_steps, dtype=bool)
                mask[self.step_of[m][valid]] = True
                if op in member_set:
                    lag_values = np.unique(self.step_of[m][valid] - self.step_of[op][src[valid]])
                    if len(lag_values) > 1:
                        raise PlanError(
                            f"{graph.describe(m)} reads {graph.describe(op)} at varying frame distances "
                            f"{lag_values.tolist()} inside a recurrence: not supported"
                        )
                    lag = int(lag_values[0]) if len(lag_values) else 0
                    edge = _Edge("lag" if lag else "same", op, lag, mask)
                    if lag:
                        lags.add(lag)
                else:
                    src_step = np.full(self.num_steps, -1, dtype=np.int64)
                    src_step[self.step_of[m][computed[m]]] = src[computed[m]]
                    # its slot (the external input it reads) is given by _absorb_externals
                    edge = _Edge("external", op, rowmap=RowMap(src_step, rowmap.num_src))
                edges.append(edge)
            self.edges[m] = edges
        # Per optional read (member, operand position): the member's row at each step (-1: none).
        self.optional_reads: list[tuple[tuple[int, int], np.ndarray]] = []
        if sequence_ends:
            for m in members:
                if not optional_reads(graph.layers[m]):
                    continue
                row_at_step = np.full(self.num_steps, -1, dtype=np.int64)
                row_at_step[self.step_of[m][computed[m]]] = np.flatnonzero(computed[m])
                for pos, e in enumerate(self.edges[m]):
                    if e.kind != "static":
                        self.edges[m][pos] = dataclasses.replace(e, dyn=len(self.optional_reads))
                        self.optional_reads.append(((m, pos), row_at_step))
        if any(lag > 0 for lag in lags) and any(lag < 0 for lag in lags):
            raise PlanError(
                "a recurrence reads both earlier and later frames of itself: "
                + ", ".join(graph.describe(m) for m in members)
            )
        self.reverse = any(lag < 0 for lag in lags)
        self.externals = self._absorb_externals(graph, rows, maps)
        self.order = self._step_order(list(self.edges))
        masks = self._needed_masks()
        self.masks = np.stack(masks, axis=1) if masks else np.zeros((self.num_steps, 0), dtype=bool)
        self.depth: dict[int, int] = {}
        for m in members:
            for e in self.edges[m]:
                if e.kind == "lag":
                    self.depth[e.op] = max(self.depth.get(e.op, 0), abs(e.lag))
        self.statics = sorted({e.op for edges in self.edges.values() for e in edges if e.kind == "static"})
        for m in self.given:
            inside = (self.step_of[m] >= 0) & (self.step_of[m] < self.num_steps) & ~computed[m]
            if inside.any():
                raise PlanError(f"the request gives values of {graph.describe(m)} inside the frames it computes")
        # The scan's initial buffers: the given values just before the first step, else zeros.
        self.carry_maps = {}
        for op, depth in self.depth.items():
            before = np.arange(depth) + self.num_steps if self.reverse else -1 - np.arange(depth)
            src = np.full(depth, -1, dtype=np.int64)
            if op in given:
                given_steps = self._steps(decode(given[op])[1])
                for j, step in enumerate(before):
                    hit = np.flatnonzero(given_steps == step)
                    src[j] = hit[0] if len(hit) else -1
            self.carry_maps[op] = RowMap(src, len(given.get(op, ())))
        # Each exported member's rows, from [its given rows; the scan's steps].
        self.out_maps = {}
        for m in exported:
            num_given = len(given.get(m, ()))
            src = np.where(computed[m], num_given + self.step_of[m], -1)
            if m in given:
                src[~computed[m]] = np.searchsorted(given[m], rows[m].keys[~computed[m]])
            self.out_maps[m] = RowMap(src, num_given + self.num_steps)
        self.frames = FrameProgram(
            {m: graph.layers[m] for m in self.order}, self.order, self.edges, exported, self.depth, self.batch
        )
        #: Members whose layer has no `vjp` of its own but whose frame backward would call it.
        self.without_vjp = self.frames.without_vjp()
        #: `fused` or `plain`: how this group runs (see the module doc).
        self.lowering = self._lowering(lowering)

    def _steps(self, t: np.ndarray) -> np.ndarray:
        """The scan step of each frame `t`; frames off the stride get a step far outside the scan."""
        offset = t - self.t0
        return np.where(offset % self.stride == 0, offset // self.stride, np.iinfo(np.int32).min)

    def _lowering(self, requested: Lowering) -> Lowering:
        """The lowering for `requested` (one of `LOWERINGS`); a PlanError for `fused` where a member lacks a vjp."""
        if requested == "fused" and self.without_vjp:
            m = self.without_vjp[0]
            raise PlanError(
                f"lowering='fused' needs the vjp of every member of a recurrence: {self.graph.describe(m)} is a "
                f"{type(self.graph.layers[m]).__name__}, which defines apply but no vjp; "
                "define its vjp (docs/extending.md) or compile with lowering='auto' "
                "(that recurrence then runs as a plain scan)"
            )
        return "plain" if requested == "plain" or self.without_vjp else "fused"

    def explain(self) -> str:
        """One line: the group's members, frames, direction and lowering (and why plain, under `auto`)."""
        graph = self.graph
        named = [graph.describe(m) for m in self.order if isinstance(graph.layers[m], Node)]
        members = ", ".join(named or [graph.describe(m) for m in self.order])
        direction = "backward" if self.reverse else "forward"
        why = ""
        if self.without_vjp:
            why = ": no vjp in " + ", ".join(graph.describe(m) for m in self.without_vjp)
        frames = f"{self.num_steps} frames" + (f", one in {self.stride}" if self.stride > 1 else "")
        return f"recurrence of {members} ({frames}, {direction} in time): {self.lowering} scan{why}"

    def _absorb_externals(
        self, graph: Any, rows: Mapping[int, Any], maps: Mapping[int, tuple[RowMap | None, ...]]
    ) -> list[_Edge]:
        """Compute cheap row-wise externals per frame (a bias added to the hoisted input projection).

        An external that is a sum, difference, product or quotient of one indexed
        operand and weights, read only by the group and at every frame, is
        computed inside the loop from its indexed operand (where XLA fuses it
        with the frame's other work) instead of as one more pass over all
        frames before the scan. Its own tape still exists; nothing reads it.
        Returns the externals, renumbered.
        """
        users: dict[int, set[int]] = {}
        for nid in rows:
            for op in graph.operands[nid]:
                users.setdefault(op, set()).add(nid)
        while True:
            readers: dict[int, list[_Edge]] = {}
            for edges in self.edges.values():
                for e in edges:
                    if e.kind == "external":
                        readers.setdefault(e.op, []).append(e)
            for op, edges in readers.items():
                new_edges = self._absorbed_edges(graph, maps, op, edges, users)
                if new_edges is not None:
                    self.edges[op] = new_edges
                    absorbed = {id(e) for e in edges}
                    for m, member_edges in self.edges.items():
                        self.edges[m] = [
                            _Edge("same", e.op, e.lag, np.ones(self.num_steps, dtype=bool), dyn=e.dyn)
                            if id(e) in absorbed
                            else e
                            for e in member_edges
                        ]
                    break
            else:
                break
        out: list[_Edge] = []
        for member_edges in self.edges.values():
            for pos, e in enumerate(member_edges):
                if e.kind == "external":
                    member_edges[pos] = dataclasses.replace(e, external=len(out))
                    out.append(member_edges[pos])
        return out

    def _absorbed_edges(
        self,
        graph: Any,
        maps: Mapping[int, tuple[RowMap | None, ...]],
        op: int,
        readers: list[_Edge],
        users: Mapping[int, set[int]],
    ) -> list[_Edge] | None:
        """The frame edges of external `op` computed per frame, or None where it cannot be."""
        if type(graph.layers[op]) not in _ABSORBABLE or users.get(op, set()) - set(self.edges):
            return None
        rowmaps = [r for e in readers if (r := e.rowmap) is not None]
        if len(rowmaps) != len(readers):
            return None
        src = rowmaps[0].src
        if (src < 0).any() or any(not np.array_equal(r.src, src) for r in rowmaps[1:]):
            return None
        if sum(graph.indexed[o] for o in graph.operands[op]) != 1:
            return None
        edges = []
        for pos, o in enumerate(graph.operands[op]):
            if not graph.indexed[o]:
                edges.append(_Edge("static", o))
                continue
            inner = maps[op][pos]  # op's rows -> o's rows
            assert inner is not None  # an indexed operand has a row map
            composed = inner.src[src]
            if (composed < 0).any():
                return None
            edges.append(_Edge("external", o, rowmap=RowMap(composed, inner.num_src)))
        return edges

    def _needed_masks(self) -> list[np.ndarray]:
        """Give a mask slot to each edge whose absent rows are not already zero; return the masks.

        Values known to be zero need no mask: a buffer read before `lag` steps have
        run holds the scan's initial zeros, and pass-through descriptors (Offset,
        IfDefined, ...) of zeros are zeros.
        """
        steps = np.arange(self.num_steps)
        zero: dict[int, np.ndarray] = {}
        masks: list[np.ndarray] = []
        for m in self.order:
            known_zero = np.zeros(self.num_steps, dtype=bool)
            for pos, e in enumerate(self.edges[m]):
                if e.kind not in ("same", "lag"):
                    continue
                source = steps - e.lag
                outside = (source < 0) | (source >= self.num_steps)
                source_zero = outside.copy()
                source_zero[~outside] = zero[e.op][source[~outside]] if e.op in zero else False
                present = e.present()
                if not np.all(present | source_zero):
                    self.edges[m][pos] = dataclasses.replace(e, mask_slot=len(masks))
                    masks.append(present)
                known_zero = ~present | source_zero
            passes = passes_through(self.graph.layers[m])
            zero[m] = known_zero if passes and len(self.edges[m]) == 1 else np.zeros(self.num_steps, dtype=bool)
        return masks

    def _step_order(self, members: list[int]) -> list[int]:
        """The members in the order one step computes them: each after the members it reads at the same frame."""
        order: list[int] = []
        state: dict[int, int] = {}  # 1: on the path, 2: placed
        for root in members:
            if root in state:
                continue
            path = [(root, iter(self.edges[root]))]
            state[root] = 1
            while path:
                m, edges = path[-1]
                e = next(edges, None)
                if e is None:
                    path.pop()
                    state[m] = 2
                    order.append(m)
                elif e.kind == "same":
                    if state.get(e.op) == 1:
                        cycle = [n for n, _ in path]
                        raise PlanError(
                            "a cycle with no time offset: "
                            + " -> ".join(self.graph.describe(n) for n in cycle[cycle.index(e.op) :])
                        )
                    if e.op not in state:
                        state[e.op] = 1
                        path.append((e.op, iter(self.edges[e.op])))
        return order

    # ----- running ----------------------------------------------------------------------

    def _dims(self, ext_shapes: list[tuple[int, ...]]) -> dict[int, int]:
        """Each member's dim, from the graph's static shapes and the external operands' actual dims."""
        known = {e.op: int(ext_shapes[e.external][-1]) for e in self.externals}
        shapes = node_shapes(self.graph, known)
        dims = {m: static_dim(shapes, m) for m in self.order}
        missing = [m for m, d in dims.items() if d is None]
        if missing:
            raise PlanError("cannot infer the dims of " + ", ".join(self.graph.describe(m) for m in missing))
        return dims  # type: ignore[return-value]

    def _value(self, layer: Layer, args: list[jax.Array]) -> jax.Array:
        return step_value(layer, args, self.batch)

    def sequence_reads(self, reads: Mapping[tuple[int, int], jax.Array] | None) -> jax.Array | None:
        """The optional reads' per-sequence masks per step, `[steps, reads, batch]`, from the Computation's
        masks per (member, operand position) (`[member rows, batch]`); None without sequence ends."""
        if not self.optional_reads or reads is None:
            return None
        per_read = []
        for key, row_at_step in self.optional_reads:
            rows = reads[key][np.maximum(row_at_step, 0)]
            per_read.append(rows & jnp.asarray(row_at_step >= 0)[:, None])
        return jnp.stack(per_read, axis=1)

    def operands(
        self,
        ext_values: tuple[jax.Array, ...],
        static_values: tuple[jax.Array, ...],
        given_values: tuple[jax.Array, ...] = (),
    ) -> _Operands:
        """The group's operands per frame, its initial buffers and the given values (`[rows, batch, dim]`)."""
        batch = self.batch
        statics = dict(zip(self.statics, static_values, strict=True))
        given = {m: as_frames(v, batch) for m, v in zip(self.given, given_values, strict=True)}
        xs_ext = tuple(e.gather(as_frames(v, batch)) for e, v in zip(self.externals, ext_values, strict=True))
        dims = self._dims([x.shape for x in xs_ext])
        dtype = jnp.result_type(*(x.dtype for x in xs_ext)) if xs_ext else jnp.result_type(float)
        carry0 = {}
        for op in self.depth:
            source = given[op] if op in given else jnp.zeros((0, batch, dims[op]), dtype)
            carry0[op] = self.carry_maps[op](source.astype(dtype))
        return _Operands(xs_ext, statics, carry0, given, dims, dtype)

    def lane(self, ops: _Operands, reads: jax.Array | None = None) -> Lane:
        """The group as a fused-scan lane (only for the `fused` lowering: it traces the members' `vjp`s)."""
        return Lane(
            self.frames, ops.xs_ext, ops.statics, ops.carry0, self.masks, ops.dims, ops.dtype, self.reverse, reads
        )

    def finish(self, ys: Sequence[jax.Array], given: Mapping[int, jax.Array]) -> list[jax.Array]:
        """The exported members' rows: the given ones first, then the scan's frames, flattened."""
        flat = []
        for m, y in zip(self.exported, ys, strict=True):
            if m in given:
                y = jnp.concatenate([given[m].astype(y.dtype), y], axis=0)
            flat.append(y.reshape(y.shape[0] * self.batch, y.shape[-1]))
        return flat

    def scan(
        self,
        ext_values: tuple[jax.Array, ...],
        static_values: tuple[jax.Array, ...],
        given_values: tuple[jax.Array, ...] = (),
        reads: jax.Array | None = None,
    ) -> list[jax.Array]:
        """All exported members' values, by the group's lowering: `[given rows + steps, batch, dim]` each, flattened."""
        ops = self.operands(ext_values, static_values, given_values)
        if self.lowering == "fused":
            return self.finish(fused_scan([self.lane(ops, reads)])[0], ops.given)
        return self.finish(self._plain_scan(ops.xs_ext, ops.statics, ops.carry0, ops.dtype, reads), ops.given)

    def _plain_scan(
        self,
        xs_ext: tuple[jax.Array, ...],
        statics: Mapping[int, jax.Array],
        carry0: Mapping[int, jax.Array],
        dtype: Any,
        reads: jax.Array | None = None,
    ) -> tuple[jax.Array, ...]:
        """The exported members' values per frame by one `lax.scan` of `step_value`."""
        masks = jnp.asarray(self.masks)

        def step(carry: Any, xs: Any) -> tuple[Any, Any]:
            ext, mask, step_reads = xs
            lagged = lambda op, k: carry[op][k - 1]  # noqa: E731
            read = operand_reader(statics, dict(enumerate(ext)), lagged, frame_mask(mask), frame_reads(step_reads))
            vals: dict[int, jax.Array] = {}
            for m in self.order:
                args = [read(e, vals) for e in self.edges[m]]
                vals[m] = self._value(self.graph.layers[m], args).astype(dtype)
            new = {
                op: vals[op][None] if len(buf) == 1 else jnp.concatenate([vals[op][None], buf[:-1]], axis=0)
                for op, buf in carry.items()
            }
            return new, tuple(vals[m] for m in self.exported)

        per_frame: tuple[jax.Array, ...] = jax.lax.scan(
            step, dict(carry0), (xs_ext, masks, reads), reverse=self.reverse
        )[1]
        return per_frame

    def tapes(
        self,
        tapes: dict[int, Tape],
        rows: Mapping[int, Any],
        params: Any,
        given: Mapping[int, Tape] | None = None,
        reads: Mapping[tuple[int, int], jax.Array] | None = None,
    ) -> None:
        """Add the group's Tape node and one selection tape per exported member to `tapes`."""
        scan_tapes([self], tapes, rows, params, given, reads)

    def exported_dims(self, ext_values: tuple[jax.Array, ...], static_values: tuple[jax.Array, ...]) -> list[int]:
        """The dims of the exported members, given the scan's operand values."""
        xs_shapes: list[tuple[int, ...]] = [(self.num_steps, self.batch, v.shape[-1]) for v in ext_values]
        dims = self._dims(xs_shapes)
        return [dims[m] for m in self.exported]


def scan_tapes(
    blocks: Sequence[RecurrentBlock],
    tapes: dict[int, Tape],
    rows: Mapping[int, Any],
    params: Any,
    given: Mapping[int, Tape] | None = None,
    reads: Mapping[tuple[int, int], jax.Array] | None = None,
) -> None:
    """Run scanned groups in one loop; add their Tape node and one selection tape per exported member to `tapes`.

    Several groups (independent of each other, with the same frames: the two
    directions of a bidirectional layer) share the loop, each running through
    the frames in its own direction. `reads` are the per-sequence masks of
    optional reads, by (member, operand position), in a request with sequence ends.
    """
    given = given or {}
    block_reads = [b.sequence_reads(reads) for b in blocks]
    operands = []
    for b in blocks:
        ext = tuple(tapes[e.op] for e in b.externals)
        operands.append((ext, tuple(tapes[op] for op in b.statics), tuple(given[m] for m in b.given)))
    upstream = tuple(t for ext, st, gv in operands for t in ext + st + gv)

    def fn(*values: jax.Array) -> jax.Array:
        parts, at_value = [], 0
        split = []
        for ext, st, gv in operands:
            n_ext, n_st, n_gv = len(ext), len(st), len(gv)
            chunk = values[at_value : at_value + n_ext + n_st + n_gv]
            split.append((chunk[:n_ext], chunk[n_ext : n_ext + n_st], chunk[n_ext + n_st :]))
            at_value += n_ext + n_st + n_gv
        if len(blocks) == 1:
            parts.extend(blocks[0].scan(*split[0], block_reads[0]))
        else:  # merged groups are all fused (scan_merge): one loop
            ops = [b.operands(*args) for b, args in zip(blocks, split, strict=True)]
            lanes = [b.lane(o, rd) for b, o, rd in zip(blocks, ops, block_reads, strict=True)]
            for b, ys, o in zip(blocks, fused_scan(lanes), ops, strict=True):
                parts.extend(b.finish(ys, o.given))
        if len(parts) == 1:
            return parts[0]
        longest = max(p.shape[0] for p in parts)  # members with more given rows are longer
        return jnp.concatenate([jnp.pad(p, ((0, longest - p.shape[0]), (0, 0))) for p in parts], axis=-1)

    value, vjp = linearized(fn, *(t.value for t in upstream))
    layer = Recurrence(tuple(b.graph.layers[m] for b in blocks for m in b.order))
    block_tape = Tape(layer, value, upstream, pullback=vjp, parameters=params)
    start = 0
    for b, (ext, st, _) in zip(blocks, operands, strict=True):
        widths = b.exported_dims(tuple(t.value for t in ext), tuple(t.value for t in st))
        # Exported members have different numbers of given rows: split columns, then rows.
        for m, width in zip(b.exported, widths, strict=True):
            rowmap, begin = b.out_maps[m], start

            def select(
                v: jax.Array, rowmap: RowMap = rowmap, begin: int = begin, width: int = width, batch: int = b.batch
            ) -> jax.Array:
                cols = v[: rowmap.num_src * batch, begin : begin + width]
                return as_flat_rows(rowmap(as_frames(cols, batch)))

            member_value, member_vjp = linearized(select, value)
            tapes[m] = Tape(
                b.graph.layers[m], member_value, (block_tape,), rows=rows[m], pullback=member_vjp, parameters=params
            )
            start += width
