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
per-frame masks computed in numpy.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import IfDefined, Node, Offset, ReplaceIndex, Round
from ..errors import PlanError
from ..core.index import decode
from ..core.layer import Layer, layer_class
from ..core.tape import Tape
from .dims import node_shapes, static_dim
from .frame import FrameProgram, step_value
from .fused_scan import fused_scan
from .rowmap import RowMap

_PLAIN_SCANS = contextvars.ContextVar("plain_scans", default=False)


@contextlib.contextmanager
def plain_scans() -> Iterator[None]:
    """Lower recurrences traced inside to a plain `lax.scan` that JAX differentiates (the fused scan's reference)."""
    token = _PLAIN_SCANS.set(True)
    try:
        yield
    finally:
        _PLAIN_SCANS.reset(token)


def _rows3(value: jax.Array, batch: int) -> jax.Array:
    return value.reshape(value.shape[0] // batch, batch, value.shape[-1])


def _flat(value: jax.Array) -> jax.Array:
    return value.reshape(value.shape[0] * value.shape[1], value.shape[2])


@layer_class
class Recurrence(Layer):
    """The Tape's node for one scanned group: its members, in evaluation order."""

    members: tuple[Layer, ...]

    rowwise = False


def strongly_connected(nodes: list[int], operands: list[tuple[int, ...]]) -> list[list[int]]:
    """Tarjan's components of the subgraph on `nodes`, operands' components first."""
    inside = set(nodes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(operands[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            nid, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in inside:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(operands[nxt])))
                elif nxt in on_stack:
                    low[nid] = min(low[nid], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[nid])
            if low[nid] == index[nid]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == nid:
                        break
                out.append(sorted(group))
    return out


class _Edge:
    __slots__ = ("kind", "op", "lag", "mask", "rowmap", "slot")

    def __init__(self, kind: str, op: int, lag: int = 0, mask: np.ndarray | None = None, rowmap: RowMap | None = None):
        self.kind, self.op, self.lag, self.mask, self.rowmap = kind, op, lag, mask, rowmap
        self.slot = -1  # index into the per-step masks or external inputs


class RecurrentBlock:
    """The plan of one scanned group: steps, edges, buffers and what leaves the scan."""

    def __init__(
        self,
        graph: Any,
        members: list[int],
        rows: Mapping[int, Any],
        maps: Mapping[int, tuple],
        exported: list[int],
        given: Mapping[int, np.ndarray] | None = None,
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
        self.num_steps = int(t_all.max()) - self.t0 + 1
        # Steps of every row; rows the request gives lie outside 0 .. num_steps - 1.
        self.step_of = {m: step_t[m] - self.t0 for m in members}
        self.edges: dict[int, list[_Edge]] = {}
        externals: list[_Edge] = []
        lags: set[int] = set()
        member_set = set(members)
        for m in members:
            edges = []
            for pos, op in enumerate(graph.operands[m]):
                if not graph.indexed[op]:
                    edges.append(_Edge("static", op))
                    continue
                src = maps[m][pos].src
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
                    edge = _Edge("external", op, rowmap=RowMap(src_step, maps[m][pos].num_src))
                    edge.slot = len(externals)
                    externals.append(edge)
                edges.append(edge)
            self.edges[m] = edges
        if any(lag > 0 for lag in lags) and any(lag < 0 for lag in lags):
            raise PlanError(
                "a recurrence reads both earlier and later frames of itself: "
                + ", ".join(graph.describe(m) for m in members)
            )
        self.reverse = any(lag < 0 for lag in lags)
        self.externals = externals
        self.order = self._step_order(members)
        masks = self._needed_masks()
        self.masks = np.stack(masks, axis=1) if masks else np.zeros((self.num_steps, 0), dtype=bool)
        self.depth: dict[int, int] = {}
        for m in members:
            for e in self.edges[m]:
                if e.kind == "lag":
                    self.depth[e.op] = max(self.depth.get(e.op, 0), abs(e.lag))
        self.statics = sorted({e.op for m in members for e in self.edges[m] if e.kind == "static"})
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
                given_steps = decode(given[op])[1] - self.t0
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
            {m: graph.layers[m] for m in members}, self.order, self.edges, exported, self.depth, self.batch
        )

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
            for e in self.edges[m]:
                if e.kind not in ("same", "lag"):
                    continue
                source = steps - e.lag
                outside = (source < 0) | (source >= self.num_steps)
                source_zero = outside.copy()
                source_zero[~outside] = zero[e.op][source[~outside]] if e.op in zero else False
                if not np.all(e.mask | source_zero):
                    e.slot = len(masks)
                    masks.append(e.mask)
                known_zero = ~e.mask | source_zero
            passes = isinstance(self.graph.layers[m], (Offset, IfDefined, Round, ReplaceIndex, Node))
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
        known = {e.op: int(ext_shapes[e.slot][-1]) for e in self.externals}
        shapes = node_shapes(self.graph, known)
        dims = {m: static_dim(shapes, m) for m in self.order}
        missing = [m for m, d in dims.items() if d is None]
        if missing:
            raise PlanError("cannot infer the dims of " + ", ".join(self.graph.describe(m) for m in missing))
        return dims  # type: ignore[return-value]

    def _value(self, layer: Layer, args: list[jax.Array]) -> jax.Array:
        return step_value(layer, args, self.batch)

    def scan(
        self,
        ext_values: tuple[jax.Array, ...],
        static_values: tuple[jax.Array, ...],
        given_values: tuple[jax.Array, ...] = (),
    ) -> jax.Array:
        """All exported members' values: `[given rows + steps, batch, sum of dims]`, flattened to rows."""
        batch = self.batch
        statics = dict(zip(self.statics, static_values))
        given = {m: _rows3(v, batch) for m, v in zip(self.given, given_values)}
        xs_ext = tuple(e.rowmap(_rows3(v, batch)) for e, v in zip(self.externals, ext_values))
        dims = self._dims([x.shape for x in xs_ext])
        dtype = jnp.result_type(*(x.dtype for x in xs_ext)) if xs_ext else jnp.result_type(float)
        carry0 = {}
        for op, depth in self.depth.items():
            source = given[op] if op in given else jnp.zeros((0, batch, dims[op]), dtype)
            carry0[op] = self.carry_maps[op](source.astype(dtype))
        if not _PLAIN_SCANS.get():
            try:
                ys = fused_scan(
                    self.frames, xs_ext, statics, carry0, self.masks, reverse=self.reverse, dims=dims, dtype=dtype
                )
            except NotImplementedError:  # a member without a vjp: JAX differentiates its apply
                ys = self._plain_scan(xs_ext, statics, carry0, dtype)
        else:
            ys = self._plain_scan(xs_ext, statics, carry0, dtype)
        flat = []
        for m, y in zip(self.exported, ys):
            if m in given:  # the given rows come first, then the steps
                y = jnp.concatenate([given[m].astype(y.dtype), y], axis=0)
            flat.append(y.reshape(y.shape[0] * batch, y.shape[-1]))
        return flat

    def _plain_scan(
        self,
        xs_ext: tuple[jax.Array, ...],
        statics: Mapping[int, jax.Array],
        carry0: Mapping[int, jax.Array],
        dtype: Any,
    ) -> tuple[jax.Array, ...]:
        """The exported members' values per frame by one `lax.scan` of `step_value`."""
        masks = jnp.asarray(self.masks)

        def step(carry, xs):
            ext, mask = xs
            vals: dict[int, jax.Array] = {}
            for m in self.order:
                args = []
                for e in self.edges[m]:
                    if e.kind == "static":
                        v = statics[e.op]
                    elif e.kind == "external":
                        v = ext[e.slot]
                    else:
                        v = vals[e.op] if e.kind == "same" else carry[e.op][abs(e.lag) - 1]
                        if e.slot >= 0:
                            v = jnp.where(mask[e.slot], v, jnp.zeros_like(v))
                    args.append(v)
                vals[m] = self._value(self.graph.layers[m], args).astype(dtype)
            new = {
                op: vals[op][None] if len(buf) == 1 else jnp.concatenate([vals[op][None], buf[:-1]], axis=0)
                for op, buf in carry.items()
            }
            return new, tuple(vals[m] for m in self.exported)

        return jax.lax.scan(step, dict(carry0), (xs_ext, masks), reverse=self.reverse)[1]

    def tapes(
        self, tapes: dict[int, Tape], rows: Mapping[int, Any], params: Any, given: Mapping[int, Tape] | None = None
    ) -> None:
        """Add the group's Tape node and one selection tape per exported member to `tapes`."""
        given = given or {}
        ext_tapes = tuple(tapes[e.op] for e in self.externals)
        static_tapes = tuple(tapes[op] for op in self.statics)
        given_tapes = tuple(given[m] for m in self.given)
        n_ext, n_static = len(ext_tapes), len(static_tapes)

        def fn(*values):
            parts = self.scan(values[:n_ext], values[n_ext : n_ext + n_static], values[n_ext + n_static :])
            if len(parts) == 1:
                return parts[0]
            longest = max(p.shape[0] for p in parts)  # members with more given rows are longer
            return jnp.concatenate([jnp.pad(p, ((0, longest - p.shape[0]), (0, 0))) for p in parts], axis=-1)

        upstream = ext_tapes + static_tapes + given_tapes
        value, vjp = jax.vjp(fn, *(t.value for t in upstream))
        layer = Recurrence(tuple(self.graph.layers[m] for m in self.order))
        block = Tape(layer, value, upstream, pullback=vjp, parameters=params)
        widths = self.exported_dims(tuple(t.value for t in ext_tapes), tuple(t.value for t in static_tapes))
        # Exported members have different numbers of given rows: split columns, then rows.
        start = 0
        for m, width in zip(self.exported, widths):
            rowmap, begin = self.out_maps[m], start
            num_rows = rowmap.num_src

            def select(v, rowmap=rowmap, begin=begin, width=width, num_rows=num_rows):
                cols = v[: num_rows * self.batch, begin : begin + width]
                return _flat(rowmap(_rows3(cols, self.batch)))

            member_value, member_vjp = jax.vjp(select, value)
            tapes[m] = Tape(
                self.graph.layers[m], member_value, (block,), rows=rows[m], pullback=member_vjp, parameters=params
            )
            start += width

    def exported_dims(self, ext_values: tuple, static_values: tuple) -> list[int]:
        """The dims of the exported members, given the scan's operand values."""
        statics = dict(zip(self.statics, static_values))
        xs_shapes = [(self.num_steps, self.batch, v.shape[-1]) for v in ext_values]
        dims = self._dims(xs_shapes)
        return [dims[m] for m in self.exported]
