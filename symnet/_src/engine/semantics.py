"""What the engine asks of a layer about its rows, with row-wise layers' answers for non-descriptors.

A descriptor answers for itself (`symnet._src.core.descriptor`); a row-wise layer
(Plus, Dot, a nonlinearity, Node) reads every operand at its own Index, needs
them all, and computes its row with `apply`. These helpers give one answer for
both, so the planner and the lowerings never ask what kind of descriptor a layer is.
"""

from __future__ import annotations

import numpy as np

from ..base.errors import PlanError, at
from ..core.descriptor import Combine, Descriptor, IndexedLayer, Rule
from ..core.layer import Layer

__all__ = ["combine", "operand_keys", "optional_reads", "rule", "selected"]


def rule(layer: Layer) -> Rule:
    """A layer's computability rule: a descriptor's own; a row-wise layer needs all its operands."""
    return layer.rule if isinstance(layer, Descriptor) else Rule.ALL


def operand_keys(layer: Layer, keys: np.ndarray) -> np.ndarray:
    """The Index every row of `keys` reads in `layer`'s operands (the descriptor's map; row-wise: the same)."""
    if not isinstance(layer, Descriptor):
        return keys
    try:
        return layer.map_keys(keys)
    except PlanError as e:  # an offset or index that leaves the Index range: name the layer
        raise PlanError(f"{layer!r:.120}{at(layer.where)}: {e}") from None


def selected(layer: Layer, keys: np.ndarray, count: int) -> list[np.ndarray]:
    """Per operand, which rows of `keys` read it at all (a Switch's part; every row for other layers)."""
    masks = layer.selects(keys, count) if isinstance(layer, Descriptor) else None
    if masks is None:
        return [np.ones(len(keys), dtype=bool)] * count
    return [np.asarray(m, dtype=bool) for m in masks]


def combine(layer: Layer) -> Combine | None:
    """How a descriptor that moves rows makes its row from the rows it reads; None for a layer that computes
    its row (a row-wise layer, Scale and DimRange included, with `apply`; an IndexedLayer with `apply_rows`)."""
    if not isinstance(layer, Descriptor) or layer.rowwise or isinstance(layer, IndexedLayer):
        return None
    return layer.combine


def optional_reads(layer: Layer) -> bool:
    """Whether which operand rows a layer reads depends on which are computable (IfDefined, Failover):
    with sequence ends, those reads are masked per sequence."""
    return rule(layer) is not Rule.ALL and bool(layer.children)
