"""A network's layers as a table: output dims, parameter counts and time context, for given input dims.

`summarize(outputs, input_dims)` makes one row per layer the user wrote, in
operands-first order (what MXNet's `infer_shape` and a Keras or Flax summary
show): Weights and Literals are not rows but counted at (or shown in) the row
that uses them, a `Ref` is the Node it names, and a `Node` names the row of
the layer it wraps. Every other row is named `node.role` (`lstm1.gates`,
`lstm1.sigmoid_2`, `lstm1.gates[0:4]`: `symnet._src.core.roles`), or, for a
descriptor or a value between Nodes, by its expression over its operands'
names (`Offset(lstm1.h, -1)`). Dims come from the engine's one dim inference
(`symnet._src.engine.dims.node_shapes`), contexts from Kaldi's context probe
(`symnet._src.engine.context.node_contexts`): how many input frames before and
after a frame each node needs. `infer_dims` gives the dims alone, for programs.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from ..base.errors import GraphError, PlanError, ShapeError
from ..core import html
from ..core.descriptor import Input, Node, Ref
from ..core.formatting import Formatter
from ..core.layer import Identity, Layer, Literal, Weight
from ..core.roles import value_names
from ..core.walk import walk
from .context import node_contexts
from .dims import Shape, node_shapes
from .graph import DEFAULT_INPUT, Graph

__all__ = ["Summary", "SummaryRow", "infer_dims", "summarize"]

_LABEL_WIDTH = 48


@attrs.frozen
class SummaryRow:
    """One layer: its label (a name, or an expression over earlier rows' names), class, dim, counts and context.

    `dim` is the number of columns of a node with Indexes, the full shape of a
    value without (a function of Weights only), None where nothing tells;
    `params` and `state` count the values of the Weights this row is the first
    to use; `context` is `(left, right)`, None for a value without Indexes or a
    node without a context (one that reads absolute time).
    """

    node: str
    kind: str
    dim: int | Shape | None
    params: int
    state: int
    context: tuple[int, int] | None
    indexed: bool


@attrs.frozen
class Summary:
    """The rows of a network's summary; prints as a text table, shows as an HTML table in notebooks."""

    rows: tuple[SummaryRow, ...]

    @property
    def params(self) -> int:
        """All trainable values (each Weight once)."""
        return sum(r.params for r in self.rows)

    @property
    def state(self) -> int:
        """All state values (FixedWeights, each once)."""
        return sum(r.state for r in self.rows)

    def table(self) -> tuple[list[str], list[list[str]]]:
        """The column heads and every row's cells as text (what `str` and the HTML view show)."""
        head = ["#", "node", "kind", "dim", "params", "state", "context"]
        return head, [
            [str(k), r.node, r.kind, dim_text(r.dim), f"{r.params:,}", f"{r.state:,}", context_text(r)]
            for k, r in enumerate(self.rows)
        ]

    def __str__(self) -> str:
        head, rows = self.table()
        rows = [head, *rows, ["", "total", "", "", f"{self.params:,}", f"{self.state:,}", ""]]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        right = {0, 3, 4, 5}
        lines = [
            "  ".join(
                c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in rows
        ]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """The table, for notebooks (see `symnet.display`)."""
        return html.render_html(self)


def dim_text(dim: int | Shape | None) -> str:
    """A row's dim as the table shows it: `40`, a shape `(3, 4)`, `?` when unknown."""
    if dim is None:
        return "?"
    if isinstance(dim, int):
        return str(dim)
    return "(" + ", ".join(map(str, dim)) + ("," if len(dim) == 1 else "") + ")"


def context_text(row: SummaryRow) -> str:
    """`left, right`; `none` for a node that has no context, empty for a value without Indexes."""
    if not row.indexed:
        return ""
    return "none" if row.context is None else f"{row.context[0]}, {row.context[1]}"


def _graph_and_dims(
    outputs: Mapping[str, Layer], input_dims: Mapping[str, int] | None, strict: bool
) -> tuple[Graph, list[Shape | None]]:
    graph = Graph(outputs)
    known: dict[int, int] = {}
    for name, dim in (input_dims or {}).items():
        if name not in graph.inputs:
            raise GraphError(f"input_dims names {name!r}, but the network's inputs are {sorted(graph.inputs)}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ShapeError(f"input_dims[{name!r}] must be a positive integer, got {dim!r}")
        declared = graph.input_dims.get(name)
        if declared is not None and declared != dim:
            raise ShapeError(f"input_dims[{name!r}] is {dim}, but the network declares Input({name!r}, {declared})")
        known[graph.inputs[name]] = int(dim)
    return graph, node_shapes(graph, known, strict=strict)


def infer_dims(outputs: Mapping[str, Layer], input_dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """The dim of every input, named Node and output, without running anything.

    `input_dims` gives the dims of inputs that do not declare one (`Identity()`);
    operands that do not fit raise the layer's ShapeError, and a dim nothing
    determines is a ShapeError naming it.
    """
    graph, shapes = _graph_and_dims(outputs, input_dims, strict=True)
    named = {
        **graph.inputs,
        **{name: graph.ids[node] for name, node in graph.named.items() if node in graph.ids},
        **graph.outputs,
    }
    dims: dict[str, int] = {}
    for name, nid in named.items():
        shape = shapes[nid]
        if shape is None or not len(shape):
            hint = " (give input_dims for inputs without a declared dim)" if None in graph.input_dims.values() else ""
            raise ShapeError(f"the dim of {name!r} cannot be inferred{hint}")
        dims[name] = int(shape[-1])
    return dims


def summarize(outputs: Mapping[str, Layer], input_dims: Mapping[str, int] | None = None) -> Summary:
    """The summary table of a network's canonical outputs (see the module doc)."""
    graph, shapes = _graph_and_dims(outputs, input_dims, strict=False)
    order = walk(list(outputs.values()))
    roots = {id(layer) for layer in outputs.values()}

    def is_row(layer: Layer) -> bool:
        return not isinstance(layer, (Weight, Literal, Ref)) or id(layer) in roots

    names: dict[int, list[str]] = {}  # layer -> the Nodes that name it
    texts: dict[int, str] = {}  # how a later row's label shows an operand: its name, or its expression
    for layer in order:
        if isinstance(layer, Node) and is_row(layer.arg):
            names.setdefault(id(layer.arg), []).append(layer.name)
            texts[id(layer)] = layer.name
    values = value_names(list(outputs.items()))
    target = {
        id(layer): id(layer.arg) if isinstance(layer, Node) and is_row(layer.arg) else id(layer) for layer in order
    }
    outs: dict[int, list[str]] = {}
    for name, layer in outputs.items():
        outs.setdefault(target[id(layer)], []).append(name)

    rows_layers = [layer for layer in order if is_row(layer) and target[id(layer)] == id(layer)]
    nids = [graph.ids.get(Graph.key(graph.resolve(layer))) for layer in rows_layers]
    try:
        contexts = node_contexts(graph, [nid for nid in nids if nid is not None and graph.indexed[nid]])
    except PlanError:  # a network the planner cannot plan still has a table
        contexts = {}
    counted: set[str] = set()
    rows = []
    for layer, nid in zip(rows_layers, nids, strict=True):
        label, text = _label(layer, names.get(id(layer), []), outs.get(id(layer), []), values.get(id(layer)), texts)
        texts[id(layer)] = text
        params = state = 0
        for child in layer.children if not isinstance(layer, Weight) else (layer,):
            if isinstance(child, Weight) and child.name not in counted:
                counted.add(child.name)  # type: ignore[arg-type]
                size = int(np.prod(child.shape, dtype=np.int64))
                params, state = (params + size, state) if child.trainable else (params, state + size)
        indexed = nid is not None and graph.indexed[nid]
        shape = shapes[nid] if nid is not None else None
        dim: int | Shape | None = None if shape is None else (int(shape[-1]) if indexed and len(shape) else shape)
        context = contexts.get(nid) if indexed and nid is not None else None
        rows.append(SummaryRow(label, layer.kind, dim, params, state, context, indexed))
    return Summary(tuple(rows))


def _label(
    layer: Layer, names: list[str], outs: list[str], value: str | None, texts: dict[int, str]
) -> tuple[str, str]:
    """A row's label and how later rows show it: the Nodes naming it (and the outputs it is), an output's or
    input's name, its name (`symnet._src.core.roles`: `lstm1.gates`), else its expression over its operands' names."""
    if names:
        return ", ".join(names) + (f" → {', '.join(outs)}" if outs else ""), names[0]
    if outs:
        return ", ".join(outs), outs[0]
    if isinstance(layer, (Identity, Input)):
        name = layer.input_name or DEFAULT_INPUT
        return name, name
    if value is not None:
        return value, value
    operands: dict[int, str] = {}
    for child in layer.children:
        if id(child) in texts:
            operands[id(child)] = texts[id(child)]
        elif isinstance(child, (Weight, Ref)):
            operands[id(child)] = child.name or "?"
    text, prec = Formatter().with_operands(layer, operands)
    label = text if len(text) <= _LABEL_WIDTH else text[: _LABEL_WIDTH - 1] + "…"
    return label, text if prec == Formatter.ATOM else f"({text})"
