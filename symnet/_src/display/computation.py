"""The views of a compiled Computation: its request and planned nodes, and the index map of one node.

Both read what `compile` planned (`Computation.rows`, `steps`, and the row
maps through `symnet._src.engine.inspect`); nothing is planned again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.descriptor import IfDefined, Offset, ReplaceIndex, Round
from ..core.index import decode, format_indexes
from ..engine.computation import Computation
from ..engine.inspect import node_id, operand_reads
from ..engine.recurrence import RecurrentBlock
from .html import GREY, Html, box, count, escape, short, table
from .labels import index_text, label

__all__ = ["computation_html", "index_map_html"]

_MOVES = (Offset, IfDefined, Round, ReplaceIndex)  # one-operand row movements that `through` looks past


def _step_order(computation: Computation) -> list[tuple[int, str]]:
    """(node id, how it is computed) in evaluation order: inputs, then steps and scan members."""
    out: list[tuple[int, str]] = []
    seen: set[int] = set()
    for _name, (nid, _) in computation.input_maps.items():
        if nid not in seen:
            seen.add(nid)
            out.append((nid, "given" if nid in computation.given_state else "input"))
    scans = 0
    for step in computation.steps:
        if isinstance(step, RecurrentBlock):
            scans += 1
            for nid in step.order:
                if nid not in seen:
                    seen.add(nid)
                    out.append((nid, f"scan {scans}"))
        elif step.nid not in seen:
            seen.add(step.nid)
            out.append((step.nid, "step"))
    for nid in sorted(computation.rows):
        if nid not in seen:
            out.append((nid, ""))
    return out


def computation_html(computation: Computation) -> Html:
    """The request of a compiled Computation and every planned node with the Indexes it computes."""
    c = computation
    g = c.graph
    kind = f"regular, {c.batch} sequence(s), planned for one" if c.regular else "irregular (explicit Index lists)"
    scans = sum(1 for s in c.steps if isinstance(s, RecurrentBlock))
    parts = [
        f"<div><b>Computation</b>: {escape(kind)}; {len(c.steps)} steps"
        + (f", {scans} scan(s)" if scans else "")
        + "</div>"
    ]
    req = []
    for name, s in c.request.inputs.items():
        req.append(["input", escape(name), escape(count(len(s))), escape(format_indexes(s.keys, limit=4))])
    for name, s in c.request.outputs.items():
        req.append(["output", escape(name), escape(count(len(s))), escape(format_indexes(s.keys, limit=4))])
    parts.append(table(["", "name", "rows", "Indexes"], req))
    outputs = {nid: name for name, nid in c.output_ids.items()}
    rows = []
    for nid, how in _step_order(c):
        layer = g.layers[nid]
        r = c.rows.get(nid)
        name = escape(label(layer)) + (f" <b>→ {escape(outputs[nid])}</b>" if nid in outputs else "")
        ops = ", ".join(f"#{op}" for op in g.operands[nid] if op in c.rows)
        rows.append(
            [
                f"#{nid}",
                f'<span title="{escape(short(repr(layer), 300))}">{name}</span>',
                ops,
                escape(how),
                escape(count(len(r))) if r is not None else "",
                escape(index_text(r)) if r is not None else "",
            ]
        )
    parts.append(table(["#", "node", "reads", "computed", "rows", "Indexes"], rows))
    return box(*parts)


def index_map_html(computation: Computation, node: Any, *, through: bool = True, max_rows: int = 60) -> Html:
    """Which operand row every row of `node` reads, for a compiled Computation.

    `node` is a node id, an output, input or Node name, or a layer of the
    network. Each row of the table is an Index of the node; each column an
    indexed operand, naming the operand's Index that the row reads, `0` where
    the row reads zeros (IfDefined of a row that cannot be computed) and `-`
    where it does not read that operand (Failover's unused branch, Switch's
    other parts); a row of an IndexedLayer (statistics pooling, ...) names
    all the operand Indexes it reads. With `through=True` a column follows
    chains of one-operand row movements (Offset, IfDefined, Round,
    ReplaceIndex) down to the node that computes the values, so
    `Append(Offset(x, -1), x)` shows the input rows it splices. In a regular
    plan the map is the same for every sequence and is shown for sequence 0.
    """
    c = computation
    g = c.graph
    nid = node_id(g, node)
    if nid not in c.rows:
        return box(f"<div>#{nid} {escape(label(g.layers[nid]))} computes nothing for this request</div>")
    keys = c.rows[nid].keys
    columns, head = [], ["row", "Index"]
    for reads in operand_reads(c, nid):
        op_id, rows, sources = reads.operand, reads.rows, reads.sources
        valid = np.ones(len(rows), dtype=bool)
        chain: list[int] = []
        while through and isinstance(g.layers[op_id], _MOVES) and g.indexed[op_id] and op_id in c.rows:
            (step,) = operand_reads(c, op_id)
            source_of = np.full(len(c.rows[op_id].keys), -1, dtype=np.int64)
            source_of[step.rows] = step.sources
            sources = np.where(valid, source_of[sources], -1)
            valid = sources >= 0
            chain.append(op_id)
            op_id = step.operand
        via = f" via {' ← '.join(label(g.layers[k]) for k in chain)}" if chain else ""
        head.append(f"#{op_id} {escape(label(g.layers[op_id]))}{escape(via)}")
        read_keys = c.rows[op_id].keys[sources[valid]] if op_id in c.rows else np.zeros(0, np.int64)
        columns.append(_cells(len(keys), rows, valid, read_keys))
    if columns:  # a row that reads no operand is zeros (IfDefined of a row that is not computable)
        none = np.all([col == "-" for col in columns], axis=0)
        for col in columns:
            col[none] = "0"
    mine = _show_keys(keys)
    lines = [[str(i), escape(mine[i])] + [escape(col[i]) for col in columns] for i in range(min(len(keys), max_rows))]
    note = " (sequence 0; every sequence reads the same way)" if c.regular and c.batch > 1 else ""
    title = (
        f"<div><b>Index map</b> of #{nid} {escape(label(g.layers[nid]))}: {len(keys)} rows "
        f"{escape(format_indexes(keys, limit=4))}{escape(note)}</div>"
    )
    more = f'<div style="{GREY}">… {len(keys) - max_rows} more rows</div>' if len(keys) > max_rows else ""
    return box(title, table(head, lines), more)


def _cells(num_rows: int, rows: np.ndarray, valid: np.ndarray, read_keys: np.ndarray) -> np.ndarray:
    """One column of an index map: per row, '-' (reads nothing), '0' (reads zeros) or the Indexes read.

    `rows[i]` reads `read_keys` in order where `valid[i]`, zeros where not.
    """
    cells = np.array(["-"] * num_rows, dtype=object)
    if len(rows) == len(np.unique(rows)):  # at most one read per row
        cells[rows] = "0"
        cells[rows[valid]] = _show_keys(read_keys)
        return cells
    per_row: dict[int, list[int]] = {}
    for row, key in zip(rows[valid].tolist(), read_keys.tolist()):
        per_row.setdefault(row, []).append(key)
    for row in np.unique(rows).tolist():
        found = per_row.get(row)
        cells[row] = format_indexes(np.array(sorted(found), np.int64), limit=4) if found else "0"
    return cells


def _show_keys(keys: np.ndarray) -> list[str]:
    n, t, x = decode(keys)
    return [f"({a}, {b}, {z})" if z else f"({a}, {b})" for a, b, z in zip(n, t, x)]
