"""A planned computation: row maps fixed in numpy, run as one jitted JAX function.

`compile(network, request, lowering=...)` (engine/compiling.py) plans eagerly and caches by (network
structure, request, lowering). Calling the Computation runs the jitted program;
`forward` builds the Tape (one tape node per network node, each knowing its row
labels) so that `tape.backward` gives gradients through every row movement. A
request with `sequence_ends` takes each call's ends (`symnet._src.engine.ends`) and
masks its optional reads per sequence with them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from ..base.errors import PlanError, ShapeError
from ..core import html, rng
from ..core.descriptor import Combine, Descriptor, IndexedLayer
from ..core.layer import Layer, Literal, Weight
from ..core.precision import Precision
from ..core.structure import NetworkLike, Structure
from ..core.tape import Tape
from . import splice
from .attention import FusedAttention, attention_tape, find_attentions
from .dims import node_shapes, static_dim
from .ends import EndMasks, SequenceEnds
from .gradient import needs_autodiff, tape_differentiated
from .graph import Graph, strongly_connected
from .groups import SequenceGroups
from .layout import as_flat_rows, as_frames, as_layout, moved
from .plan import Planner
from .recurrence import Lowering, RecurrentBlock
from .request import ComputationRequest
from .rowmap import RowMap
from .scan_merge import MergedScans, run_schedule
from .semantics import combine
from .splice import Splice, find_splices, splice_value, spliced_rows
from .step_values import (
    IndexedRows,
    Rows,
    call_contexts,
    cast_tape,
    chained_pullback,
    compute_dtype,
    descriptor_fn,
    first_cotangent,
    leading_axes_safe,
    reshaped_tape,
    same,
    selection_tape,
)
from .values_only import linearized

__all__ = ["Computation"]


class _Step:
    """How one node is computed: its layer, operand node ids, and a RowMap per operand."""

    __slots__ = ("nid", "layer", "operands", "maps")

    def __init__(self, nid: int, layer: Layer, operands: tuple[int, ...], maps: tuple[RowMap | None, ...]):
        self.nid, self.layer, self.operands, self.maps = nid, layer, operands, maps


class Computation:
    """A compiled request: `computation(network, {input: matrix}) -> {output: matrix}`.

    A regular request's Computation also takes `[T, N, D]` arrays and then
    returns `[T, N, D]` outputs (see `__call__`).
    """

    def __init__(
        self,
        structure: Structure,
        graph: Graph,
        request: ComputationRequest,
        planner: Planner,
        lowering: Lowering = "auto",
        gradient: str = "tape",
        precision: Precision | None = None,
        groups: SequenceGroups | None = None,
        plain_recurrences: bool = False,
    ):
        #: The network structure it was compiled for: what it may be called with.
        self.structure = structure
        needed = planner.requirements()
        self.graph = graph
        self.request = request
        self.lowering = lowering  # what was asked for; each RecurrentBlock holds what it got
        # Every recurrence a plain scan, whatever `lowering` (the autodiff twin: JAX differentiates it in any mode).
        self.plain_recurrences = plain_recurrences
        self.gradient = gradient  # how jax.grad of a call differentiates it (symnet._src.engine.gradient)
        self.precision = precision  # the dtypes of parameters, compute and outputs (symnet._src.core.precision)
        self.groups = groups  # a call's sequences in groups run side by side (engine/groups.py), or None
        self.regular = planner.regular
        self.batch = planner.batch
        self.rows = {nid: Rows(k, planner.batch, planner.regular) for nid, k in enumerate(needed) if len(k)}
        self.output_ids = planner.output_ids
        self.given_state = {
            nid: keys for nid, keys in planner.given.items() if not graph.is_input[nid] and nid in self.rows
        }
        self.absorbed: frozenset[int] = frozenset()
        self.steps = self._steps(planner)
        # Sequence ends mask the optional reads of the nodes a step computes (and those a fused attention reads).
        picked = {nid for a in self.attentions.values() for nid, _, _ in a.picks}
        self.sequence_ends = (
            SequenceEnds(
                graph,
                request,
                {nid: r.keys for nid, r in self.rows.items() if nid not in self.absorbed or nid in picked},
                self.batch,
            )
            if request.sequence_ends
            else None
        )
        # The order to run the steps in, independent scans over the same frames merged (engine/scan_merge.py).
        self.schedule = run_schedule(self.steps, graph)
        self.input_maps = self._input_maps(planner)
        self.output_maps = {
            name: RowMap(
                np.searchsorted(planner.requirements()[self.output_ids[name]], keys),
                len(planner.requirements()[self.output_ids[name]]),
            )
            for name, keys in planner.wanted.items()
        }

        def computation(*args: Any) -> dict[str, jax.Array]:  # one name for the program either way
            return self._run(*args)

        self._autodiff = jax.jit(computation)  # JAX's autodiff of the program (`gradient="jax"`)
        self._jitted = self._autodiff
        self._planner = planner  # for the autodiff twin, made on first use (`_autodiff_twin`)
        self._twin: Computation | None = None
        if gradient == "tape":
            # A differentiated call's forward runs in groups of sequences where it has them (engine/groups.py).
            differentiated = self._tapes if groups is None else functools.partial(groups.tapes, self._tapes)
            self._jitted = jax.jit(tape_differentiated(self._tapes, call_contexts, differentiated))

    # ----- planning the steps -------------------------------------------------------

    def _steps(self, planner: Planner) -> list[_Step | RecurrentBlock]:
        """Evaluation units in order: single nodes, and scanned groups for recurrences."""
        graph = self.graph
        used = set(self.rows)
        # Unindexed operands (weights, literals) of used nodes are used too.
        stack = list(used)
        while stack:
            nid = stack.pop()
            for op in graph.operands[nid]:
                if op not in used and not graph.indexed[op]:
                    used.add(op)
                    stack.append(op)
        maps = {nid: self._row_maps(planner, nid) for nid in used}
        # Kept for inspection (symnet._src.engine.inspect): per node, scan members too, per operand.
        self.row_maps: dict[int, tuple[RowMap | None, ...]] = maps
        users: dict[int, set[int]] = {}
        for nid in used:
            for op in graph.operands[nid]:
                users.setdefault(op, set()).add(nid)
        outputs = set(self.output_ids.values())
        units: list[_Step | RecurrentBlock] = []
        for group in strongly_connected(sorted(used), graph.operands):
            nid = group[0]
            if len(group) == 1 and nid not in graph.operands[nid]:
                if nid in self.given_state:
                    raise PlanError(
                        f"the request gives values of {graph.describe(nid)}, which is not recurrent: "
                        "only recurrent nodes take given values (a state carried from an earlier chunk)"
                    )
                units.append(_Step(nid, graph.layers[nid], graph.operands[nid], maps[nid]))
                continue
            members = set(group)
            exported = [m for m in group if m in outputs or users.get(m, set()) - members]
            given = {m: self.given_state[m] for m in group if m in self.given_state}
            units.append(
                RecurrentBlock(
                    graph,
                    group,
                    self.rows,
                    maps,
                    exported,
                    given,
                    self.request.sequence_ends,
                    "plain" if self.plain_recurrences else self.lowering,
                )
            )
        self.splices = self._splices(units, maps, users, outputs)
        self.attentions = self._attentions(units, maps, users, outputs)
        return units

    def _attentions(
        self,
        units: Sequence[_Step | RecurrentBlock],
        maps: Mapping[int, tuple[RowMap | None, ...]],
        users: Mapping[int, set[int]],
        outputs: set[int],
    ) -> dict[int, FusedAttention]:
        """The attention nodes computed from their source's rows (engine/attention.py), by node id: in regular
        requests, under every lowering but `plain`."""
        if not self.regular or self.lowering == "plain":
            return {}
        single = {u.nid: maps[u.nid] for u in units if isinstance(u, _Step)}
        found = find_attentions(self.graph.layers, self.graph.operands, single, users, outputs)
        self.absorbed = self.absorbed | frozenset(n for a in found.values() for n in a.absorbed)
        return found

    def _splices(
        self,
        units: Sequence[_Step | RecurrentBlock],
        maps: Mapping[int, tuple[RowMap | None, ...]],
        users: Mapping[int, set[int]],
        outputs: set[int],
    ) -> dict[int, Splice]:
        """The spliced products lowered as convolutions (engine/splice.py), by node id: in regular requests
        without sequence ends, under `fused`, or `auto` on CPU (`splice.AUTO_BACKENDS`), products of at least
        `MIN_ROWS` rows."""
        if not self.regular or self.request.sequence_ends or not splice.convolutions(self.lowering):
            return {}
        single = {u.nid: maps[u.nid] for u in units if isinstance(u, _Step)}
        found = find_splices(self.graph.layers, self.graph.operands, single, users, outputs)
        found = {nid: s for nid, s in found.items() if len(self.rows[nid]) >= splice.MIN_ROWS}
        #: The nodes no step computes: each spliced product reads its source directly.
        self.absorbed = frozenset(n for s in found.values() for n in s.absorbed)
        return found

    def _row_maps(self, planner: Planner, nid: int) -> tuple[RowMap | None, ...]:
        """Per operand of `nid`: which operand row each of its rows reads (None: unindexed operand)."""
        graph, layer = self.graph, self.graph.layers[nid]
        maps: list[RowMap | None] = [None] * len(graph.operands[nid])
        if not graph.indexed[nid] or graph.is_input[nid]:
            return tuple(maps)
        keys = planner.requirements()[nid]
        if isinstance(layer, IndexedLayer):
            required, owner = layer.requirements(keys)
            ((_, _, available),) = planner.dependencies(nid, keys)
            src = np.searchsorted(planner.requirements()[graph.operands[nid][0]], required[available])
            maps[0] = IndexedRows(src, len(planner.requirements()[graph.operands[nid][0]]), owner[available], len(keys))
            return tuple(maps)
        deps = iter(planner.dependencies(nid, keys))
        for i, op in enumerate(graph.operands[nid]):
            if not graph.indexed[op]:
                continue
            op_id, child_keys, used_rows = next(deps)
            assert op_id == op
            src_keys = planner.requirements()[op]
            src = np.full(len(keys), -1, dtype=np.int64)
            if len(src_keys):
                src[used_rows] = np.searchsorted(src_keys, child_keys[used_rows])
            maps[i] = RowMap(src, len(src_keys))
        return tuple(maps)

    def _input_maps(self, planner: Planner) -> dict[str, tuple[int, RowMap]]:
        """Per given input or node state: its node id and the map from request order to sorted rows."""
        maps: dict[str, tuple[int, RowMap]] = {}
        for name, indexes in self.request.inputs.items():
            nid = self.graph.endpoint(name, "input")
            if nid not in self.rows:
                continue
            given = planner.provided[name]  # sorted
            grid = indexes.grid() if planner.regular else None
            order = grid[1] if grid is not None else indexes.keys  # a regular request's inputs are grids
            position = np.argsort(order, kind="stable")
            src = position[np.searchsorted(order[position], given)]
            maps[name] = (nid, RowMap(src, len(order)))
        return maps

    # ----- running ------------------------------------------------------------------

    def __call__(self, network: NetworkLike, inputs: Mapping[str, Any], ends: Any = None) -> dict[str, jax.Array]:
        """Output arrays for input arrays, in one of two layouts for the whole call.

        Flat: every input and output is a matrix with one row per Index, in the
        request's order. Batched (regular requests only): every input is a
        `[T, N, D]` array (its request's rows of one sequence, sequences, features;
        flat row `r * N + n` is `[r, n]`) and every output comes back `[T, N, D]`.
        Mixing the layouts in one call is a ShapeError naming the input.
        Inside `symnet.rng.randomness(key)` the key is an argument of the jitted
        program (training-mode dropout draws from it), never a constant of it;
        so are the proportions of a `symnet.rng.dropout_proportions` block.
        `ends` (one frame per sequence) is required by, and only taken by, a
        request with `sequence_ends`; it is an argument of the program too.
        Inside a `jax.jit` of your own, pass `end_masks(ends)` made outside it
        (planning the masks needs the ends as numbers, not tracers).
        """
        network = self._check_network(network)
        reads = self._read_masks(ends)
        inputs = self._check_inputs(inputs)
        proportions = {name: jnp.asarray(p, jnp.float32) for name, p in rng.active_proportions().items()}
        args = (network.params, network.state, inputs, rng.active_key(), reads, proportions)
        run = self._autodiff_twin() if needs_autodiff(args[:3]) else self._jitted
        outputs: dict[str, jax.Array] = run(*args)
        return outputs

    def _autodiff_twin(self) -> Callable[..., dict[str, jax.Array]]:
        """The program a forward-mode or second-order transform (`jax.jvp`, `jax.jacfwd`, `jax.hessian`,
        `jax.jacrev(jax.grad(f))`) runs: JAX's autodiff of this lowering with every recurrence a plain scan, made on
        first use. Neither the Tape's backward walk (engine/gradient.py) nor a fused scan's backward pass
        (engine/fused_scan.py), both `jax.custom_vjp`s, has a forward mode or is itself differentiated."""
        if self.gradient == "jax" and (self.plain_recurrences or self.lowering == "plain"):
            return self._autodiff
        if self._twin is None:
            self._twin = Computation(
                self.structure,
                self.graph,
                self.request,
                self._planner,
                self.lowering,
                "jax",
                self.precision,
                plain_recurrences=True,
            )
        return self._twin._autodiff

    def _run(
        self,
        params: Mapping[str, jax.Array],
        state: Mapping[str, jax.Array],
        inputs: Mapping[str, jax.Array],
        key: jax.Array | None,
        reads: tuple[jax.Array, ...] = (),
        proportions: Mapping[str, jax.Array] | None = None,
    ) -> dict[str, jax.Array]:
        """The call's program as JAX differentiates it itself (`gradient="jax"`)."""
        with call_contexts(key, proportions):
            return {name: tape.value for name, tape in self._tapes(params, state, inputs, reads).items()}

    def forward(self, network: NetworkLike, inputs: Mapping[str, Any], ends: Any = None) -> dict[str, Tape]:
        """The output Tapes; wrap in `jax.jit` with `tape.backward` for a training step.

        Inputs (and `ends`) are as for calling the Computation; batched inputs
        give `[T, N, D]` output Tapes, whose `backward` takes a `[T, N, D]` delta.
        The Tape has one node per network node over all the request's rows, also
        where a call runs its sequences in groups (`compile`'s `sequence_groups`).
        """
        network = self._check_network(network)
        return self._tapes(network.params, network.state, self._check_inputs(inputs), self._read_masks(ends))

    def end_masks(self, ends: Any) -> EndMasks:
        """The optional reads' per-sequence masks for `ends` (one frame per sequence), as device arrays.

        Pass them as `ends=` to a call or `forward` inside a `jax.jit`: they are
        planned here, on the host, from the ends as numbers (`symnet._src.engine.ends`).
        """
        if self.sequence_ends is None:
            raise PlanError("end_masks needs a request with sequence_ends")
        return EndMasks(tuple(jax.device_put(m) for m in self.sequence_ends.masks(ends)))

    def _read_masks(self, ends: Any) -> tuple[jax.Array, ...]:
        """The optional reads' per-sequence masks for `ends` (`symnet._src.engine.ends`); none without sequence ends."""
        if self.sequence_ends is None:
            if ends is not None:
                raise PlanError("ends are given, but the request has no sequence_ends")
            return ()
        if ends is None:
            raise PlanError("the request has sequence_ends: pass ends=[end frame of each sequence]")
        if isinstance(ends, EndMasks):
            if len(ends.masks) != len(self.sequence_ends.reads):
                raise PlanError(
                    f"{len(ends.masks)} end masks, but this Computation has {len(self.sequence_ends.reads)} "
                    "optional reads: make them with this Computation's end_masks"
                )
            return ends.masks
        return self.end_masks(ends).masks

    def _check_network(self, network: object) -> NetworkLike:
        """`network`, if it has the structure this Computation was compiled for (else its plan does not apply)."""
        structure = getattr(network, "structure", None)
        if structure is not self.structure and structure != self.structure:
            what = "another network" if structure is not None else f"a {type(network).__name__}, not a Network"
            raise PlanError(
                f"this Computation was compiled for a different network structure; called with {what} "
                "(compile one for it: symnet.compile(network, request))"
            )
        return cast(NetworkLike, network)

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The input arrays, checked: all flat `[rows, D]` or (regular requests) all batched `[T, N, D]`."""
        out = {}
        batched: tuple[str, bool] | None = None  # the first input's name and layout
        for name, indexes in self.request.inputs.items():
            if name not in inputs:
                raise PlanError(f"missing input matrix {name!r} (the request provides it)")
            value = inputs[name]
            if not isinstance(value, jax.Array):  # jnp.asarray of a jax.Array costs a call's worth of host time
                value = jnp.asarray(value)
            dim = self.graph.input_dims.get(name) if name in self.graph.inputs else None
            feature = dim if dim is not None else "dim"
            flat = f"({len(indexes)}, {feature})"
            if self.regular:
                grid = f"({len(indexes) // self.batch}, {self.batch}, {feature})"
                want = f"a flat matrix {flat} or a [T, N, D] array {grid}"
                shape = (len(indexes),) if value.ndim == 2 else (len(indexes) // self.batch, self.batch)
            else:
                want = f"a flat matrix {flat} (the request is irregular: [T, N, D] arrays need a regular one)"
                shape = (len(indexes),)
            if (
                value.ndim != len(shape) + 1
                or value.shape[:-1] != shape
                or (dim is not None and value.shape[-1] != dim)
            ):
                raise ShapeError(f"input {name!r}: array of shape {tuple(value.shape)}, the request needs {want}")
            if batched is None:
                batched = (name, value.ndim == 3)
            elif batched[1] != (value.ndim == 3):
                kinds = ("a [T, N, D] array", "a flat matrix")
                first, this = kinds if batched[1] else kinds[::-1]
                raise ShapeError(
                    f"input {name!r}: {this} of shape {tuple(value.shape)}, but input {batched[0]!r} is {first}: "
                    f"give every input of one call in the same layout ({want})"
                )
            out[name] = value
        unknown = set(inputs) - set(self.request.inputs)
        if unknown:
            raise PlanError(f"input matrices {sorted(unknown)} are not in the request")
        return out

    def _tapes(
        self,
        params: Mapping[str, jax.Array],
        state: Mapping[str, jax.Array],
        inputs: Mapping[str, jax.Array],
        reads: tuple[jax.Array, ...] = (),
        record: dict[str, tuple[Tape, Callable[[jax.Array], jax.Array]]] | None = None,
    ) -> dict[str, Tape]:
        """The output Tapes. With `record`, each input's Tape and the transpose of the row movement from the
        input array to its value are recorded there (for the cotangents of the inputs: engine/gradient.py)."""
        graph, batch = self.graph, self.batch
        # A policy casts the inputs here and each Weight's value at its tape node (`_tape`); both casts are
        # transposed by the walk (`symnet._src.core.tape.backward` gives gradients in the parameters' dtype).
        if self.precision is not None:
            inputs = self.precision.cast_inputs(inputs)
            dtype = self.precision.compute
        else:
            dtype = compute_dtype(params, state, inputs)
        by_read = dict(zip(self.sequence_ends.reads, reads, strict=True)) if self.sequence_ends else {}
        tapes: dict[int, Tape] = {}
        given: dict[int, Tape] = {}
        # A batched call ([T, N, D] inputs, _check_inputs: then all are) keeps values [T, N, D] where it can,
        # so that a sharding of N stays one: flattening [T, N, D] to (t, n) rows makes XLA gather N.
        batched = any(v.ndim == 3 for v in inputs.values())
        for name, (nid, rowmap) in self.input_maps.items():
            state_given = nid in self.given_state  # a recurrence's given state: scans take (t, n) rows

            def move(v: jax.Array, rowmap: RowMap = rowmap, state_given: bool = state_given) -> jax.Array:
                if not rowmap.is_identity:
                    v = moved(rowmap, v, batch, batched)
                return as_flat_rows(v) if state_given else v

            if record is None:
                value = move(inputs[name])
            else:
                value, move_vjp = jax.vjp(move, inputs[name])
            if state_given:
                rows = Rows(self.given_state[nid], batch, self.regular)
                tape = given[nid] = Tape(graph.layers[nid], value, rows=rows, parameters=params)
            else:
                tape = tapes[nid] = Tape(graph.layers[nid], value, rows=self.rows[nid], parameters=params)
            if record is not None:
                record[name] = (tape, first_cotangent(move_vjp))
        for step in self.schedule:
            if isinstance(step, (RecurrentBlock, MergedScans)):
                for block in step.blocks if isinstance(step, MergedScans) else (step,):
                    for edge in block.externals:  # an operand no row of this request reads (e.g. a Failover's)
                        if edge.op not in tapes:
                            tapes[edge.op] = self._absent(edge.op, tapes, dtype)
                if batched:  # scans take (t, n) rows: show them flat views of [T, N, D] operands
                    view = dict(tapes)
                    for block in step.blocks if isinstance(step, MergedScans) else (step,):
                        for edge in block.externals:
                            if view[edge.op].value.ndim == 3:
                                view[edge.op] = reshaped_tape(view[edge.op], as_flat_rows(view[edge.op].value))
                    step.tapes(view, self.rows, params, given, by_read)
                    tapes.update({nid: tape for nid, tape in view.items() if nid not in tapes})
                else:
                    step.tapes(tapes, self.rows, params, given, by_read)
            elif step.nid not in tapes and step.nid not in self.absorbed:
                tapes[step.nid] = self._tape(step, tapes, params, state, by_read, batched, dtype)
        out = {}
        for name, rowmap in self.output_maps.items():
            tape = tapes[self.output_ids[name]]
            if rowmap.is_identity:
                tape.rows = self.request.outputs[name]  # the same Indexes, as the request's IndexSet
            else:
                tape = selection_tape(tape, rowmap, batch, self.request.outputs[name], batched)
            if batched and tape.value.ndim == 2:
                tape = reshaped_tape(tape, as_frames(tape.value, batch))
            if self.precision is not None and tape.value.dtype != self.precision.output:
                tape = cast_tape(tape, self.precision.output)
            out[name] = tape
        return out

    def _tape(
        self,
        step: _Step,
        tapes: dict[int, Tape],
        params: Mapping[str, jax.Array],
        state: Mapping[str, jax.Array],
        reads: Mapping[tuple[int, int], jax.Array],
        batched: bool = False,
        dtype: Any = float,
    ) -> Tape:
        """The tape node of one step; `batched`: keep indexed values `[T, N, D]` where the layer allows;
        `dtype`: the one of the constants it makes."""
        layer, batch = step.layer, self.batch
        if isinstance(layer, Weight):
            cast = self.precision.cast if self.precision is not None else same
            if not layer.trainable:
                return Tape(layer, cast(state[layer.name]), parameters=params)  # type: ignore[index]
            return Tape(layer, cast(params[layer.name]), parameter=layer.name, parameters=params)  # type: ignore[index]
        if isinstance(layer, Literal):
            return Tape(layer, layer.array, parameters=params)
        fused = self.attentions.get(step.nid)
        if fused is not None:  # attention from its source's rows (engine/attention.py)
            masks = [reads.get((nid, 0)) for nid, _, _ in fused.picks]
            at = self.rows[step.nid]
            return attention_tape(fused, layer, tapes[fused.source], masks, at, params, batch, batched)
        conv = self.splices.get(step.nid)
        if conv is not None:  # a convolution of the source's rows (engine/splice.py)
            return self._splice_tape(conv, layer, tapes, params, batched)
        upstream = tuple(tapes[op] if op in tapes else self._absent(op, tapes, dtype) for op in step.operands)
        rows = self.rows.get(step.nid)  # None for values that do not depend on the Index (weights, literals)
        if combine(layer) is Combine.CONST:
            assert rows is not None and isinstance(layer, Descriptor) and layer.output_dim is not None
            dim = layer.output_dim
            shape = (len(rows) // batch, batch, dim) if batched else (len(rows), dim)
            return Tape(layer, layer.constant(shape, jnp.result_type(dtype)), rows=rows, parameters=params)
        if not self.graph.indexed[step.nid]:  # a function of weights and literals only
            layer.check(*(u.shape for u in upstream))
            return Tape(layer, layer.apply(*(u.value for u in upstream)), upstream, parameters=params)
        assert rows is not None  # the planner gives every indexed step its rows
        if layer.rowwise:
            leading = batched and leading_axes_safe(layer, [u.value for u in upstream], step.maps)
            ndim = 3 if leading else 2
            selected: list[jax.Array] = []
            transposes: list[Callable[..., Any] | None] = []
            for u, rowmap in zip(upstream, step.maps):
                if rowmap is None or (rowmap.is_identity and u.value.ndim == ndim):
                    selected.append(u.value)
                    transposes.append(None)
                else:
                    move = lambda v, m=rowmap: moved(m, v, batch, leading)  # noqa: E731
                    sel, vjp = linearized(move, u.value)
                    selected.append(sel)
                    transposes.append(vjp)
            layer.check(
                *(
                    (s.shape[0] * s.shape[1], s.shape[2]) if m and leading else s.shape
                    for s, m in zip(selected, step.maps)
                )
            )
            own = layer.step_apply(*selected)
            if own is not None:  # the layer's training-time backward (Kaldi's self-repair)
                value, own_vjp = own
                return Tape(
                    layer, value, upstream, rows=rows, pullback=chained_pullback(own_vjp, transposes), parameters=params
                )
            if leading:  # the layer's own vjp may assume matrices (Dot's would batch its weight delta by frame)
                value, apply_vjp = linearized(layer.apply, *selected)
                return Tape(
                    layer,
                    value,
                    upstream,
                    rows=rows,
                    pullback=chained_pullback(apply_vjp, transposes),
                    parameters=params,
                )
            value = layer.apply(*selected)

            def pullback(
                d: jax.Array,
                layer: Layer = layer,
                value: jax.Array = value,
                selected: tuple[jax.Array, ...] = tuple(selected),
                transposes: tuple[Callable[..., Any] | None, ...] = tuple(transposes),
            ) -> tuple[jax.Array | None, ...]:
                deltas = layer.vjp(d, value, *selected)
                return tuple(dd if (t is None or dd is None) else t(dd)[0] for dd, t in zip(deltas, transposes))

            return Tape(layer, value, upstream, rows=rows, pullback=pullback, parameters=params)
        if isinstance(layer, IndexedLayer):
            rows_read = step.maps[0]
            assert isinstance(rows_read, IndexedRows)  # _maps gives an IndexedLayer's input an IndexedRows

            def fn(v: jax.Array, *weights: jax.Array) -> jax.Array:
                out = layer.apply_rows(rows_read(as_frames(v, batch)), rows_read.owner, rows_read.num_rows, *weights)
                return as_layout(out, batch, batched)

            value, vjp = linearized(fn, *(u.value for u in upstream))
            return Tape(layer, value, upstream, rows=rows, pullback=vjp, parameters=params)
        uses = tuple(reads.get((step.nid, pos)) for pos in range(len(step.operands)))
        value, vjp = linearized(descriptor_fn(layer, step.maps, batch, batched, uses), *(u.value for u in upstream))
        return Tape(layer, value, upstream, rows=rows, pullback=vjp, parameters=params)

    def _splice_tape(
        self, conv: Splice, layer: Layer, tapes: dict[int, Tape], params: Mapping[str, jax.Array], batched: bool
    ) -> Tape:
        """The tape of a spliced product lowered as a convolution (engine/splice.py). Its backward is JAX's
        transpose of the convolution where the layer's `vjp` is the product's exact gradient; else the layer's
        own `vjp`, given the concatenated splices (`spliced_rows`) as its input."""
        batch, rows, product = self.batch, self.rows[conv.nid], conv.product
        source, weights = tapes[conv.source], tuple(tapes[n] for n in conv.params)
        count = len(rows.keys)
        shapes: list[tuple[int, ...]] = [w.value.shape for w in weights]
        shapes.insert(product.input, (len(rows), conv.k * source.value.shape[-1]))
        layer.check(*shapes)  # in operand order: the input, then the matrix and bias where the layer has them

        def fn(v: jax.Array, *ws: jax.Array) -> jax.Array:
            return splice_value(conv, v, ws, count, batch, batched)

        value, vjp = linearized(fn, source.value, *(w.value for w in weights))
        now = layer.product()  # asked now, not at planning: whether natural gradient is on is the step's
        if now is None or now.vjp_is_gradient:
            return Tape(layer, value, (source, *weights), rows=rows, pullback=vjp, parameters=params)

        def pullback(d: jax.Array) -> tuple[jax.Array | None, ...]:
            x, unsplice = jax.vjp(lambda v: spliced_rows(conv, v, count, batch), source.value)
            operands = [w.value for w in weights]
            operands.insert(product.input, x)
            deltas = list(layer.vjp(as_flat_rows(d), as_flat_rows(value), *operands))
            dx = deltas.pop(product.input)
            return (None if dx is None else unsplice(dx)[0], *deltas)

        return Tape(layer, value, (source, *weights), rows=rows, pullback=pullback, parameters=params)

    def _absent(self, nid: int, tapes: dict[int, Tape], dtype: Any = float) -> Tape:
        """A zero-row tape for an operand no row reads (an IfDefined source that never exists)."""
        known = {n: int(tape.value.shape[-1]) for n, tape in tapes.items() if self.graph.indexed[n]}
        dim = static_dim(node_shapes(self.graph, known), nid)
        if dim is None:
            raise PlanError(f"cannot infer the dim of {self.graph.describe(nid)}, which no output reads")
        return Tape(self.graph.layers[nid], jnp.zeros((0, dim), jnp.result_type(dtype)))

    def explain(self) -> str:
        """The Computation and the lowering asked for, then one line per recurrence and per spliced product
        lowered as a convolution, in run order: a recurrence's members, frames, direction and lowering (fused or
        plain scan; a plain one under `auto` names the members without a `vjp`). Recurrences that share one loop
        are listed under it."""
        policy = "None" if self.precision is None else str(self.precision)
        lines = [f"{self!r}, lowering={self.lowering!r}, gradient={self.gradient!r}, precision={policy}"]
        if self.groups is not None:
            lines.append("a differentiated call: " + self.groups.explain())
        for step in self.schedule:
            if not isinstance(step, (MergedScans, RecurrentBlock)) and step.nid in self.splices:
                lines.append(self.splices[step.nid].explain(self.graph))
            if not isinstance(step, (MergedScans, RecurrentBlock)) and step.nid in self.attentions:
                lines.append(self.attentions[step.nid].explain(self.graph))
            if isinstance(step, MergedScans):
                lines.append(f"one loop of {len(step.blocks)} recurrences:")
                lines.extend("  " + block.explain() for block in step.blocks)
            elif isinstance(step, RecurrentBlock):
                lines.append(step.explain())
        return "\n".join(lines)

    def __repr__(self) -> str:
        kind = f"regular, {self.batch} sequences" if self.regular else "irregular"
        ends = ", with sequence ends" if self.request.sequence_ends else ""
        return f"Computation({kind}{ends}, {len(self.steps)} steps, outputs={list(self.output_maps)})"

    def _repr_html_(self) -> str:
        """The request and each node's Indexes, for notebooks (see `symnet.display`)."""
        return html.render_html(self)
