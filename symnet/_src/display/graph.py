"""The node graph of a network as a picture: the engine's graph, layered by depth, drawn as SVG.

`GraphView` is the engine's `Graph` of a network with what the views add to
it (each node's users, its depth for the layout, dims as text); the network
view's node table and the receptive field read it too.
"""

from __future__ import annotations

from typing import Any

from ..core.descriptor import Descriptor, Input, Node
from ..core.layer import Literal, Weight
from ..core.roles import value_names
from ..engine.graph import Graph
from ..engine.inspect import node_dims, recurrent_edges, topological_order
from .html import CHAR_W, FONT, MARGIN, Svg, escape, short
from .labels import COLOURS, kind, label, shape_text

__all__ = ["GraphView", "draw_graph", "graph_svg"]

_NODE_H = 22
_LAYER_GAP = 46
_NODE_GAP = 14


class GraphView:
    """A network's node graph with its users, layout depths and dims, for tables and pictures.

    `back_edges` are the engine's recurrent edges `(user, operand)`; without
    them the graph is acyclic, so `order` (operands first) and `depth` exist.
    """

    def __init__(self, network: Any):
        self.network = network
        self.graph = Graph(dict(network.structure.outputs))
        g = self.graph
        self.n = len(g.layers)
        self.users: list[list[int]] = [[] for _ in range(self.n)]
        for nid, ops in enumerate(g.operands):
            for op in ops:
                if nid not in self.users[op]:
                    self.users[op].append(nid)
        self.back_edges = recurrent_edges(g)
        self.order = topological_order(g)
        self.depth = self._depths()
        self.dims = node_dims(g)
        names = value_names(list(network.structure.outputs))
        self.names = [names.get(id(layer), "") for layer in g.layers]  # the summary's row names (core.roles)

    def forward_operands(self, nid: int) -> list[int]:
        """The operands of `nid` that are not read through a back edge."""
        return [op for op in self.graph.operands[nid] if (nid, op) not in self.back_edges]

    def _depths(self) -> list[int]:
        """Longest path from a source; constants and weights sit just above their first user."""
        depth = [0] * self.n
        for nid in self.order:
            ops = self.forward_operands(nid)
            depth[nid] = 1 + max((depth[op] for op in ops), default=-1)
        for nid in reversed(self.order):
            if not self.graph.indexed[nid] and self.users[nid]:
                users = [u for u in self.users[nid] if (u, nid) not in self.back_edges]
                if users:
                    depth[nid] = max(depth[nid], min(depth[u] for u in users) - 1)
        return depth

    def dim_text(self, nid: int) -> str:
        """The node's dim (or shape) as text; '' where it is not known."""
        value = self.dims[nid]
        if value is None:
            return ""
        return shape_text(value) if isinstance(value, tuple) else str(value)

    def weights_of(self, nid: int) -> list[int]:
        """The Weight operands of `nid`."""
        return [op for op in self.graph.operands[nid] if isinstance(self.graph.layers[op], Weight)]

    def has_indexes(self) -> bool:
        """Whether the network works on Indexes (has a descriptor), so it has a context."""
        return any(isinstance(layer, Descriptor) for layer in self.graph.layers)

    def recurrent(self) -> bool:
        return bool(self.back_edges)


def graph_svg(network: Any, *, weights: bool = True, merge: bool = True, max_label: int = 40) -> Svg:
    """The node graph of a network as SVG: one box (`<g class="node">`) per node, arrows from operand to user.

    Nodes are laid out in layers by depth (longest path from the inputs, a
    Sugiyama-style layering without the dummy nodes), ordered within a layer
    by a few barycentre sweeps. Edges that close a recurrence are dashed
    and curve back round. `weights=False` leaves out Weight and Literal nodes
    (their names are in the node table of `network_html`); `merge=True` draws a
    `Node` and the one layer it names (a Kaldi component-node and its
    component) as one box.
    """
    return draw_graph(GraphView(network), weights=weights, merge=merge, max_label=max_label)


def draw_graph(info: GraphView, *, weights: bool = True, merge: bool = True, max_label: int = 40) -> Svg:
    """`graph_svg` of a network whose GraphView is already built."""
    g = info.graph
    inner: dict[int, int] = {}  # Node id -> the id of the layer it names, drawn in the Node's box
    if merge:
        for nid, layer in enumerate(g.layers):
            ops = g.operands[nid]
            if (
                isinstance(layer, Node)
                and len(ops) == 1
                and info.users[ops[0]] == [nid]
                and not isinstance(g.layers[ops[0]], (Input, Weight, Literal, Node))
                and ops[0] not in g.outputs.values()
            ):
                inner[nid] = ops[0]
    hidden = set(inner.values())
    keep = [
        nid
        for nid in range(info.n)
        if nid not in hidden and (weights or not isinstance(g.layers[nid], (Weight, Literal)))
    ]
    kept = set(keep)

    def operands(nid: int) -> list[tuple[int, bool]]:
        """(operand, is a back edge) of a drawn node; a merged Node reads what its layer reads."""
        src = inner.get(nid, nid)
        return [(op, (src, op) in info.back_edges) for op in g.operands[src] if op in kept]

    ops_of = {nid: operands(nid) for nid in keep}
    users: dict[int, list[int]] = {nid: [] for nid in keep}
    for nid in keep:
        for op, back in ops_of[nid]:
            if not back:
                users[op].append(nid)
    layers: dict[int, list[int]] = {}
    for nid in info.order:
        if nid in kept:
            layers.setdefault(info.depth[nid], []).append(nid)
    levels = sorted(layers)
    rank = {lvl: i for i, lvl in enumerate(levels)}
    pos = {nid: float(i) for lvl in levels for i, nid in enumerate(layers[lvl])}

    def neighbours(nid: int, up: bool) -> list[int]:
        return [op for op, back in ops_of[nid] if not back] if up else users[nid]

    for sweep in range(4):
        down = sweep % 2 == 0
        for lvl in levels if down else reversed(levels):
            nodes = layers[lvl]

            def bary(nid: int, down: bool = down) -> float:
                near = neighbours(nid, up=down)
                return sum(pos[m] for m in near) / len(near) if near else pos[nid]

            nodes.sort(key=lambda nid: (bary(nid), pos[nid]))
            for i, nid in enumerate(nodes):
                pos[nid] = float(i)

    outputs = {nid: name for name, nid in g.outputs.items()}
    labels = {nid: short(_box_label(g, nid, inner.get(nid)), max_label) for nid in keep}
    width = {nid: max(36.0, CHAR_W * len(labels[nid]) + 14) for nid in keep}
    row_w = {lvl: sum(width[n] for n in layers[lvl]) + _NODE_GAP * (len(layers[lvl]) - 1) for lvl in levels}
    total_w = max(row_w.values(), default=100) + 2 * MARGIN + 40  # room for back edges on the right
    xy: dict[int, tuple[float, float]] = {}
    for lvl in levels:
        x = MARGIN + (total_w - 40 - 2 * MARGIN - row_w[lvl]) / 2
        y: float = MARGIN + rank[lvl] * (_NODE_H + _LAYER_GAP)
        for nid in layers[lvl]:
            xy[nid] = (x, y)
            x += width[nid] + _NODE_GAP
    total_h = MARGIN * 2 + max(len(levels), 1) * (_NODE_H + _LAYER_GAP) - _LAYER_GAP + 14
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="symnet-graph" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" style="{FONT}">',
        '<defs><marker id="symnet-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#666"/></marker></defs>',
    ]
    for nid in keep:
        for op, back in ops_of[nid]:
            (x1, y1), (x2, y2) = xy[op], xy[nid]
            sx, sy = x1 + width[op] / 2, y1 + _NODE_H
            ex, ey = x2 + width[nid] / 2, y2
            if back or y1 >= y2:
                # from the bottom of the operand round the right side up to the user
                sx, sy = x1 + width[op], y1 + _NODE_H / 2
                ex, ey = x2 + width[nid], y2 + _NODE_H / 2
                bend = max(sx, ex) + 30
                out.append(
                    f'<path class="edge back" d="M {sx:.1f} {sy:.1f} C {bend:.1f} {sy:.1f} {bend:.1f} '
                    f'{ey:.1f} {ex:.1f} {ey:.1f}" fill="none" stroke="#6a1b9a" stroke-dasharray="4 3" '
                    f'marker-end="url(#symnet-arrow)"/>'
                )
            else:
                out.append(
                    f'<line class="edge" x1="{sx:.1f}" y1="{sy:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" '
                    f'stroke="#888" marker-end="url(#symnet-arrow)"/>'
                )
    for nid in keep:
        layer = g.layers[nid]
        fill, stroke = COLOURS[kind(layer)]
        x, y = xy[nid]
        extra = ' stroke-width="2.5"' if nid in outputs else ""
        dim = info.dim_text(nid)
        title = (
            f"#{nid} {label(layer)}"
            + (f"  dim {dim}" if dim else "")
            + (f"  → output {outputs[nid]}" if nid in outputs else "")
            + f"\n{short(repr(g.layers[inner.get(nid, nid)]), 300)}"
        )
        out.append(
            f'<g class="node" data-node="{nid}"><title>{escape(title)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width[nid]:.1f}" height="{_NODE_H}" rx="4" fill="{fill}" '
            f'stroke="{stroke}"{extra}/>'
            f'<text x="{x + width[nid] / 2:.1f}" y="{y + _NODE_H / 2 + 4:.1f}" text-anchor="middle" '
            f'fill="#222" font-size="11">{escape(labels[nid])}</text>'
            + (
                f'<text x="{x + width[nid] / 2:.1f}" y="{y + _NODE_H + 11:.1f}" text-anchor="middle" fill="#888" '
                f'font-size="9">{escape(dim)}</text>'
                if dim and g.indexed[nid]
                else ""
            )
            + "</g>"
        )
    out.append("</svg>")
    return Svg("".join(out))


def _box_label(graph: Any, nid: int, inner: int | None) -> str:
    """A box's text: a Weight by its name and shape; a merged Node as `name: Kind`."""
    layer = graph.layers[nid]
    if isinstance(layer, Weight):
        return f"{layer.name} {shape_text(layer.shape)}"
    if inner is None:
        return label(layer)
    kind_name = type(graph.layers[inner]).__name__
    if kind_name.endswith("Component") and kind_name != "Component":
        kind_name = kind_name[: -len("Component")]
    kind_name = kind_name.replace("NaturalGradient", "")
    if not hasattr(graph.layers[inner], "name"):
        kind_name = label(graph.layers[inner])
    return f"{layer.name}: {kind_name}"
