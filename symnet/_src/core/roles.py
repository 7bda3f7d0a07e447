"""Names of the values inside a network, `node.role`: the rows of `Network.summary()` and the folded parts of a repr.

Every layer that computes a value gets a name from the structure alone:

- a layer a `Node` wraps is named by the Node (`lstm1.c`), an input by its
  name, a layer with a name of its own (a component's) by that name, an
  output's root by the output's name;
- a slice (`DimRange`) is named after what it slices: `lstm1.gates[0:4]`;
- any other layer is named `scope.role`. The scope is the Node (or output)
  that reads it with no other Node between, or, where several do, the longest
  dotted prefix their names share (`lstm1.c` and `lstm1.m`: `lstm1`). The
  role is `gates` for a value read only in column ranges (two or more
  `DimRange` slices: an LSTM's or GRU's gates), else the layer's `role`
  (`Layer.role`: the kind, `linear` for a matrix product, `affine` for a sum
  with a bias Weight, `sigmoid`, ...); `_2`, `_3` follow for later ones of
  one scope, operands first (the layer nearer the input gets the plain name).

A layer gets no name where its expression says more (a descriptor such as
`Offset(h, -1)`: `Layer.role` is None), or where the Nodes that read it share
no prefix (the `Append` of a BLSTM's two directions, read by the next layer's
two): the summary shows those as expressions over the names of their operands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .naming import unique_name
from .walk import walk

if TYPE_CHECKING:
    from .layer import Layer

__all__ = ["common_scope", "value_names"]


def common_scope(names: Iterable[str]) -> str:
    """The longest dotted prefix of all `names` (a single name is its own scope); '' where they share none."""
    parts = [name.split(".") for name in names]
    if not parts:
        return ""
    if len(parts) == 1:
        return ".".join(parts[0])
    common: list[str] = []
    for column in zip(*parts, strict=False):
        if any(p != column[0] for p in column):
            break
        common.append(column[0])
    return ".".join(common)


def value_names(roots: Sequence[tuple[str, Layer]]) -> dict[int, str]:
    """The name (see the module doc) of every layer under `roots` that has one, by identity.

    `roots` are `(output name, layer)`; an empty output name names nothing
    (the repr of a layer outside a Network).
    """
    order = walk([layer for _, layer in roots])
    enclosing: dict[int, dict[str, None]] = {}  # the Nodes (and outputs) reading a layer with no Node between
    users: dict[int, list[Layer]] = {}
    names: dict[int, str] = {}
    for prefix, root in roots:
        if prefix:
            enclosing.setdefault(id(root), {})[prefix] = None
            names.setdefault(id(root), prefix)
    for layer in reversed(order):  # users before operands
        scope = layer.scope
        inner = {scope: None} if scope is not None else enclosing.get(id(layer), {})
        for child in layer.children:
            enclosing.setdefault(id(child), {}).update(inner)
            users.setdefault(id(child), []).append(layer)
            if scope is not None:
                names.setdefault(id(child), scope)
    taken = {n for layer in order if (n := _own(layer)) is not None} | set(names.values())
    for layer in order:  # operands first
        own = _own(layer)
        if own is not None:
            names[id(layer)] = own
        if id(layer) in names:
            continue
        role = layer.role
        if role is None:
            continue
        if role.startswith("["):  # a slice, named after what it slices
            operand = names.get(id(layer.children[0]))
            if operand is None:
                continue
            base = operand + role
        else:
            scope = common_scope(enclosing.get(id(layer), {}))
            if not scope:
                continue
            readers = users.get(id(layer), [])
            sliced = len(readers) >= 2 and all((r.role or "").startswith("[") for r in readers)
            base = f"{scope}.{'gates' if sliced else role}"
        names[id(layer)] = unique_name(base, taken)
        taken.add(names[id(layer)])
    return names


def _own(layer: Layer) -> str | None:
    """The name a layer carries: a Node's, an input's, a component's or a named Weight's."""
    if layer.scope is not None:
        return layer.scope
    for name in (layer.input_name, layer.own_name, getattr(layer, "name", None)):
        if isinstance(name, str) and name:
            return name
    return None
