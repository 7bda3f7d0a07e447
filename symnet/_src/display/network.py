"""The network view: inputs, outputs with their context, every node with its dim, the parameters, the picture."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.layer import Weight
from .graph import GraphView, draw_graph
from .html import GREY, Html, box, count, escape, fold, short, table
from .labels import label, shape_text
from .tree import tree

__all__ = ["network_html", "nodes_table"]


def network_html(network: Any, *, context: bool = True, picture: bool = True) -> Html:
    """Inputs, outputs, nodes (with dims where known), parameters and context of a Network.

    Shows the outputs' objectives where the network has any. The
    context is computed only when the network works on Indexes, and a network
    the planner rejects still displays, with the error.
    """
    net = network
    objectives = dict(net.objectives)
    params = net.params
    total = sum(int(np.size(v)) for v in params.values())
    fixed = sum(int(np.size(v)) for v in net.state.values())
    state_text = f", {len(net.state)} state array(s) ({count(fixed)} values)" if net.state else ""
    parts = [
        f"<div><b>Network</b>: {len(net.structure.outputs)} output(s), {len(params)} parameter array(s), "
        f"{count(total)} parameters{state_text}</div>"
    ]
    try:
        info = GraphView(net)
    except Exception as e:
        info = None
        parts.append(
            f'<div style="color: #b00020">the node graph cannot be built: {escape(type(e).__name__)}: '
            f"{escape(short(str(e), 300))}</div>"
        )
    if info is not None:
        g = info.graph
        ins = [f"{escape(name)} (dim {escape(info.dim_text(nid) or '?')})" for name, nid in g.inputs.items()]
        parts.append(f"<div>inputs: {', '.join(ins) or 'none'}</div>")
        contexts = _contexts(net) if context and info.has_indexes() else {}
        rows = []
        for name, nid in g.outputs.items():
            ctx = contexts.get(name, "")
            ctx_text = f"left {ctx[0]}, right {ctx[1]}" if isinstance(ctx, tuple) else escape(ctx)
            rows.append(
                [
                    escape(name),
                    f"#{nid} {escape(label(g.layers[nid]))}",
                    escape(info.dim_text(nid)),
                    escape(objectives.get(name, "")),
                    ctx_text,
                ]
            )
        head = ["output", "node", "dim", "objective", "context"]
        if not objectives:
            head.pop(3)
            rows = [r[:3] + r[4:] for r in rows]
        if not contexts:
            head.pop()
            rows = [r[:-1] for r in rows]
        parts.append(table(head, rows))
        parts.append(fold(f"<b>nodes</b> ({info.n})", nodes_table(info), open=info.n <= 60))
    prow = []
    users = _weight_users(info) if info is not None else {}
    for name, value in params.items():
        prow.append(
            [
                escape(name),
                escape(shape_text(np.shape(value))),
                escape(count(int(np.size(value)))),
                escape(getattr(value, "dtype", "")),
                escape(", ".join(users.get(name, []))),
            ]
        )
    parts.append(
        fold(
            f"<b>parameters</b> ({len(params)}, {count(total)} values)",
            table(["name", "shape", "count", "dtype", "used by"], prow),
            open=len(params) <= 30,
        )
    )
    if net.state:
        srow = [
            [
                escape(name),
                escape(shape_text(np.shape(value))),
                escape(count(int(np.size(value)))),
                escape(getattr(value, "dtype", "")),
                escape(", ".join(users.get(name, []))),
            ]
            for name, value in net.state.items()
        ]
        parts.append(
            fold(
                f"<b>state</b> ({len(net.state)}, {count(fixed)} values: kept, not trained)",
                table(["name", "shape", "count", "dtype", "used by"], srow),
                open=len(net.state) <= 30,
            )
        )
    if info is not None and picture:
        try:
            parts.append(fold("<b>graph</b>", draw_graph(info)))
        except Exception as e:
            parts.append(f'<div style="{GREY}">no picture: {escape(type(e).__name__)}: {escape(short(str(e)))}</div>')
    trees = "".join(f"<div><b>{escape(name)}</b></div>{tree(layer, 2, name)}" for name, layer in net.structure.outputs)
    parts.append(fold("<b>expression</b>", trees))
    return box(*parts)


def _contexts(network: Any) -> dict[str, tuple[int, int] | str]:
    """Per output: `network.context(output)`, or the error text where the engine cannot plan it."""
    out: dict[str, tuple[int, int] | str] = {}
    for name, _ in network.structure.outputs:
        try:
            out[name] = tuple(network.context(name))
        except Exception as e:  # an unplannable network still displays
            out[name] = f"{type(e).__name__}: {short(str(e), 200)}"
    return out


def _weight_users(info: GraphView) -> dict[str, list[str]]:
    """Per parameter name: the nodes (`#id`) that read it."""
    out: dict[str, list[str]] = {}
    for nid in range(info.n):
        for op in info.weights_of(nid):
            w = info.graph.layers[op]
            assert isinstance(w, Weight) and w.name is not None  # a Structure names every Weight
            out.setdefault(w.name, []).append(f"#{nid}")
    return out


def nodes_table(info: GraphView) -> str:
    """A table of every node, operands first: its name as the summary gives it (`lstm1.gates`) and label, where
    built, operands (back edges marked), dim, weights."""
    g = info.graph
    outputs = {nid: name for name, nid in g.outputs.items()}
    rows = []
    for nid in info.order:
        layer = g.layers[nid]
        ops = ", ".join(f"#{op}" + (" (back)" if (nid, op) in info.back_edges else "") for op in g.operands[nid])
        weights = []
        for op in info.weights_of(nid):
            w = g.layers[op]
            assert isinstance(w, Weight) and w.name is not None  # a Structure names every Weight
            value = info.network.values.get(w.name)
            shape = np.shape(value) if value is not None else w.shape
            weights.append(f"{escape(w.name)} {escape(shape_text(shape))} = {escape(count(int(np.prod(shape))))}")
        value = info.names[nid]
        named = f"<b>{escape(value)}</b>: " if value and value not in label(layer) else ""
        name = named + escape(label(layer)) + (f" <b>→ output {escape(outputs[nid])}</b>" if nid in outputs else "")
        where = f'<div style="{GREY}">{escape(layer.where)}</div>' if getattr(layer, "where", None) else ""
        rows.append([f"#{nid}", name + where, ops, escape(info.dim_text(nid)), "<br/>".join(weights)])
    return table(["#", "node", "reads", "dim", "parameters"], rows)
