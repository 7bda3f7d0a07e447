"""Rich display for notebooks: layer trees, networks, Tapes, compiled Computations, pictures.

Everything here returns self-contained HTML or SVG text (no scripts, no
external style sheets or fonts, nothing fetched from the network), wrapped in
`Html` / `Svg` (plain `str` subclasses with `_repr_html_` / `_repr_svg_`), so
a notebook cell shows it and a test can parse it:

- `layer_html(layer)`: the expression tree, foldable (`<details>`); shared
  sub-expressions are shown once.
- `network_html(network)`: inputs, outputs, every node with its dim where it
  is known, the parameters (names, shapes, counts), the left/right context when
  the network works on Indexes, the graph picture and the expression.
- `tape_html(tape, deltas=None)`: every tape node with its layer, shape, row
  Indexes and a value summary (min/mean/max); with
  `deltas=tape.backward_deltas(d)` also each node's delta.
- `computation_html(computation)`: the request and every planned node with the
  Indexes it computes; `index_map_html(computation, node)`: which operand row
  each row of a node reads.
- `graph_svg(network)`: the node graph, laid out in layers by depth (inputs at
  the top, outputs at the bottom; recurrences as dashed back edges).
- `receptive_field(network)`: which frames of every node (down to the inputs)
  one output frame reads, planned by the engine; shows as an SVG grid of
  node x frame.

`Layer`, `Network`, `Tape` and `Computation` show themselves through these
(`_repr_html_`); their `repr` stays the plain-text form.
"""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser
from collections import OrderedDict
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = [
    "Html",
    "ReceptiveField",
    "Svg",
    "computation_html",
    "graph_svg",
    "index_map_html",
    "layer_html",
    "network_html",
    "receptive_field",
    "tape_html",
]


class Html(str):
    """HTML text that a notebook renders (a `str`, so it can be printed, parsed, saved).

    Its `repr` is a plain-text rendering (tables as rows of cells), for
    consoles and notebook front ends that show only text.
    """

    def _repr_html_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return _html_to_text(self)


class Svg(str):
    """SVG text that a notebook renders (a `str`)."""

    def _repr_svg_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"<SVG picture, {len(self)} characters: display it in a notebook or save it to a .svg file>"


class _TextRenderer(HTMLParser):
    """HTML to plain text: block elements and table rows on their own lines, cells separated by ' | '."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.line: list[str] = []
        self.cells = 0
        self.in_svg = 0

    def _break(self) -> None:
        text = "".join(self.line).rstrip()
        if text:
            self.lines.append(text)
        self.line = []
        self.cells = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "svg":
            self.in_svg += 1
            self.line.append("[picture]")
        elif tag in ("td", "th"):
            if self.cells:
                self.line.append(" | ")
            self.cells += 1
            self.in_cell = True
        elif tag in ("div", "br") and getattr(self, "in_cell", False):
            self.line.append(" ")
        elif tag in ("div", "tr", "details", "summary", "br"):
            self._break()

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.in_svg -= 1
        elif tag in ("td", "th"):
            self.in_cell = False
        elif tag == "div" and getattr(self, "in_cell", False):
            pass
        elif tag in ("div", "tr", "details", "summary", "table"):
            self._break()

    def handle_data(self, data: str) -> None:
        if not self.in_svg:
            self.line.append(re.sub(r"\s+", " ", data) if self.line else data.lstrip())


def _html_to_text(text: str) -> str:
    parser = _TextRenderer()
    parser.feed(text)
    parser.close()
    parser._break()
    return "\n".join(parser.lines)


# ----- small helpers ------------------------------------------------------------------------------

_FONT = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px"
_BOX = f"{_FONT}; line-height: 1.4"
_TABLE = "border-collapse: collapse; margin: 4px 0"
_CELL = "border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; white-space: nowrap"
_HEAD = _CELL + "; background: #f0f0f0"
_GREY = "color: #777"
_MAX_ROWS = 400  # table rows shown before eliding
_MAX_TREE = 400  # tree entries shown before eliding


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(head: list[str], rows: list[list[str]], total: int | None = None) -> str:
    """A table from already escaped cells; rows beyond `_MAX_ROWS` are elided with a note."""
    out = [f'<table style="{_TABLE}"><thead><tr>']
    out += [f'<th style="{_HEAD}">{h}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows[:_MAX_ROWS]:
        out.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in row) + "</tr>")
    total = len(rows) if total is None else total
    if total > _MAX_ROWS:
        out.append(f'<tr><td style="{_CELL}; {_GREY}" colspan="{len(head)}">… {total - _MAX_ROWS} more rows</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _box(*parts: str) -> Html:
    return Html(f'<div class="symnet-display" style="{_BOX}">' + "".join(parts) + "</div>")


def _fold(summary: str, body: str, open: bool = False) -> str:
    return f"<details{' open' if open else ''}><summary>{summary}</summary>{body}</details>"


def _num(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def _count(n: int) -> str:
    return f"{n:,}"


def _shape_text(shape: Iterable[int]) -> str:
    shape = tuple(int(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _summary(value: Any) -> tuple[str, str, str, str]:
    """(min, mean, max, note) of an array; 'traced' inside jit, '' for what has no numbers."""
    try:
        import jax

        if isinstance(value, jax.core.Tracer):
            return "traced", "", "", ""
    except Exception:  # pragma: no cover - jax is a dependency
        pass
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
    return _num(float(array.min())), _num(float(array.mean())), _num(float(array.max())), note


def _index_text(rows: Any, limit: int = 4) -> str:
    """Kaldi-style ranges of a node's row Indexes (an IndexSet or the engine's Rows)."""
    from .core.index import format_indexes

    if rows is None:
        return ""
    try:
        keys = rows.index_set().keys if hasattr(rows, "index_set") else rows.keys
        return format_indexes(keys, limit=limit)
    except Exception as e:  # display must not fail
        return f"? ({type(e).__name__})"


# ----- labels -------------------------------------------------------------------------------------


def label(layer: Any) -> str:
    """A short one-line name for a layer: its kind and what distinguishes it (name, offset, shape)."""
    from .core.descriptor import Const, DimRange, Input, Node, Offset, Ref, ReplaceIndex, Round, Scale
    from .core.layer import BinaryLayer, Identity, Literal, Power, Weight

    kind = type(layer).__name__
    if isinstance(layer, Identity):
        return "x (input)"
    if isinstance(layer, Input):
        return f"Input {layer.name!r} dim {layer.dim}"
    if isinstance(layer, (Node, Ref)):
        return f"{kind} {layer.name!r}"
    if isinstance(layer, Weight):
        name = f" {layer.name!r}" if layer.name else ""
        return f"{kind}{name} {_shape_text(layer.shape)}"
    if isinstance(layer, Literal):
        value = layer.value
        return f"Literal {value!r}" if isinstance(value, float) else f"Literal array{_shape_text(value.shape)}"
    if isinstance(layer, Offset):
        t = f"t{layer.t_offset:+d}" if layer.t_offset else "t"
        x = f", x{layer.x_offset:+d}" if layer.x_offset else ""
        return f"Offset {t}{x}"
    if isinstance(layer, Round):
        return f"Round {layer.t_modulus}"
    if isinstance(layer, ReplaceIndex):
        return f"ReplaceIndex {layer.variable}={layer.value}"
    if isinstance(layer, Const):
        return f"Const {layer.value:g} dim {layer.dim}"
    if isinstance(layer, Scale):
        return f"Scale {layer.scale:g}"
    if isinstance(layer, DimRange):
        return f"DimRange {layer.offset}:{layer.offset + layer.dim}"
    if isinstance(layer, Power):
        return f"Power {layer.exponent:g}"
    if isinstance(layer, BinaryLayer):
        return f"{kind} {layer.symbol}"
    name = getattr(layer, "name", None)
    if isinstance(name, str):  # components
        return f"{kind} {name!r}"
    members = getattr(layer, "members", None)
    if isinstance(members, tuple):  # a scanned recurrence on a Tape
        names = [getattr(m, "name", None) or type(m).__name__ for m in members]
        return f"{kind} [{', '.join(map(str, names))}]"
    return kind


def _kind(layer: Any) -> str:
    """A coarse class for colouring: input, node, descriptor, weight, constant, component, op."""
    from .components.base import Component
    from .core.descriptor import Const, Descriptor, Input, Node
    from .core.layer import Identity, Literal, Weight

    if isinstance(layer, (Input, Identity)):
        return "input"
    if isinstance(layer, Node):
        return "node"
    if isinstance(layer, Weight):
        return "weight"
    if isinstance(layer, (Literal, Const)):
        return "constant"
    if isinstance(layer, Component):
        return "component"
    if isinstance(layer, Descriptor) and not layer.rowwise:
        return "descriptor"
    return "op"


_COLOURS = {
    "input": ("#d9f2d9", "#2e7d32"),
    "node": ("#efe3f7", "#6a1b9a"),
    "weight": ("#fff0d6", "#b26a00"),
    "constant": ("#f2f2f2", "#666666"),
    "component": ("#e3eefc", "#1a56a8"),
    "descriptor": ("#dff4f7", "#00838f"),
    "op": ("#ffffff", "#555555"),
}


# ----- layers -------------------------------------------------------------------------------------


def layer_html(layer: Any, *, open_depth: int = 3) -> Html:
    """The expression tree of `layer`, one foldable entry per sub-expression.

    A sub-expression used more than once (the same object) is expanded the
    first time and referred to by its number after that, so DAGs with
    exponentially many paths stay small.
    """
    return _box(
        f'<div style="{_GREY}">{_e(_short(repr(layer), 200))}</div>',
        _tree(layer, open_depth),
    )


def _tree(root: Any, open_depth: int) -> str:
    from .core.layer import Layer

    numbers: dict[int, int] = {}
    shown = [0]

    def entry(layer: Any, field: str, depth: int) -> str:
        prefix = f'<span style="{_GREY}">{_e(field)}: </span>' if field else ""
        if not isinstance(layer, Layer):
            return f"<div>{prefix}{_e(repr(layer))}</div>"
        colour = _COLOURS[_kind(layer)][1]
        text = f'<b style="color: {colour}">{_e(label(layer))}</b>'
        where = f' <span style="{_GREY}">{_e(layer.where)}</span>' if getattr(layer, "where", None) else ""
        key = id(layer)
        children = list(layer.named_children())
        if key in numbers:
            return f'<div>{prefix}{text} <span style="{_GREY}">(shared: #{numbers[key]})</span></div>'
        numbers[key] = len(numbers) + 1
        tag = f'<span style="{_GREY}">#{numbers[key]}</span> '
        shown[0] += 1
        if not children:
            return f"<div>{prefix}{tag}{text}{where}</div>"
        if shown[0] > _MAX_TREE or depth > 200:
            return f'<div>{prefix}{tag}{text} <span style="{_GREY}">… (not expanded)</span></div>'
        body = "".join(entry(c, name, depth + 1) for name, c in children)
        body = f'<div style="margin-left: 1.4em; border-left: 1px dotted #bbb; padding-left: 0.4em">{body}</div>'
        return _fold(f"{prefix}{tag}{text}{where}", body, open=depth < open_depth)

    return entry(root, "", 0)


# ----- the node graph ---------------------------------------------------------------------------


class _GraphInfo:
    """A network's node graph with labels, depths, dims and parameters, for tables and pictures."""

    def __init__(self, network: Any):
        from .engine.graph import Graph

        net = _unwrap(network)
        self.network = net
        self.graph = Graph(dict(net.structure.outputs))
        g = self.graph
        self.n = len(g.layers)
        self.users: list[list[int]] = [[] for _ in range(self.n)]
        for nid, ops in enumerate(g.operands):
            for op in ops:
                if nid not in self.users[op]:
                    self.users[op].append(nid)
        self.back_edges = self._back_edges()
        self.depth = self._depths()
        self.dims = self._dims()

    def _back_edges(self) -> set[tuple[int, int]]:
        """Edges (user, operand) that close a recurrence: time shifts inside a strongly connected group.

        Every cycle of a valid graph has a time shift on it (the engine checks
        this), so without these edges the graph is acyclic; a graph that is not
        valid falls back to the back edges of a depth-first search.
        """
        from .engine.graph import _shifts_time
        from .engine.recurrence import strongly_connected

        g = self.graph
        group = {}
        for k, members in enumerate(strongly_connected(list(range(self.n)), g.operands)):
            for m in members:
                group[m] = k
        back = {(nid, op) for nid, ops in enumerate(g.operands) for op in ops
                if group[nid] == group[op] and _shifts_time(g.layers[nid])}
        if self._acyclic(back):
            return back
        return self._dfs_back_edges()

    def _acyclic(self, removed: set[tuple[int, int]]) -> bool:
        state = [0] * self.n
        for root in range(self.n):
            if state[root]:
                continue
            state[root] = 1
            stack = [(root, iter(self.graph.operands[root]))]
            while stack:
                nid, it = stack[-1]
                op = next(it, None)
                if op is None:
                    state[nid] = 2
                    stack.pop()
                elif (nid, op) in removed:
                    continue
                elif state[op] == 1:
                    return False
                elif state[op] == 0:
                    state[op] = 1
                    stack.append((op, iter(self.graph.operands[op])))
        return True

    def _dfs_back_edges(self) -> set[tuple[int, int]]:
        """Edges (user, operand) that close a cycle, found depth-first from the outputs."""
        g = self.graph
        state = [0] * self.n
        back: set[tuple[int, int]] = set()
        roots = list(dict.fromkeys(g.outputs.values())) + list(range(self.n))
        for root in roots:
            if state[root]:
                continue
            state[root] = 1
            stack = [(root, iter(g.operands[root]))]
            while stack:
                nid, it = stack[-1]
                op = next(it, None)
                if op is None:
                    state[nid] = 2
                    stack.pop()
                elif state[op] == 1:
                    back.add((nid, op))
                elif state[op] == 0:
                    state[op] = 1
                    stack.append((op, iter(g.operands[op])))
        return back

    def forward_operands(self, nid: int) -> list[int]:
        return [op for op in self.graph.operands[nid] if (nid, op) not in self.back_edges]

    def topological(self) -> list[int]:
        """Node ids, operands before users (back edges ignored)."""
        order: list[int] = []
        state = [0] * self.n
        for root in range(self.n):
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
                for op in reversed(self.forward_operands(nid)):
                    if not state[op]:
                        stack.append((op, False))
        return order

    def _depths(self) -> list[int]:
        """Longest path from a source; constants and weights sit just above their first user."""
        order = self.topological()
        depth = [0] * self.n
        for nid in order:
            ops = self.forward_operands(nid)
            depth[nid] = 1 + max((depth[op] for op in ops), default=-1)
        for nid in reversed(order):
            if not self.graph.indexed[nid] and self.users[nid]:
                users = [u for u in self.users[nid] if (u, nid) not in self.back_edges]
                if users:
                    depth[nid] = max(depth[nid], min(depth[u] for u in users) - 1)
        return depth

    def _dims(self) -> list[Any]:
        """Per node: the column dim (indexed nodes) or the shape (weights, constants), where known."""
        from .components.base import Component
        from .core.descriptor import Append, Const, DimRange, Failover, Input, Sum, Switch
        from .core.layer import BinaryLayer, Dot, Literal, Weight

        g, params = self.graph, self.network.params
        dims: list[Any] = [None] * self.n
        for _ in range(self.n + 1):
            changed = False
            for nid in self.topological():
                layer, ops = g.layers[nid], g.operands[nid]
                d = [dims[o] for o in ops]
                value: Any = None
                try:
                    if isinstance(layer, Input):
                        value = layer.dim
                    elif isinstance(layer, Weight):
                        value = tuple(np.shape(params[layer.name])) if layer.name in params else layer.shape
                    elif isinstance(layer, Literal):
                        value = tuple(np.shape(layer.value.array)) if hasattr(layer.value, "array") else ()
                    elif isinstance(layer, (Const, DimRange)):
                        value = layer.dim
                    elif isinstance(layer, Component):
                        value = layer.output_dim
                    elif isinstance(layer, Append):
                        value = sum(d) if all(isinstance(x, int) for x in d) else None
                    elif isinstance(layer, (Sum, Failover, Switch)):
                        value = next((x for x in d if isinstance(x, int)), None)
                    elif isinstance(layer, Dot):
                        rhs = d[1]
                        value = rhs[-1] if isinstance(rhs, tuple) and rhs else rhs if isinstance(rhs, int) else None
                    elif isinstance(layer, BinaryLayer):
                        cands = [x if isinstance(x, int) else (x[-1] if x else 1) for x in d if x is not None]
                        value = max(cands) if len(cands) == len(d) and g.indexed[nid] else None
                    elif len(ops) == 1:
                        value = d[0]
                except Exception:
                    value = None
                if g.indexed[nid] and isinstance(value, tuple):
                    value = value[-1] if value else None
                if value is not None and dims[nid] != value:
                    dims[nid] = value
                    changed = True
            if not changed:
                break
        return dims

    def dim_text(self, nid: int) -> str:
        value = self.dims[nid]
        if value is None:
            return ""
        return _shape_text(value) if isinstance(value, tuple) else str(value)

    def weights_of(self, nid: int) -> list[int]:
        from .core.layer import Weight

        return [op for op in self.graph.operands[nid] if isinstance(self.graph.layers[op], Weight)]

    def has_indexes(self) -> bool:
        from .core.descriptor import Descriptor

        return any(isinstance(layer, Descriptor) for layer in self.graph.layers)

    def recurrent(self) -> bool:
        return bool(self.back_edges)


def _unwrap(network: Any) -> Any:
    """A Network from a Network or a KaldiNetwork (anything with `.network` and `.structure`)."""
    inner = getattr(network, "network", None)
    if inner is not None and hasattr(inner, "structure"):
        return inner
    return network


_CONTEXT: OrderedDict[Any, tuple[int, int] | str] = OrderedDict()


def _context(network: Any) -> dict[str, tuple[int, int] | str]:
    """Per output: (left, right) context, or the error text; computed when asked, cached by structure."""
    out = {}
    for name, _ in network.structure.outputs:
        key = (network.structure, name)
        if key not in _CONTEXT:
            try:
                _CONTEXT[key] = tuple(network.context(name))
            except Exception as e:  # an unplannable network still displays
                _CONTEXT[key] = f"{type(e).__name__}: {_short(str(e), 200)}"
            if len(_CONTEXT) > 64:
                _CONTEXT.popitem(last=False)
        out[name] = _CONTEXT[key]
    return out


# ----- networks -----------------------------------------------------------------------------------


def network_html(network: Any, *, context: bool = True, picture: bool = True) -> Html:
    """Inputs, outputs, nodes (with dims where known), parameters and context of a Network.

    Takes a `Network` or a `KaldiNetwork` (whose objectives are shown). The
    context is computed only when the network works on Indexes, and a network
    the planner rejects still displays, with the error.
    """
    net = _unwrap(network)
    objectives = dict(getattr(network, "objectives", {}) or {})
    params = net.params
    total = sum(int(np.size(v)) for v in params.values())
    parts = [f"<div><b>Network</b>: {len(net.structure.outputs)} output(s), {len(params)} parameter array(s), "
             f"{_count(total)} parameters</div>"]
    try:
        info = _GraphInfo(net)
    except Exception as e:
        info = None
        parts.append(f'<div style="color: #b00020">the node graph cannot be built: {_e(type(e).__name__)}: '
                     f"{_e(_short(str(e), 300))}</div>")
    if info is not None:
        g = info.graph
        ins = [f"{_e(name)} (dim {_e(info.dim_text(nid) or '?')})" for name, nid in g.inputs.items()]
        parts.append(f"<div>inputs: {', '.join(ins) or 'none'}</div>")
        contexts = _context(net) if context and info.has_indexes() else {}
        rows = []
        for name, nid in g.outputs.items():
            ctx = contexts.get(name, "")
            ctx_text = f"left {ctx[0]}, right {ctx[1]}" if isinstance(ctx, tuple) else _e(ctx)
            rows.append([_e(name), f"#{nid} {_e(label(g.layers[nid]))}", _e(info.dim_text(nid)),
                         _e(objectives.get(name, "")), ctx_text])
        head = ["output", "node", "dim", "objective", "context"]
        if not objectives:
            head.pop(3)
            rows = [r[:3] + r[4:] for r in rows]
        if not contexts:
            head.pop()
            rows = [r[:-1] for r in rows]
        parts.append(_table(head, rows))
        parts.append(_fold(f"<b>nodes</b> ({info.n})", _nodes_table(info), open=info.n <= 60))
    prow = []
    users = _weight_users(info) if info is not None else {}
    for name, value in params.items():
        prow.append([_e(name), _e(_shape_text(np.shape(value))), _e(_count(int(np.size(value)))),
                     _e(getattr(value, "dtype", "")), _e(", ".join(users.get(name, [])))])
    parts.append(_fold(f"<b>parameters</b> ({len(params)}, {_count(total)} values)",
                       _table(["name", "shape", "count", "dtype", "used by"], prow), open=len(params) <= 30))
    if info is not None and picture:
        try:
            parts.append(_fold("<b>graph</b>", graph_svg(net)))
        except Exception as e:
            parts.append(f'<div style="{_GREY}">no picture: {_e(type(e).__name__)}: {_e(_short(str(e)))}</div>')
    trees = "".join(f"<div><b>{_e(name)}</b></div>{_tree(layer, 2)}" for name, layer in net.structure.outputs)
    parts.append(_fold("<b>expression</b>", trees))
    return _box(*parts)


def _weight_users(info: _GraphInfo) -> dict[str, list[str]]:
    from .core.layer import Weight

    out: dict[str, list[str]] = {}
    for nid in range(info.n):
        for op in info.weights_of(nid):
            w = info.graph.layers[op]
            assert isinstance(w, Weight)
            out.setdefault(w.name, []).append(f"#{nid}")
    return out


def _nodes_table(info: _GraphInfo) -> str:
    g = info.graph
    outputs = {nid: name for name, nid in g.outputs.items()}
    rows = []
    for nid in info.topological():
        layer = g.layers[nid]
        ops = ", ".join(f"#{op}" + (" (back)" if (nid, op) in info.back_edges else "") for op in g.operands[nid])
        weights = []
        for op in info.weights_of(nid):
            w = g.layers[op]
            value = info.network.params.get(w.name)
            shape = np.shape(value) if value is not None else w.shape
            weights.append(f"{_e(w.name)} {_e(_shape_text(shape))} = {_e(_count(int(np.prod(shape))))}")
        name = _e(label(layer)) + (f' <b>→ output {_e(outputs[nid])}</b>' if nid in outputs else "")
        where = f'<div style="{_GREY}">{_e(layer.where)}</div>' if getattr(layer, "where", None) else ""
        rows.append([f"#{nid}", name + where, ops, _e(info.dim_text(nid)), "<br/>".join(weights)])
    return _table(["#", "node", "reads", "dim", "parameters"], rows)


# ----- tapes --------------------------------------------------------------------------------------


def tape_html(tape: Any, deltas: Mapping[Any, Any] | None = None) -> Html:
    """Every node of a Tape (or of a dict of output Tapes): layer, shape, rows, min/mean/max.

    `deltas` (from `tape.backward_deltas(delta)`) adds each node's delta summary.
    """
    from .core.tape import Tape

    roots = dict(tape) if isinstance(tape, Mapping) else {"": tape}
    order: list[Tape] = []
    seen: set[int] = set()
    for root in roots.values():
        for node in root.nodes():
            if id(node) not in seen:
                seen.add(id(node))
                order.append(node)
    number = {id(node): i for i, node in enumerate(order)}
    outputs = {id(t): name for name, t in roots.items()}
    delta_of = {id(k): v for k, v in deltas.items()} if deltas is not None else None
    head = ["#", "layer", "reads", "shape", "rows (Indexes)", "min", "mean", "max"]
    if delta_of is not None:
        head += ["δ min", "δ mean", "δ max"]
    rows = []
    any_rows = False
    for node in order:
        lo, mean, hi, note = _summary(node.value)
        name = _e(label(node.layer))
        if outputs.get(id(node)):
            name += f" <b>→ {_e(outputs[id(node)])}</b>"
        if note:
            name += f' <span style="color: #b00020">({_e(note)})</span>'
        reads = ", ".join(f"#{number[id(u)]}" for u in node.upstream if id(u) in number)
        idx = _index_text(node.rows)
        any_rows = any_rows or bool(idx)
        row = [f"#{number[id(node)]}", f'<span title="{_e(_short(repr(node.layer), 300))}">{name}</span>', reads,
               _e(_shape_text(np.shape(node.value))), _e(idx), lo, mean, hi]
        if delta_of is not None:
            d = delta_of.get(id(node))
            row += list(_summary(d)[:3]) if d is not None else ["", "", ""]
        rows.append(row)
    if not any_rows:
        head.pop(4)
        rows = [r[:4] + r[5:] for r in rows]
    title = f"<div><b>Tape</b>: {len(order)} nodes" + (", with deltas" if delta_of is not None else "") + "</div>"
    return _box(title, _table(head, rows))


# ----- computations -------------------------------------------------------------------------------


def _step_order(computation: Any) -> list[tuple[int, str]]:
    """(node id, how it is computed) in evaluation order: inputs, then steps and scan members."""
    out: list[tuple[int, str]] = []
    seen: set[int] = set()
    for name, (nid, _) in getattr(computation, "input_maps", {}).items():
        if nid not in seen:
            seen.add(nid)
            out.append((nid, "given" if nid in computation.given_state else "input"))
    scans = 0
    for step in computation.steps:
        members = getattr(step, "order", None)
        if members is not None:
            scans += 1
            for nid in members:
                if nid not in seen:
                    seen.add(nid)
                    out.append((nid, f"scan {scans}"))
        else:
            nid = step.nid
            if nid not in seen:
                seen.add(nid)
                out.append((nid, "step"))
    for nid in sorted(computation.rows):
        if nid not in seen:
            out.append((nid, ""))
    return out


def computation_html(computation: Any) -> Html:
    """The request of a compiled Computation and every planned node with the Indexes it computes."""
    from .core.index import format_indexes

    c = computation
    g = c.graph
    kind = f"regular, {c.batch} sequence(s), planned for one" if c.regular else "irregular (explicit Index lists)"
    scans = sum(1 for s in c.steps if hasattr(s, "order"))
    parts = [f"<div><b>Computation</b>: {_e(kind)}; {len(c.steps)} steps"
             + (f", {scans} scan(s)" if scans else "") + "</div>"]
    req = []
    for name, s in c.request.inputs.items():
        req.append(["input", _e(name), _e(_count(len(s))), _e(format_indexes(s.keys, limit=4))])
    for name, s in c.request.outputs.items():
        req.append(["output", _e(name), _e(_count(len(s))), _e(format_indexes(s.keys, limit=4))])
    parts.append(_table(["", "name", "rows", "Indexes"], req))
    outputs = {nid: name for name, nid in c.output_ids.items()}
    rows = []
    for nid, how in _step_order(c):
        layer = g.layers[nid]
        r = c.rows.get(nid)
        name = _e(label(layer)) + (f" <b>→ {_e(outputs[nid])}</b>" if nid in outputs else "")
        ops = ", ".join(f"#{op}" for op in g.operands[nid] if op in c.rows)
        rows.append([f"#{nid}", f'<span title="{_e(_short(repr(layer), 300))}">{name}</span>', ops, _e(how),
                     _e(_count(len(r))) if r is not None else "", _e(_index_text(r)) if r is not None else ""])
    parts.append(_table(["#", "node", "reads", "computed", "rows", "Indexes"], rows))
    return _box(*parts)


def _find_node(graph: Any, node: Any) -> int:
    """A node id from an id, an output / input / Node name, or a layer."""
    from .errors import PlanError

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
    key = graph._key(graph._resolve(node))
    if key in graph.ids:
        return graph.ids[key]
    raise PlanError(f"{_short(repr(node))} is not a node of this network")


def index_map_html(computation: Any, node: Any, *, through: bool = True, max_rows: int = 60) -> Html:
    """Which operand row every row of `node` reads, for a compiled Computation.

    `node` is a node id, an output, input or Node name, or a layer of the
    network. Each row of the table is an Index of the node; each column an
    indexed operand, naming the operand's Index that the row reads, `0` where
    the row reads zeros (IfDefined of a row that cannot be computed) and `-`
    where it does not read that operand (Failover's unused branch, Switch's
    other parts). With `through=True` a column follows chains of one-operand
    row movements (Offset, IfDefined, Round, ReplaceIndex) down to the node
    that computes the values, so `Append(Offset(x, -1), x)` shows the input
    rows it splices. In a regular plan the map is the same for every sequence
    and is shown for sequence 0.
    """
    from .core.descriptor import IfDefined, Offset, ReplaceIndex, Round
    from .engine.plan import Planner, _member
    from .core.index import format_indexes

    c = computation
    g = c.graph
    nid = _find_node(g, node)
    if nid not in c.rows:
        return _box(f"<div>#{nid} {_e(label(g.layers[nid]))} computes nothing for this request</div>")
    moves = (Offset, IfDefined, Round, ReplaceIndex)
    if True:  # the planner needs no recursion limit
        planner = Planner(g, c.request)
        needed = planner.requirements()
        keys = needed[nid]
        deps = planner.dependencies(nid, keys) if g.indexed[nid] and g.operands[nid] else []
        columns, head = [], ["row", "Index"]
        for op_id, child_keys, used in deps:
            read = child_keys.copy()
            valid = used & _member(child_keys, needed[op_id])
            chain: list[int] = []
            while through and isinstance(g.layers[op_id], moves) and g.indexed[op_id] and len(needed[op_id]):
                nxt, keys2, used2 = planner.dependencies(op_id, needed[op_id])[0]
                pos = np.searchsorted(needed[op_id], read[valid])
                ok = used2[pos] & _member(keys2[pos], needed[nxt])
                read[np.flatnonzero(valid)] = keys2[pos]
                valid[np.flatnonzero(valid)] = ok
                chain.append(op_id)
                op_id = nxt
            via = f" via {' ← '.join(label(g.layers[k]) for k in chain)}" if chain else ""
            head.append(f"#{op_id} {_e(label(g.layers[op_id]))}{_e(via)}")
            cells = np.array(["-"] * len(keys), dtype=object)
            shown = _show_keys(read)
            for i in range(len(keys)):
                if used[i]:
                    cells[i] = shown[i] if valid[i] else "0"
            columns.append(cells)
    if columns:  # a row that reads no operand is zeros (IfDefined of a row that is not computable)
        none = np.all([col == "-" for col in columns], axis=0)
        for col in columns:
            col[none] = "0"
    mine = _show_keys(keys)
    rows = [[str(i), _e(mine[i])] + [_e(col[i]) for col in columns] for i in range(min(len(keys), max_rows))]
    note = " (sequence 0; every sequence reads the same way)" if c.regular and c.batch > 1 else ""
    title = (f"<div><b>Index map</b> of #{nid} {_e(label(g.layers[nid]))}: {len(keys)} rows "
             f"{_e(format_indexes(keys, limit=4))}{_e(note)}</div>")
    more = f'<div style="{_GREY}">… {len(keys) - max_rows} more rows</div>' if len(keys) > max_rows else ""
    return _box(title, _table(head, rows), more)


def _show_keys(keys: np.ndarray) -> list[str]:
    from .core.index import decode

    n, t, x = decode(keys)
    return [f"({a}, {b}, {z})" if z else f"({a}, {b})" for a, b, z in zip(n, t, x)]


# ----- the graph picture ----------------------------------------------------------------------------

_CHAR_W = 6.6  # px per character of the 11px monospace labels
_NODE_H = 22
_LAYER_GAP = 46
_NODE_GAP = 14
_MARGIN = 12


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
    from .core.descriptor import Input, Node
    from .core.layer import Literal, Weight

    info = _GraphInfo(network)
    g = info.graph
    inner: dict[int, int] = {}  # Node id -> the id of the layer it names, drawn in the Node's box
    if merge:
        for nid, layer in enumerate(g.layers):
            ops = g.operands[nid]
            if (isinstance(layer, Node) and len(ops) == 1 and info.users[ops[0]] == [nid]
                    and not isinstance(g.layers[ops[0]], (Input, Weight, Literal, Node))
                    and ops[0] not in g.outputs.values()):
                inner[nid] = ops[0]
    hidden = set(inner.values())
    keep = [nid for nid in range(info.n) if nid not in hidden
            and (weights or not isinstance(g.layers[nid], (Weight, Literal)))]
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
    for nid in info.topological():
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

            def bary(nid: int) -> float:
                near = neighbours(nid, up=down)
                return sum(pos[m] for m in near) / len(near) if near else pos[nid]

            nodes.sort(key=lambda nid: (bary(nid), pos[nid]))
            for i, nid in enumerate(nodes):
                pos[nid] = float(i)

    outputs = {nid: name for name, nid in g.outputs.items()}
    labels = {nid: _short(_graph_label(g, nid, inner.get(nid)), max_label) for nid in keep}
    width = {nid: max(36.0, _CHAR_W * len(labels[nid]) + 14) for nid in keep}
    row_w = {lvl: sum(width[n] for n in layers[lvl]) + _NODE_GAP * (len(layers[lvl]) - 1) for lvl in levels}
    total_w = max(row_w.values(), default=100) + 2 * _MARGIN + 40  # room for back edges on the right
    xy: dict[int, tuple[float, float]] = {}
    for lvl in levels:
        x = _MARGIN + (total_w - 40 - 2 * _MARGIN - row_w[lvl]) / 2
        y = _MARGIN + rank[lvl] * (_NODE_H + _LAYER_GAP)
        for nid in layers[lvl]:
            xy[nid] = (x, y)
            x += width[nid] + _NODE_GAP
    total_h = _MARGIN * 2 + max(len(levels), 1) * (_NODE_H + _LAYER_GAP) - _LAYER_GAP + 14
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="symnet-graph" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" style="{_FONT}">',
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
                out.append(f'<path class="edge back" d="M {sx:.1f} {sy:.1f} C {bend:.1f} {sy:.1f} {bend:.1f} '
                           f'{ey:.1f} {ex:.1f} {ey:.1f}" fill="none" stroke="#6a1b9a" stroke-dasharray="4 3" '
                           f'marker-end="url(#symnet-arrow)"/>')
            else:
                out.append(f'<line class="edge" x1="{sx:.1f}" y1="{sy:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" '
                           f'stroke="#888" marker-end="url(#symnet-arrow)"/>')
    for nid in keep:
        layer = g.layers[nid]
        fill, stroke = _COLOURS[_kind(layer)]
        x, y = xy[nid]
        extra = ' stroke-width="2.5"' if nid in outputs else ""
        dim = info.dim_text(nid)
        title = f"#{nid} {label(layer)}" + (f"  dim {dim}" if dim else "") + (
            f"  → output {outputs[nid]}" if nid in outputs else "") + f"\n{_short(repr(g.layers[inner.get(nid, nid)]), 300)}"
        out.append(
            f'<g class="node" data-node="{nid}"><title>{_e(title)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width[nid]:.1f}" height="{_NODE_H}" rx="4" fill="{fill}" '
            f'stroke="{stroke}"{extra}/>'
            f'<text x="{x + width[nid] / 2:.1f}" y="{y + _NODE_H / 2 + 4:.1f}" text-anchor="middle" '
            f'fill="#222" font-size="11">{_e(labels[nid])}</text>'
            + (f'<text x="{x + width[nid] / 2:.1f}" y="{y + _NODE_H + 11:.1f}" text-anchor="middle" fill="#888" '
               f'font-size="9">{_e(dim)}</text>' if dim and g.indexed[nid] else "")
            + "</g>"
        )
    out.append("</svg>")
    return Svg("".join(out))


def _graph_label(graph: Any, nid: int, inner: int | None) -> str:
    """A box's text: a Weight by its name and shape; a merged Node as `name: Kind`."""
    from .core.layer import Weight

    layer = graph.layers[nid]
    if isinstance(layer, Weight):
        return f"{layer.name} {_shape_text(layer.shape)}"
    if inner is None:
        return label(layer)
    kind = type(graph.layers[inner]).__name__
    if kind.endswith("Component") and kind != "Component":
        kind = kind[: -len("Component")]
    kind = kind.replace("NaturalGradient", "")
    if not hasattr(graph.layers[inner], "name"):
        kind = label(graph.layers[inner])
    return f"{layer.name}: {kind}"


# ----- receptive fields -----------------------------------------------------------------------------


class ReceptiveField:
    """Which frames of each node one output frame reads (planned by the engine on a small request).

    `frames` maps a row label (an input or Node name, else a short label with
    the node id) to the sorted frames that node computes for output frame `t`;
    `window` is the span of input frames offered. Shows as an SVG grid
    (`_repr_svg_`, `svg()`), prints as a text grid.
    """

    def __init__(self, frames: dict[str, list[int]], window: tuple[int, int], t: int, output: str,
                 kinds: dict[str, str]):
        self.frames = frames
        self.window = window
        self.t = t
        self.output = output
        self.kinds = kinds

    @property
    def input_frames(self) -> dict[str, list[int]]:
        """The frames of each input that output frame `t` reads."""
        return {k: v for k, v in self.frames.items() if self.kinds.get(k) == "input"}

    def __repr__(self) -> str:
        lo, hi = self.window
        width = max((len(k) for k in self.frames), default=4)
        head = " " * (width + 1) + "".join("|" if t == self.t else ("+" if t % 5 == 0 else " ")
                                           for t in range(lo, hi + 1))
        lines = [f"ReceptiveField(output {self.output!r}, t={self.t}, frames {lo}..{hi})", head]
        for name, frames in self.frames.items():
            got = set(frames)
            lines.append(name.ljust(width) + " " + "".join("#" if t in got else "." for t in range(lo, hi + 1)))
        return "\n".join(lines)

    def svg(self, cell: int = 14) -> Svg:
        lo, hi = self.window
        names = list(self.frames)
        label_w = _CHAR_W * max((len(n) for n in names), default=4) + 12
        frames = list(range(lo, hi + 1))
        step = 1 if len(frames) <= 40 else 5
        footer = f"frames of every node that output {self.output!r} at t={self.t} reads"
        w = max(_MARGIN * 2 + label_w + cell * len(frames), _MARGIN * 2 + 6.0 * len(footer))
        h = _MARGIN * 2 + 16 + cell * len(names) + 14
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="symnet-receptive-field" width="{w:.0f}" '
               f'height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" style="{_FONT}">']
        x0, y0 = _MARGIN + label_w, _MARGIN + 16
        for j, t in enumerate(frames):
            if t % step == 0 or t == self.t:
                weight = ' font-weight="bold"' if t == self.t else ""
                out.append(f'<text class="frame" x="{x0 + j * cell + cell / 2:.1f}" y="{y0 - 5:.1f}" '
                           f'text-anchor="middle" font-size="9" fill="#555"{weight}>{t}</text>')
        for i, name in enumerate(names):
            y = y0 + i * cell
            out.append(f'<text x="{x0 - 6:.1f}" y="{y + cell - 3:.1f}" text-anchor="end" font-size="11" '
                       f'fill="#222">{_e(name)}</text>')
            got = set(self.frames[name])
            colour = _COLOURS.get(self.kinds.get(name, "op"), _COLOURS["op"])[1]
            for j, t in enumerate(frames):
                fill = colour if t in got else "#f4f4f4"
                out.append(f'<rect x="{x0 + j * cell:.1f}" y="{y:.1f}" width="{cell - 1}" height="{cell - 1}" '
                           f'fill="{fill}"><title>{_e(name)} t={t}{" (read)" if t in got else ""}</title></rect>')
        tx = x0 + (self.t - lo) * cell
        out.append(f'<rect x="{tx - 1:.1f}" y="{y0 - 1:.1f}" width="{cell + 1}" height="{cell * len(names) + 1}" '
                   'fill="none" stroke="#d32f2f" stroke-width="1.5"/>')
        out.append(f'<text x="{_MARGIN}" y="{h - _MARGIN + 4:.0f}" font-size="10" fill="#555">{_e(footer)}</text>')
        out.append("</svg>")
        return Svg("".join(out))

    def _repr_svg_(self) -> str:
        return str(self.svg())


def _input_reads(computation: Any) -> dict[int, np.ndarray]:
    """Per input node: the keys its users read (an input's rows are all it is given, read or not)."""
    from .engine.plan import Planner

    g = computation.graph
    inputs = {nid for nid in g.inputs.values() if nid in computation.rows}
    if True:  # the planner needs no recursion limit
        planner = Planner(g, computation.request)
        read: dict[int, list[np.ndarray]] = {nid: [] for nid in inputs}
        for nid in computation.rows:
            if nid in inputs or not g.indexed[nid] or not any(op in inputs for op in g.operands[nid]):
                continue
            for op_id, child_keys, used in planner.dependencies(nid, planner.requirements()[nid]):
                if op_id in inputs:
                    read[op_id].append(child_keys[used])
    return {nid: np.unique(np.concatenate(parts)) for nid, parts in read.items() if parts}


def receptive_field(network: Any, output: str | None = None, *, t: int = 0, window: tuple[int, int] | None = None,
                    nodes: str = "auto") -> ReceptiveField:
    """The frames of every node that output frame `t` reads.

    Plans the request "output frame `t` of one sequence, every input on
    `window`" (default: the network's context plus a margin; 8 frames back for
    a recurrence, whose reach is unbounded) and reads each node's Indexes from
    the compiled Computation's rows. `nodes='auto'` shows inputs and named
    Nodes when the network has Nodes, else every indexed node; `'all'` every
    indexed node.
    """
    from .core.descriptor import Input, Node
    from .engine import compile
    from .engine.context import output_name as _output_name
    from .engine.request import ComputationRequest
    from .core.index import IndexSet, decode
    from .core.layer import Identity

    net = _unwrap(network)
    name = _output_name(net, output)
    info = _GraphInfo(net)
    g = info.graph
    if window is None:
        try:
            left, right = net.context(name)
        except Exception:
            left, right = 0, 0
        margin = 8 if info.recurrent() else 0
        window = (t - left - margin, t + right + margin)
    lo, hi = int(window[0]), int(window[1])
    request = ComputationRequest(
        inputs={k: IndexSet.range(n=1, t=(lo, hi + 1)) for k in g.inputs},
        outputs={name: IndexSet.range(n=1, t=(t, t + 1))},
    )
    computation = compile(net, request)
    read = _input_reads(computation)
    named = any(isinstance(layer, Node) for layer in computation.graph.layers)
    out_id = computation.output_ids[name]
    frames: dict[str, list[int]] = {}
    kinds: dict[str, str] = {}
    cg = computation.graph
    order = sorted(computation.rows, key=lambda nid: (-info.depth[nid] if nid < info.n else 0, nid))
    for nid in order:
        layer = cg.layers[nid]
        is_input = isinstance(layer, (Input, Identity))
        if nodes == "auto" and named and not (is_input or isinstance(layer, Node) or nid == out_id):
            continue
        if is_input:
            key = getattr(layer, "name", "input")
        elif isinstance(layer, Node):
            key = layer.name
        else:
            key = f"{label(layer)} #{nid}"
        keys = read.get(nid, computation.rows[nid].keys) if is_input else computation.rows[nid].keys
        frames[key] = sorted(set(int(v) for v in decode(keys)[1]))
        kinds[key] = _kind(layer)
    return ReceptiveField(frames, (lo, hi), t, name, kinds)


def _register() -> None:
    from .core import html as hooks
    from .core.layer import Layer
    from .core.tape import Tape
    from .engine.computation import Computation
    from .network import Network

    hooks.register(Layer, layer_html)
    hooks.register(Tape, tape_html)
    hooks.register(Network, network_html)
    hooks.register(Computation, computation_html)


_register()
