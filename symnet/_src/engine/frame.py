"""One frame of a recurrence: its members' values, and their deltas read back from saved values.

A scanned group (`recurrence.RecurrentBlock`) computes its members for all
sequences of one frame at a time (`[batch, dim]` values). `FrameProgram` is
that per-frame program, lowered the way XLA runs it fastest:

- Sigmoid and Tanh members at the same depth of the frame (an LSTM's four
  gates, a GRU's update and reset gates) are one `tanh` over their arguments
  side by side (`sigmoid(x) = (1 + tanh(x / 2)) / 2`): XLA's CPU backend
  vectorises a loop with one transcendental function and emits scalar code for
  a fusion of several.
- The backward pass of a frame pulls deltas through the members' own `vjp`s,
  reading the forward values they use (found by tracing each `vjp`: only
  those frames' values are saved; a Sigmoid or Tanh of a saved member, an
  LSTM's `tanh(c)`, is computed again from it instead). A
  `Dot(member, weight)` passes `d @ W^T` back inside the loop and leaves its
  weight gradient for after it (`deferred`): one
  `[frames * batch, k]^T [frames * batch, m]` product instead of a small one
  per frame.

Edges are `recurrence`'s: kind `static` (weights, literals), `external` (a
value from outside the group), `same` (a member at this frame) or `lag` (a
member `lag` frames back), with a mask slot where the descriptor reads absent
rows (zeros there).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError, ShapeError, at
from ..core.arithmetic import Dot
from ..core.descriptor import Combine, Descriptor, Node
from ..core.elementwise import Sigmoid, Tanh
from ..core.layer import Layer
from .semantics import combine

__all__ = ["ActivationGroup", "FrameProgram", "Needs", "passes_through", "step_value"]


def passes_through(layer: Layer) -> bool:
    """Whether a member's value is its one operand's row, moved (a Node, an Offset, an IfDefined, ...)."""
    return isinstance(layer, Node) or combine(layer) is Combine.FORWARD


def step_value(layer: Layer, args: list[jax.Array], batch: int) -> jax.Array:
    """A node's value at one frame (`[batch, dim]`) from its operands' values there.

    Descriptors move nothing within one frame: the scan's buffers and masks have
    already done their row movement.
    """
    how = combine(layer)
    if how is Combine.APPEND:
        return jnp.concatenate(args, axis=-1)
    if how is Combine.SUM:
        dims = {a.shape[-1] for a in args}
        if len(dims) > 1:
            raise ShapeError(f"{type(layer).__name__}: parts of different dims {sorted(dims)}{at(layer.where)}")
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if how is Combine.FORWARD:
        return args[0]
    if how is Combine.CONST:
        assert isinstance(layer, Descriptor) and layer.output_dim is not None
        return layer.constant((batch, layer.output_dim), jnp.result_type(float))
    if not layer.rowwise:
        raise PlanError(f"{type(layer).__name__} cannot be part of a recurrence{at(layer.where)}")
    layer.check(*(tuple(a.shape) for a in args))
    return layer.apply(*args)


class ActivationGroup:
    """Sigmoid/Tanh members with no path between them, evaluated as one `tanh` over their arguments side by side.

    `key` (negative, never a node id) names the `tanh`'s value among the frame's
    values: the backward saves it once, and each member's value is a slice of
    it (`(1 + t) / 2` for a sigmoid). When the arguments are adjacent column
    ranges of one member (an LSTM's `DimRange`s of its gate pre-activations),
    the `tanh` reads that member's columns directly.
    """

    def __init__(self, key: int, members: list[int], layers: Mapping[int, Layer], edges: Mapping[int, Sequence[Any]]):
        self.key = key
        self.layers = layers

        def column_range(m: int) -> tuple[Any, int, int] | None:
            e = edges[m][0]
            rng = layers[e.op]
            columns = rng.column_range() if isinstance(rng, Descriptor) else None
            if e.kind != "same" or e.mask_slot >= 0 or columns is None:
                return None
            (src,) = edges[e.op]
            if src.kind != "same" or src.mask_slot >= 0:
                return None
            return src, columns[0], columns[1]

        ranges = {m: column_range(m) for m in members}

        def order(m: int) -> tuple[int, int]:
            r = ranges[m]
            return (r[0].op, r[1]) if r else (-1, 0)

        self.members = sorted(members, key=order)
        self.arg_edges = [edges[m][0] for m in self.members]
        found = [ranges[m] for m in self.members]
        spans = [sp for sp in found if sp is not None]
        self.source: tuple[Any, int, int] | None = None  # (edge, first column, end column)
        if (
            len(spans) == len(found)
            and len({sp[0].op for sp in spans}) == 1
            and all(a[1] + a[2] == b[1] for a, b in zip(spans, spans[1:]))
        ):
            self.source = (spans[0][0], spans[0][1], spans[-1][1] + spans[-1][2])

    def tanh(
        self,
        read: Callable[[Any, Mapping[int, jax.Array]], jax.Array],
        vals: Mapping[int, jax.Array],
        widths: Sequence[int],
        dtype: Any,
    ) -> jax.Array:
        """The one `tanh` of the members' arguments (each sigmoid's halved), `[batch, sum of widths]`."""
        if self.source is not None:
            edge, lo, hi = self.source
            x = read(edge, vals)[..., lo:hi]
        else:
            x = jnp.concatenate([read(e, vals) for e in self.arg_edges], axis=-1)
        scale = np.concatenate(
            [np.full(w, 0.5 if isinstance(self.layers[m], Sigmoid) else 1.0) for m, w in zip(self.members, widths)]
        )
        t = jnp.tanh(x * jnp.asarray(scale, dtype))
        fused: jax.Array = jax.lax.optimization_barrier(t)  # one loop: the members' users read slices of it
        return fused

    def pieces(self, t: jax.Array, widths: Sequence[int]) -> dict[int, jax.Array]:
        """Each member's value, from the `tanh`."""
        out, start = {}, 0
        for m, w in zip(self.members, widths):
            piece = t[..., start : start + w]
            out[m] = piece * 0.5 + 0.5 if isinstance(self.layers[m], Sigmoid) else piece
            start += w
        return out


def _resolvable(layer: Layer, num_edges: int) -> bool:
    """Whether a member's value is its operands' (moved rows, columns side by side, sums): never saved."""
    how = combine(layer)
    return how in (Combine.APPEND, Combine.CONST, Combine.SUM) or (passes_through(layer) and num_edges == 1)


class Needs:
    """The forward values a backward computation reads: saved members, resolved members, lags, externals."""

    def __init__(self) -> None:
        self.stored: set[int] = set()
        self.resolved: set[int] = set()
        self.lags: set[tuple[int, int]] = set()  # (member, frames back): its saved values shifted
        self.externals: set[int] = set()


class FrameProgram:
    """The per-frame program of one scanned group and what its backward pass reads."""

    def __init__(
        self,
        layers: Mapping[int, Layer],
        order: Sequence[int],
        edges: Mapping[int, Sequence[Any]],
        exported: Sequence[int],
        depth: Mapping[int, int],
        batch: int,
    ):
        self.layers = layers
        self.order = list(order)
        self.edges = edges
        self.exported = list(exported)
        self.depth = dict(depth)
        self.batch = batch
        self.deferred = [m for m in self.order if self._deferrable(m)]
        self.groups = [ActivationGroup(-1 - k, g, layers, edges) for k, g in enumerate(self._activation_groups())]
        self.group_of = {m: g for g in self.groups for m in g.members}
        self.units = self._units([g.members for g in self.groups])

    # ----- analysis (plan time) -------------------------------------------------------

    def _deferrable(self, m: int) -> bool:
        """A `Dot(member, weight)`: its weight gradient can wait until after the loop."""
        edges = self.edges[m]
        return (
            type(self.layers[m]) is Dot
            and len(edges) == 2
            and edges[0].kind in ("same", "lag")
            and edges[1].kind == "static"
        )

    def _activation_groups(self) -> list[list[int]]:
        """Sigmoid/Tanh members by depth (activations above them in the frame); groups of two or more."""
        above: dict[int, int] = {}
        levels: dict[int, list[int]] = {}
        for m in self.order:
            base = max((above[e.op] for e in self.edges[m] if e.kind == "same"), default=0)
            if type(self.layers[m]) in (Sigmoid, Tanh) and len(self.edges[m]) == 1:
                above[m] = base + 1
                levels.setdefault(base + 1, []).append(m)
            else:
                above[m] = base
        return [group for group in levels.values() if len(group) > 1]

    def _units(self, groups: list[list[int]]) -> list[tuple[int, ...]]:
        """The frame's evaluation order with each activation group as one unit (Kahn's algorithm)."""
        unit_of: dict[int, tuple[int, ...]] = {m: (m,) for m in self.order}
        for group in groups:
            for m in group:
                unit_of[m] = tuple(group)
        position = {m: i for i, m in enumerate(self.order)}
        units = sorted(set(unit_of.values()), key=lambda u: position[u[0]])
        waiting: dict[tuple[int, ...], int] = {}
        users: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for u in units:
            deps = {unit_of[e.op] for m in u for e in self.edges[m] if e.kind == "same"} - {u}
            waiting[u] = len(deps)
            for dep in deps:
                users.setdefault(dep, []).append(u)
        ready = deque(u for u in units if not waiting[u])
        out: list[tuple[int, ...]] = []
        while ready:
            u = ready.popleft()
            out.append(u)
            for v in users.get(u, ()):
                waiting[v] -= 1
                if not waiting[v]:
                    ready.append(v)
        return out

    def needs(self, roots: Sequence[tuple[str, Any]]) -> Needs:
        """What computing the values `roots` (('member', m) or ('edge', edge)) reads."""
        found = Needs()
        work = list(roots)
        while work:
            kind, item = work.pop()
            if kind == "edge":
                e = item
                if e.kind == "external":
                    found.externals.add(e.external)
                elif e.kind == "lag":
                    found.lags.add((e.op, abs(e.lag)))
                    found.stored.add(e.op)
                elif e.kind == "same":
                    work.append(("member", e.op))
                continue
            m = item
            if m in found.stored or m in found.resolved:
                continue
            if m in self.group_of:  # a slice of its group's tanh
                found.resolved.add(m)
                found.stored.add(self.group_of[m].key)
            elif _resolvable(self.layers[m], len(self.edges[m])):
                found.resolved.add(m)
                work.extend(("edge", e) for e in self.edges[m])
            else:
                found.stored.add(m)
        # A Sigmoid or Tanh of a saved member is computed again from it rather than saved: one transcendental
        # pass a frame costs less than writing each frame's value out and the buffer of all frames it fills.
        for m in sorted(found.stored):
            edges = self.edges.get(m, ())
            if (
                type(self.layers.get(m)) in (Sigmoid, Tanh)
                and len(edges) == 1
                and edges[0].kind == "same"
                and edges[0].mask_slot < 0
                and edges[0].dyn < 0
                and edges[0].op in found.stored
            ):
                found.stored.discard(m)
                found.resolved.add(m)
        return found

    def without_vjp(self) -> list[int]:
        """The members whose delta the backward loop would pull through a `vjp` their layer does not define."""
        return [
            m
            for m in self.order
            if not (m in self.deferred or _resolvable(self.layers[m], len(self.edges[m])))
            and type(self.layers[m]).vjp is Layer.vjp
        ]

    def vjp_reads(
        self,
        shapes: Mapping[int, tuple[int, ...]],
        static_shapes: Mapping[int, Any],
        ext_shapes: Sequence[tuple[int, ...]],
        dtype: Any,
    ) -> dict[int, tuple[bool, list[bool]]]:
        """Per member whose `vjp` runs in the loop: whether it reads its value, and which operands."""
        reads: dict[int, tuple[bool, list[bool]]] = {}
        for m in self.order:
            layer = self.layers[m]
            if m in self.deferred or _resolvable(layer, len(self.edges[m])):
                continue  # reads no values inside the loop (a deferred Dot reads its weight only)

            def spec(e: Any) -> Any:
                if e.kind == "static":
                    return static_shapes[e.op]
                shape = ext_shapes[e.external] if e.kind == "external" else shapes[e.op]
                return jax.ShapeDtypeStruct(shape, dtype)

            out = jax.ShapeDtypeStruct(shapes[m], dtype)
            reads[m] = _vjp_uses(layer, out, [spec(e) for e in self.edges[m]])
        return reads

    @staticmethod
    def read_roots(
        edges: Mapping[int, Sequence[Any]], reads: Mapping[int, tuple[bool, list[bool]]]
    ) -> list[tuple[str, Any]]:
        """`vjp_reads` as roots for `needs`."""
        roots: list[tuple[str, Any]] = []
        for m, (uses_value, uses_args) in reads.items():
            if uses_value:
                roots.append(("member", m))
            roots.extend(("edge", e) for e, used in zip(edges[m], uses_args) if used)
        return roots

    # ----- values (forward) -----------------------------------------------------------

    def values(
        self, read: Callable[[Any, Mapping[int, jax.Array]], jax.Array], dims: Mapping[int, int], dtype: Any
    ) -> dict[int, jax.Array]:
        """Every member's value at one frame (and each group's `tanh`); `read(edge, values so far)` reads an operand."""
        vals: dict[int, jax.Array] = {}
        for unit in self.units:
            if unit[0] in self.group_of:
                group = self.group_of[unit[0]]
                widths = [dims[m] for m in group.members]
                vals[group.key] = t = group.tanh(read, vals, widths, dtype).astype(dtype)
                vals.update(group.pieces(t, widths))
            else:
                m = unit[0]
                vals[m] = step_value(self.layers[m], [read(e, vals) for e in self.edges[m]], self.batch).astype(dtype)
        return vals

    def resolve(
        self,
        needs: Needs,
        read: Callable[[Any, Mapping[int, jax.Array]], jax.Array],
        stored: Mapping[int, jax.Array],
        rows: tuple[int, ...],
        dims: Mapping[int, int],
        dtype: Any,
    ) -> dict[int, jax.Array]:
        """Saved members' values and the resolved ones computed from them (per frame or all frames at once)."""
        vals = dict(stored)
        for group in self.groups:
            if group.key in stored:
                vals.update(group.pieces(stored[group.key], [dims[m] for m in group.members]))
        for m in self.order:
            if m not in needs.resolved or m in self.group_of:
                continue
            layer = self.layers[m]
            args = [read(e, vals) for e in self.edges[m]]
            how = combine(layer)
            if how is Combine.CONST:
                assert isinstance(layer, Descriptor) and layer.output_dim is not None
                vals[m] = layer.constant(rows + (layer.output_dim,), dtype)
            elif how is Combine.APPEND:
                vals[m] = jnp.concatenate(args, axis=-1)
            elif how is Combine.SUM:
                vals[m] = sum(args[1:], args[0])
            elif isinstance(layer, (Sigmoid, Tanh)):  # recomputed (`needs`)
                vals[m] = layer.apply(*args).astype(dtype)
            else:
                vals[m] = args[0]
        return vals

    # ----- deltas (backward) ----------------------------------------------------------

    def member_vjp(
        self,
        m: int,
        d: jax.Array,
        value: Callable[[], jax.Array],
        args: Callable[[], list[jax.Array]],
        statics: Mapping[int, jax.Array],
        widths: Callable[[], Sequence[int]],
    ) -> Sequence[jax.Array | None]:
        """The deltas of member `m`'s operands (one per edge; None for none), given its delta at this frame.

        `value()` and `args()` give the forward values; `widths()` the operands' dims. For a deferred
        Dot, `statics` maps its weight to the weight transposed.
        """
        layer, edges = self.layers[m], self.edges[m]
        if m in self.deferred:
            # `statics` holds the weight transposed (made once, before the loop); its gradient comes after the loop
            return (jnp.matmul(d, statics[edges[1].op]), None)
        how = combine(layer)
        if how is Combine.APPEND:
            out, start = [], 0
            for width in widths():
                out.append(d[..., start : start + width])
                start += width
            return out
        if how is Combine.SUM:
            return [d] * len(edges)
        if passes_through(layer):
            return (d,)
        if how is Combine.CONST:
            return ()
        return layer.vjp(d, value(), *args())


def _vjp_uses(layer: Layer, value: Any, args: list[Any]) -> tuple[bool, list[bool]]:
    """Which of (value, operands) `layer.vjp` reads, from the jaxpr it traces to.

    A vjp that fails on these shapes is taken to read everything: the forward
    pass then raises the layer's own error (its `check`), naming the layer.
    """
    try:
        closed = jax.make_jaxpr(lambda d, v, *a: layer.vjp(d, v, *a))(value, value, *args)
    except NotImplementedError:
        raise
    except Exception:
        return True, [True] * len(args)
    jaxpr = closed.jaxpr
    used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
    flags = [id(v) in used for v in jaxpr.invars]
    return flags[1], flags[2:]
