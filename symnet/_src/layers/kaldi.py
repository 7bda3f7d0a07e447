"""A network in Kaldi's terms: every computation a component, every component the operand of a node.

`symnet.kaldi` writes configs and models of the trees `kaldi_forms` gives. A
Kaldi config computes only in component-nodes, so the trees a user writes
(`Node("tdnn1", BatchNorm(ReLU(TimeConv(x, 256, offsets=(-1, 0, 1)))))`,
`LogSoftmax(Node("out", Affine(h, 100)))`) are rewritten with the same math:

- a typed layer becomes its `kaldi_form`, the plain component (`TimeConv` a
  TdnnComponent), named by the layer, else by the Node whose operand it is;
  `Reshape` and `Flatten` become their input (Kaldi's rows are flat already);
- `ReLU`, `Sigmoid`, `Tanh`, `Softmax` and `LogSoftmax` become Kaldi's
  RectifiedLinear, Sigmoid, Tanh, Softmax and LogSoftmax components, named
  `<node>.relu`, ... after the Node they are inside (else the node they read),
  as Kaldi's xconfig names them;
- a component that is not a Node's operand gets a node of its own name;
- a Node whose operand is then a descriptor of nodes (a strided `TimeConv` is
  `Round(conv, stride)`) is left out, its readers reading the descriptor, as
  Kaldi has no node that is only a descriptor (unless a `Ref` names it).

ConfigWriteError for a typed layer Kaldi has no component for, or a
nonlinearity whose input dim is not known before running.
"""

from __future__ import annotations

import attrs

from ..base.errors import ConfigWriteError, at
from ..components.base import Component
from ..components.nonlinear import (
    LogSoftmaxComponent,
    RectifiedLinearComponent,
    SigmoidComponent,
    SoftmaxComponent,
    TanhComponent,
)
from ..components.structure import CompositeComponent
from ..core.descriptor import Descriptor, Input, Node, Ref
from ..core.elementwise import LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from ..core.layer import Layer
from ..core.walk import walk
from .base import Typed, static_input_dim
from .image import Flatten, Reshape

__all__ = ["KaldiForms", "kaldi_forms"]

#: The nonlinearities Kaldi has as components: (component class, the name Kaldi's xconfig gives it).
NONLINEAR: dict[type, tuple[type, str]] = {
    ReLU: (RectifiedLinearComponent, "relu"),
    Sigmoid: (SigmoidComponent, "sigmoid"),
    Tanh: (TanhComponent, "tanh"),
    Softmax: (SoftmaxComponent, "softmax"),
    LogSoftmax: (LogSoftmaxComponent, "log-softmax"),
}


@attrs.frozen
class KaldiForms:
    """The rewritten trees (`roots`) and the names of the components made from typed layers and nonlinearities
    (`made`: they keep Kaldi's default training options, so a config states only their shapes)."""

    roots: list[Layer]
    made: frozenset[str]


def kaldi_forms(roots: list[Layer]) -> KaldiForms:
    """The trees under `roots` in Kaldi's terms (see the module doc)."""
    enclosing = _enclosing_nodes(roots)
    taken = {layer.name for layer in walk(roots) if isinstance(layer, (Node, Component, Input))}
    made: set[str] = set()
    done: dict[int, Layer] = {}

    def fresh(name: str) -> str:
        out, k = name, 2
        while out in taken:
            out, k = f"{name}.{k}", k + 1
        taken.add(out)
        return out

    def lower(original: Layer, layer: Layer) -> Layer:
        if isinstance(layer, (Reshape, Flatten)):
            return layer.input
        if isinstance(layer, Typed):
            name = layer.own_name or enclosing.get(id(original)) or fresh(type(layer).__name__.lower())
            made.add(name)
            form = layer.kaldi_form(name)  # a component, or a descriptor of one (a strided TimeConv's Round)
            return form if isinstance(form, Component) else form.with_children(tuple(map(noded, form.children)))
        kind = NONLINEAR.get(type(layer))
        if kind is not None:
            cls, stem = kind
            (operand,) = layer.children
            dim = static_input_dim(operand)
            if dim is None:
                raise ConfigWriteError(
                    f"{type(layer).__name__}{at(layer.where)}: the dim of its input is not known before running, "
                    "so it cannot be written as a Kaldi component; read the input as Input(name, dim)"
                )
            base = enclosing.get(id(original)) or getattr(operand, "name", None)
            name = fresh(f"{base}.{stem}" if base else stem)
            made.add(name)
            return cls(input=operand, dim=dim, name=name)
        return layer

    def noded(child: Layer) -> Layer:
        return Node(child.name, child) if isinstance(child, Component) else child

    referenced = {layer.name for layer in walk(roots) if isinstance(layer, Ref)}
    for original in walk(roots):
        children = tuple(done[id(c)] for c in original.children)
        if not isinstance(original, (Node, CompositeComponent)):  # a component's reader needs it as a node
            children = tuple(noded(c) for c in children)
        if (
            isinstance(original, Node)
            and isinstance(children[0], Descriptor)
            and not isinstance(children[0], (Input, Ref))
            and children[0].column_range() is None  # a DimRange of a node stays a dim-range-node
            and original.name not in referenced
        ):
            done[id(original)] = children[0]
            continue
        done[id(original)] = lower(original, original.with_children(children))
    return KaldiForms([noded(done[id(r)]) for r in roots], frozenset(made))


def _enclosing_nodes(roots: list[Layer]) -> dict[int, str]:
    """For every layer inside a Node's operand, the name of the nearest Node above it (first path found)."""
    out: dict[int, str] = {}
    stack: list[tuple[Layer, str | None]] = [(r, None) for r in reversed(roots)]
    seen: set[int] = set()
    while stack:
        layer, name = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if name is not None:
            out[id(layer)] = name
        below = layer.name if isinstance(layer, Node) else name
        stack += [(c, below) for c in reversed(layer.children)]
    return out
