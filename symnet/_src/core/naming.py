"""Default names from the structure alone: of unnamed Weights, and of unnamed layers that have names of their own.

A Network names what the user left unnamed where a depth-first walk in field
order first meets it, never by a counter of construction order:

- A layer with a name of its own (a typed layer such as `BatchNorm`, whose
  class has a `name_stem`) built without one is named after the Node whose
  operand it is (`Node("tdnn1", BatchNorm(h))`: `tdnn1`), else after the
  nearest enclosing named Node and its stem (`tdnn1.batchnorm`), or the stem
  alone outside any Node (`batchnorm`); `_2`, `_3` follow for later ones
  (in operands-first order: the layer nearer the input gets the plain name).
- An unnamed Weight in one of a named layer's `param_fields` is named after
  that layer and the field (`tdnn1.batchnorm.stats_mean`, as Kaldi names a
  component's parameters); any other unnamed Weight after the nearest
  enclosing named Node and its role for the layer using it (`weight` of a
  matrix product, `bias` of a sum: `h.weight`).

`canonicalize` (`symnet._src.core.layer`) makes those names unique among the
Weights and writes them into the tree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .walk import walk

if TYPE_CHECKING:
    from .layer import Layer

__all__ = ["default_names", "unique_name"]


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ... : the first that is not in `taken`."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def default_names(roots: Iterable[tuple[str, Layer]]) -> tuple[dict[int, str], dict[int, str]]:
    """`(bases, names)` for the trees under `roots` (`(prefix, layer)`: the prefix scopes an output's names).

    `bases` maps every layer (by identity) to the name an unnamed Weight there
    would get before it is made unique: `scope.role`. `names` maps every
    layer with a `name_stem` but no name to its default name, made unique in
    operands-first order (so the layer nearer the input gets the plain stem,
    as unnamed Weights do).
    """
    roots = list(roots)
    order = walk([layer for _, layer in roots])
    taken = {own for layer in order if (own := layer.own_name) is not None}
    # Where the depth-first walk first meets each layer: (scope, role), the scope being a name or the id of the
    # layer whose parameter it is; and the base name of each layer that names itself.
    where: dict[int, tuple[str | int, str]] = {}
    stems: dict[int, str] = {}
    stack: list[tuple[str | int, str, str | None, Layer]] = [(p, "weight", None, x) for p, x in reversed(roots)]
    while stack:
        scope, role, node, layer = stack.pop()
        if id(layer) in where:
            continue
        where[id(layer)] = (scope, role)
        if layer.own_name is None and layer.name_stem is not None:
            prefix = scope if isinstance(scope, str) else ""  # (a layer given as another's parameter: no scope)
            stems[id(layer)] = (
                node if node is not None else f"{prefix}.{layer.name_stem}" if prefix else layer.name_stem
            )
        named = layer.own_name is not None or id(layer) in stems
        inner = layer.scope or scope
        for field, c in reversed(list(layer.named_children())):
            if id(c) in where:
                continue
            if named and field in layer.param_fields:
                stack.append((id(layer), field, None, c))
            else:
                stack.append((inner, layer.weight_role, layer.scope, c))
    names: dict[int, str] = {}
    for layer in order:
        if id(layer) in stems:
            names[id(layer)] = unique_name(stems[id(layer)], taken)
            taken.add(names[id(layer)])
    owners = {id(layer): layer.own_name for layer in order if layer.own_name is not None}
    owners.update(names)
    bases: dict[int, str] = {}
    for layer in order:
        scope, role = where[id(layer)]
        name = owners[scope] if isinstance(scope, int) else scope
        bases[id(layer)] = f"{name}.{role}" if name else role
    return bases, names
