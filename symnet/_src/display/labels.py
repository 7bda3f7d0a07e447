"""Short text for what the views show: layer labels, colour classes, shapes and row Indexes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..components.base import Component
from ..core.arithmetic import BinaryLayer, Power
from ..core.descriptor import Combine, Descriptor, IndexedLayer, Input, Node
from ..core.formatting import number_text
from ..core.index import format_indexes
from ..core.layer import Identity, Literal, Weight

__all__ = ["COLOURS", "index_text", "kind", "label", "shape_text"]

#: (fill, stroke) per colour class of `kind`.
COLOURS = {
    "input": ("#d9f2d9", "#2e7d32"),
    "node": ("#efe3f7", "#6a1b9a"),
    "weight": ("#fff0d6", "#b26a00"),
    "constant": ("#f2f2f2", "#666666"),
    "component": ("#e3eefc", "#1a56a8"),
    "descriptor": ("#dff4f7", "#00838f"),
    "op": ("#ffffff", "#555555"),
}


def shape_text(shape: Iterable[int]) -> str:
    """A shape as Python prints a tuple: `(3,)`, `(12, 8)`."""
    shape = tuple(int(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def label(layer: Any) -> str:
    """A short one-line name for a layer: its kind and what distinguishes it (name, offset, shape)."""
    kind_name = type(layer).__name__
    if isinstance(layer, Identity):
        return "x (input)"
    if isinstance(layer, Descriptor) and not isinstance(layer, IndexedLayer):  # components are named below
        return layer.label()
    if isinstance(layer, Node):
        return f"{kind_name} {layer.name!r}"
    if isinstance(layer, Weight):
        named = f" {layer.name!r}" if layer.name else ""
        return f"{kind_name}{named} {shape_text(layer.shape)}"
    if isinstance(layer, Literal):
        value = layer.value
        return (
            f"Literal {number_text(value)}" if isinstance(value, float) else f"Literal array{shape_text(value.shape)}"
        )
    if isinstance(layer, Power):
        return f"Power {number_text(layer.exponent)}"
    if isinstance(layer, BinaryLayer):
        return f"{kind_name} {layer.symbol}"
    name = getattr(layer, "name", None)
    if isinstance(name, str):  # components
        return f"{kind_name} {name!r}"
    members = getattr(layer, "members", None)
    if isinstance(members, tuple):  # a scanned recurrence on a Tape
        names = [getattr(m, "name", None) or type(m).__name__ for m in members]
        return f"{kind_name} [{', '.join(map(str, names))}]"
    return kind_name


def kind(layer: Any) -> str:
    """A coarse class for colouring (a key of `COLOURS`): input, node, descriptor, weight, constant, component, op."""
    if isinstance(layer, (Input, Identity)):
        return "input"
    if isinstance(layer, Node):
        return "node"
    if isinstance(layer, Weight):
        return "weight"
    if isinstance(layer, Literal) or (isinstance(layer, Descriptor) and layer.combine is Combine.CONST):
        return "constant"
    if isinstance(layer, Component):
        return "component"
    if isinstance(layer, Descriptor) and not layer.rowwise:
        return "descriptor"
    return "op"


def index_text(rows: Any, limit: int = 4) -> str:
    """Kaldi-style ranges of a value's row Indexes (an IndexSet or the engine's Rows); '' for none."""
    if rows is None:
        return ""
    try:
        keys = rows.index_set().keys if hasattr(rows, "index_set") else rows.keys
        return format_indexes(keys, limit=limit)
    except Exception as e:  # display must not fail
        return f"? ({type(e).__name__})"
