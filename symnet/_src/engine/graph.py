"""The node graph of a network: distinct layers, their operands, Refs resolved to Nodes.

Layers become nodes once each (compared structurally, so equal sub-expressions
are computed once). `Identity()` is the input named `input`. A layer with an `expand()` method (a
component that is a composition of others, like TdnnComponent) is replaced by
its expansion. `Ref(name)`
is not a node of its own: it stands for the `Node` of that name, which is how a
node can depend on itself at another frame.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base.errors import GraphError, PlanError, at
from ..core.descriptor import Descriptor, IndexedLayer, Input, Node, Ref
from ..core.layer import Identity, Layer, Literal, Weight

__all__ = ["DEFAULT_INPUT", "Graph", "shifts_time", "strongly_connected"]

DEFAULT_INPUT = "input"


class Graph:
    """Nodes (by id), their operand ids, and which nodes carry Indexes."""

    def __init__(self, outputs: Mapping[str, Layer]):
        self.layers: list[Layer] = []
        self.ids: dict[Layer, int] = {}
        self.operands: list[tuple[int, ...]] = []
        self.inputs: dict[str, int] = {}
        self.input_dims: dict[str, int | None] = {}
        self.named: dict[str, Node] = {}
        self._collect_named(list(outputs.values()))
        self.outputs = {name: self._add(layer) for name, layer in outputs.items()}
        self.indexed = self._indexed()
        #: Whether each node is a network input (an `Input`, or `Identity()` for the one named `input`).
        self.is_input = [self.input_name(nid) is not None for nid in range(len(self.layers))]
        self._check_rows_moved()
        self._check_cycles()

    # ----- building ------------------------------------------------------------------

    def _collect_named(self, roots: list[Layer]) -> None:
        stack, seen = list(roots), set()
        while stack:
            layer = stack.pop()
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            if isinstance(layer, Node):
                other = self.named.setdefault(layer.name, layer)
                if other != layer:
                    raise GraphError(
                        f"two different nodes named {layer.name!r}: built at {other.where} and at {layer.where}"
                    )
            stack.extend(layer.children)

    def resolve(self, layer: Layer) -> Layer:
        """The layer that stands for `layer` in the graph: a macro layer's expansion, a Ref's Node."""
        expansion = layer.expand()
        if expansion is not None:  # a macro layer (e.g. TdnnComponent): plan what it stands for
            return self.resolve(expansion)
        if isinstance(layer, Ref):
            node = self.named.get(layer.name)
            if node is None:
                known = ", ".join(sorted(self.named)) or "none"
                raise GraphError(f"Ref({layer.name!r}) names no node (nodes: {known}){at(layer.where)}")
            return node
        return layer

    @staticmethod
    def key(layer: Layer) -> Layer:
        """The key of a (resolved) layer in `ids`: inputs by name, so Identity() and Input('input', d) are one node."""
        if isinstance(layer, Identity):
            return Input(DEFAULT_INPUT, 1)
        return Input(layer.name, 1) if isinstance(layer, Input) else layer

    def _add(self, root: Layer) -> int:
        first_new = len(self.layers)
        stack = [self.resolve(root)]
        while stack:
            layer = stack.pop()
            key = self.key(layer)
            if key in self.ids:
                existing = self.layers[self.ids[key]]
                if isinstance(layer, Input) and isinstance(existing, Input) and layer.dim != existing.dim:
                    raise GraphError(
                        f"input {layer.name!r} is declared with dims {existing.dim} (built at {existing.where}) "
                        f"and {layer.dim}{at(layer.where)}"
                    )
                continue
            self.ids[key] = len(self.layers)
            self.layers.append(layer)
            if isinstance(layer, (Input, Identity)):
                self._add_input(layer, self.ids[key])
            stack.extend(self.resolve(c) for c in reversed(layer.children))
        for nid in range(first_new, len(self.layers)):
            self.operands.append(tuple(self.ids[self.key(self.resolve(c))] for c in self.layers[nid].children))
        return self.ids[self.key(self.resolve(root))]

    def _add_input(self, layer: Input | Identity, nid: int) -> None:
        name = layer.name if isinstance(layer, Input) else DEFAULT_INPUT
        self.inputs[name] = nid
        dim = layer.dim if isinstance(layer, Input) else None
        old = self.input_dims.get(name)
        if old is not None and dim is not None and old != dim:
            raise GraphError(f"input {name!r} is declared with dims {old} and {dim}{at(layer.where)}")
        self.input_dims[name] = dim if dim is not None else old

    def input_name(self, nid: int) -> str | None:
        """The input name of node `nid` if it is a network input, else None."""
        layer = self.layers[nid]
        if isinstance(layer, Identity):
            return DEFAULT_INPUT
        return layer.name if isinstance(layer, Input) else None

    def endpoint(self, name: str, kind: str) -> int:
        """The node id a request names: an input (kind 'input') or output, or else a named Node.

        Naming a Node as an input gives its values at some Indexes (a recurrent
        state carried in from an earlier chunk); as an output, reads them.
        """
        table = self.inputs if kind == "input" else self.outputs
        if name in table:
            return table[name]
        node = self.named.get(name)
        if node is not None and node in self.ids:
            return self.ids[node]
        known = sorted(table) + sorted(n for n in self.named if self.named[n] in self.ids)
        raise PlanError(
            f"the request names {kind} {name!r}, but the network has no such {kind} or node (it has {known})"
        )

    # ----- analysis ------------------------------------------------------------------

    def _indexed(self) -> list[bool]:
        """Whether each node's value has rows (depends on Indexes) or is one array for all rows."""
        indexed = [isinstance(layer, (Descriptor, Identity)) for layer in self.layers]
        order = self.operands_first()
        changed = True
        while changed:  # one pass in operands-first order, another where a recurrence closes
            changed = False
            for nid in order:
                if not indexed[nid] and not isinstance(self.layers[nid], (Weight, Literal)):
                    if any(indexed[c] for c in self.operands[nid]):
                        indexed[nid] = changed = True
        return indexed

    def _check_rows_moved(self) -> None:
        """A descriptor that moves or combines rows must read values that have rows (that depend on inputs)."""
        for nid, layer in enumerate(self.layers):
            if not isinstance(layer, Descriptor) or layer.rowwise or isinstance(layer, IndexedLayer):
                continue
            for op in self.operands[nid]:
                if not self.indexed[op]:
                    raise GraphError(
                        f"{type(layer).__name__} reads {self.describe(op)}, which has no rows: it does not depend "
                        f"on any input, so it is the same at every frame; descriptors move rows of values "
                        f"computed from the inputs (use the value itself, or Const for a constant row)"
                        f"{at(layer.where)}"
                    )

    def _check_cycles(self) -> None:
        """A cycle whose every edge keeps t (no time offset) can never be computed."""
        edges = {nid: [c for c in ops if not shifts_time(self.layers[nid])] for nid, ops in enumerate(self.operands)}
        state = [0] * len(self.layers)  # 0 new, 1 on stack, 2 done
        for start in range(len(self.layers)):
            if state[start]:
                continue
            path: list[int] = []
            stack = [(start, iter(edges[start]))]
            state[start] = 1
            path.append(start)
            while stack:
                nid, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    state[nid] = 2
                elif state[nxt] == 1:
                    cycle = path[path.index(nxt) :]
                    names = [self.describe(c) for c in cycle]
                    raise GraphError("a cycle with no time offset on it: " + " -> ".join(names + names[:1]))
                elif state[nxt] == 0:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(edges[nxt])))

    def operands_first(self) -> list[int]:
        """Every node once, each after its operands wherever the graph is acyclic (a depth-first post-order)."""
        order: list[int] = []
        state = [0] * len(self.layers)
        for root in list(self.outputs.values()) + list(range(len(self.layers))):
            if state[root]:
                continue
            stack = [(root, iter(self.operands[root]))]
            state[root] = 1
            while stack:
                nid, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    order.append(nid)
                    state[nid] = 2
                elif not state[nxt]:
                    state[nxt] = 1
                    stack.append((nxt, iter(self.operands[nxt])))
        return order

    def describe(self, nid: int) -> str:
        """A short name for a node in messages: its Node name, or its expression and line."""
        layer = self.layers[nid]
        if isinstance(layer, Node):
            return f"{layer.name}{at(layer.where)}"
        if isinstance(layer, (Input, Identity)):
            return f"input {getattr(layer, 'name', DEFAULT_INPUT)!r}"
        text = repr(layer)
        text = text if len(text) <= 60 else text[:57] + "..."
        return f"{text}{at(layer.where)}"


def shifts_time(layer: Layer) -> bool:
    """Whether a descriptor reads its operand at another frame (a nonzero t offset, a Round, a t replacement)."""
    return isinstance(layer, Descriptor) and layer.shifts_time()


def strongly_connected(nodes: list[int], operands: list[tuple[int, ...]]) -> list[list[int]]:
    """Tarjan's components of the subgraph on `nodes`, operands' components first."""
    inside = set(nodes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(operands[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            nid, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in inside:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(operands[nxt])))
                elif nxt in on_stack:
                    low[nid] = min(low[nid], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[nid])
            if low[nid] == index[nid]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == nid:
                        break
                out.append(sorted(group))
    return out
