"""Read-only questions about a node graph and a compiled Computation, for tools that show them.

Nothing here plans or changes anything: graph questions read the `Graph`
(layers, operands, indexed flags), row questions read what `compile` already
planned (`Computation.rows` and `Computation.row_maps`). `symnet.display`
draws with these, so it needs no private engine names and never plans a
request a second time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..base.errors import PlanError
from ..core.layer import Layer
from .computation import Computation
from .dims import node_shapes
from .graph import Graph, shifts_time, strongly_connected
from .step_values import IndexedRows

__all__ = [
    "Dim",
    "input_reads",
    "matrixwise_node",
    "node_dims",
    "node_id",
    "operand_reads",
    "OperandReads",
    "recurrent_edges",
    "strongly_connected_groups",
    "topological_order",
]

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
    return {
        (nid, op)
        for nid, ops in enumerate(graph.operands)
        for op in ops
        if group[nid] == group[op] and shifts_time(graph.layers[nid])
    }


def matrixwise_node(graph: Graph) -> int | None:
    """The first node whose output rows depend on other rows of its input (batch-norm in training mode,
    `Component.matrixwise`), or None: such a node must get exactly the rows of one minibatch."""
    return next((nid for nid, layer in enumerate(graph.layers) if getattr(layer, "matrixwise", False)), None)


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


def node_dims(graph: Graph) -> list[Dim]:
    """Per node, where it is known without running: the column dim (indexed nodes) or the shape (the others).

    The engine's own inference (`symnet._src.engine.dims.node_shapes`); a node whose
    operands do not fit, or whose dim nothing tells, is None.
    """
    shapes = node_shapes(graph, strict=False)
    return [None if s is None else (int(s[-1]) if graph.indexed[nid] and len(s) else s) for nid, s in enumerate(shapes)]


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
