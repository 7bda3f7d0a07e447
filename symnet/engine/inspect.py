"""Read-only questions about a node graph and a compiled Computation, for tools that show them.

Nothing here plans or changes anything: graph questions read the `Graph`
(layers, operands, indexed flags), row questions read what `compile` already
planned (`Computation.rows` and `Computation.row_maps`). `symnet.display`
draws with these, so it needs no private engine names and never plans a
request a second time.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.descriptor import Const, DimRange, IndexedLayer, Input
from ..core.layer import Identity, Layer, Literal, Weight
from ..errors import PlanError
from .computation import Computation, IndexedRows
from .graph import DEFAULT_INPUT, Graph, shifts_time
from .recurrence import infer_dim, strongly_connected

Dim = int | tuple[int, ...] | None


# ----- the node graph ----------------------------------------------------------------------------


def strongly_connected_groups(graph: Graph) -> list[list[int]]:
    """The graph's strongly connected groups of node ids (a recurrence is a group), operands' groups first."""
    return strongly_connected(list(range(len(graph.layers))), graph.operands)


def recurrent_edges(graph: Graph) -> set[tuple[int, int]]:
    """Edges `(user, operand)` that close a recurrence: out of a time shift, inside a strongly connected group.

    Every cycle of a Graph has a time shift on it (the Graph checks this when it
    is built), so without these edges the graph is acyclic.
    """
    group: dict[int, int] = {}
    for k, members in enumerate(strongly_connected_groups(graph)):
        for m in members:
            group[m] = k
    return {(nid, op) for nid, ops in enumerate(graph.operands) for op in ops
            if group[nid] == group[op] and shifts_time(graph.layers[nid])}


def topological_order(graph: Graph) -> list[int]:
    """Every node id once, operands before their users, recurrent edges left out.

    Depth-first from node 0, 1, ... (operands in their order), so the order is
    the same for equal graphs.
    """
    back = recurrent_edges(graph)
    n = len(graph.layers)
    order: list[int] = []
    state = [0] * n  # 0 new, 1 seen, 2 placed
    for root in range(n):
        if state[root]:
            continue
        stack = [(root, False)]
        while stack:
            nid, expanded = stack.pop()
            if expanded:
                if state[nid] != 2:
                    state[nid] = 2
                    order.append(nid)
                continue
            if state[nid]:
                continue
            state[nid] = 1
            stack.append((nid, True))
            for op in reversed([op for op in graph.operands[nid] if (nid, op) not in back]):
                if not state[op]:
                    stack.append((op, False))
    return order


def node_dims(graph: Graph, params: Mapping[str, Any] | None = None) -> list[Dim]:
    """Per node, where it is known without running: the column dim (indexed nodes) or the shape (the others).

    Inputs have their declared dims, weights the shapes of `params` (else of
    their initialisers), components their `output_dim`; every other node's dim
    follows from its operands' by the engine's `infer_dim` (an IndexedLayer's
    and an unindexed node's shape by JAX's abstract evaluation of what the
    Computation runs). Unknown (or contradictory) is None.
    """
    params = {} if params is None else params
    dims: list[Dim] = [None] * len(graph.layers)
    seen: list[Any] = [()] * len(graph.layers)  # the operand dims each node was last worked out from
    order = topological_order(graph)
    for _ in range(len(graph.layers) + 1):  # recurrences: repeat until nothing changes
        changed = False
        for nid in order:
            known = tuple(dims[op] for op in graph.operands[nid])
            if dims[nid] is not None and known == seen[nid]:
                continue
            seen[nid] = known
            value = _node_dim(graph, nid, known, params)
            if value is not None and value != dims[nid]:
                dims[nid] = value
                changed = True
        if not changed:
            break
    return dims


def _node_dim(graph: Graph, nid: int, operand_dims: tuple[Dim, ...], params: Mapping[str, Any]) -> Dim:
    layer = graph.layers[nid]
    if isinstance(layer, (Input, Identity)):
        return graph.input_dims.get(getattr(layer, "name", DEFAULT_INPUT))
    if isinstance(layer, Weight):
        return tuple(np.shape(params[layer.name])) if layer.name in params else layer.shape
    if isinstance(layer, Literal):
        return tuple(getattr(layer.value, "shape", ()))
    if isinstance(layer, (Const, DimRange)):
        return layer.dim
    try:
        declared = getattr(layer, "output_dim", None)
        if isinstance(declared, int):
            return declared
        if isinstance(layer, IndexedLayer):
            return _indexed_layer_dim(layer, graph, nid, operand_dims)
        if graph.indexed[nid]:
            shapes = [((1, d) if isinstance(d, int) else None) if graph.indexed[op] else
                      (d if isinstance(d, tuple) else None) for op, d in zip(graph.operands[nid], operand_dims)]
            return infer_dim(layer, shapes, 1) or infer_dim(layer, shapes, 1, lenient=True)
        if not all(isinstance(d, tuple) for d in operand_dims):
            return None
        args = [jax.ShapeDtypeStruct(d, jnp.result_type(float)) for d in operand_dims]
        return tuple(jax.eval_shape(layer.apply, *args).shape)
    except Exception:  # operands that do not fit: the dim is not known
        return None


def _indexed_layer_dim(layer: IndexedLayer, graph: Graph, nid: int, operand_dims: tuple[Dim, ...]) -> Dim:
    """An IndexedLayer's dim: its `apply_rows` evaluated abstractly on one row read."""
    (rows_dim, *weights) = operand_dims
    if not isinstance(rows_dim, int) or not all(isinstance(w, tuple) for w in weights):
        return None
    dtype = jnp.result_type(float)
    args = [jax.ShapeDtypeStruct((1, 1, rows_dim), dtype)] + [jax.ShapeDtypeStruct(w, dtype) for w in weights]
    owner = np.zeros(1, dtype=np.int64)
    return int(jax.eval_shape(lambda v, *w: layer.apply_rows(v, owner, 1, *w), *args).shape[-1])


def node_id(graph: Graph, node: Any) -> int:
    """A node id from a node id, an output, input or Node name, or a layer of the network."""
    if isinstance(node, (int, np.integer)):
        if not 0 <= int(node) < len(graph.layers):
            raise PlanError(f"no node #{node}")
        return int(node)
    if isinstance(node, str):
        for kind in ("output", "input"):
            try:
                return graph.endpoint(node, kind)
            except PlanError:
                pass
        raise PlanError(f"no output, input or Node named {node!r}")
    if isinstance(node, Layer):
        key = graph.key(graph.resolve(node))
        if key in graph.ids:
            return graph.ids[key]
    text = repr(node)
    text = text if len(text) <= 80 else text[:79] + "…"
    raise PlanError(f"{text} is not a node of this network")


# ----- a planned computation ---------------------------------------------------------------------


class OperandReads(NamedTuple):
    """The rows one node reads of one indexed operand: read i is row `rows[i]` reading row `sources[i]`.

    Rows are positions in `computation.rows[...]` of the node and of the
    operand. A row-wise node or a descriptor reads at most one row per row (a
    row that is not listed reads zeros or, for Failover and Switch, another
    operand); an IndexedLayer reads several.
    """

    operand: int
    rows: np.ndarray
    sources: np.ndarray


def operand_reads(computation: Computation, nid: int) -> list[OperandReads]:
    """Per indexed operand of node `nid`, in operand order: which of its rows each row of `nid` reads."""
    maps = computation.row_maps.get(nid)
    if maps is None:
        return []
    out = []
    for op, rowmap in zip(computation.graph.operands[nid], maps):
        if rowmap is None:
            continue
        if isinstance(rowmap, IndexedRows):
            out.append(OperandReads(op, np.asarray(rowmap.owner, np.int64), rowmap.src))
        else:
            rows = np.flatnonzero(rowmap.src >= 0)
            out.append(OperandReads(op, rows, rowmap.src[rows]))
    return out


def input_reads(computation: Computation) -> dict[int, np.ndarray]:
    """Per input node that some node reads: the sorted keys of its rows that are read.

    An input's own rows are all the request offers, read or not; this is what
    the network actually uses (a receptive field).
    """
    graph, rows = computation.graph, computation.rows
    inputs = {nid for nid in graph.inputs.values() if nid in rows}
    read: dict[int, list[np.ndarray]] = {nid: [] for nid in inputs}
    for nid in rows:
        if nid in inputs:
            continue
        for reads in operand_reads(computation, nid):
            if reads.operand in inputs:
                read[reads.operand].append(rows[reads.operand].keys[reads.sources])
    return {nid: np.unique(np.concatenate(parts)) for nid, parts in read.items() if parts}
