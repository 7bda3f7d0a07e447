"""The Tape view: every node of a run with its layer, shape, row Indexes and a value (and delta) summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..core.tape import Tape
from .html import Html, box, escape, number, short, table
from .labels import index_text, label, shape_text

__all__ = ["summary", "tape_html"]


def summary(value: Any) -> tuple[str, str, str, str]:
    """(min, mean, max, note) of an array; 'traced' inside jit, '' for what has no numbers."""
    if isinstance(value, jax.core.Tracer):
        return "traced", "", "", ""
    try:
        array = np.asarray(value)
    except Exception:
        return "?", "", "", ""
    if array.size == 0:
        return "empty", "", "", ""
    if array.dtype.kind not in "biuf":
        return "", "", "", str(array.dtype)
    array = array.astype(np.float64)
    finite = np.isfinite(array)
    note = ""
    if not finite.all():
        nan = int(np.isnan(array).sum())
        inf = int((~finite).sum()) - nan
        note = ", ".join(p for p in (f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else "") if p)
        array = array[finite]
        if array.size == 0:
            return "", "", "", note
    return number(float(array.min())), number(float(array.mean())), number(float(array.max())), note


def tape_html(tape: Any, deltas: Mapping[Any, Any] | None = None) -> Html:
    """Every node of a Tape (or of a dict of output Tapes): layer, shape, rows, min/mean/max.

    `deltas` (from `tape.backward_deltas(delta)`) adds each node's delta summary.
    """
    roots = dict(tape) if isinstance(tape, Mapping) else {"": tape}
    order: list[Tape] = []
    seen: set[int] = set()
    for root in roots.values():
        for node in root.nodes():
            if id(node) not in seen:
                seen.add(id(node))
                order.append(node)
    position = {id(node): i for i, node in enumerate(order)}
    outputs = {id(t): name for name, t in roots.items()}
    delta_of = {id(k): v for k, v in deltas.items()} if deltas is not None else None
    head = ["#", "layer", "reads", "shape", "rows (Indexes)", "min", "mean", "max"]
    if delta_of is not None:
        head += ["δ min", "δ mean", "δ max"]
    rows = []
    any_rows = False
    for node in order:
        lo, mean, hi, note = summary(node.value)
        name = escape(label(node.layer))
        if outputs.get(id(node)):
            name += f" <b>→ {escape(outputs[id(node)])}</b>"
        if note:
            name += f' <span style="color: #b00020">({escape(note)})</span>'
        reads = ", ".join(f"#{position[id(u)]}" for u in node.upstream if id(u) in position)
        idx = index_text(node.rows)
        any_rows = any_rows or bool(idx)
        row = [
            f"#{position[id(node)]}",
            f'<span title="{escape(short(repr(node.layer), 300))}">{name}</span>',
            reads,
            escape(shape_text(np.shape(node.value))),
            escape(idx),
            lo,
            mean,
            hi,
        ]
        if delta_of is not None:
            d = delta_of.get(id(node))
            row += list(summary(d)[:3]) if d is not None else ["", "", ""]
        rows.append(row)
    if not any_rows:
        head.pop(4)
        rows = [r[:4] + r[5:] for r in rows]
    title = f"<div><b>Tape</b>: {len(order)} nodes" + (", with deltas" if delta_of is not None else "") + "</div>"
    return box(title, table(head, rows))
