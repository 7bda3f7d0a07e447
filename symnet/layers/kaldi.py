"""Typed layers in Kaldi's terms: what `symnet.kaldi` writes in place of each (see `Typed.kaldi_form`)."""

from __future__ import annotations

from ..core.descriptor import Node
from ..core.layer import Layer
from ..core.walk import rewrite
from .base import Typed
from .image import Flatten, Reshape

__all__ = ["kaldi_forms"]


def kaldi_forms(roots: list[Layer]) -> list[Layer]:
    """The trees with every typed layer in Kaldi's terms, for writing configs and models.

    A typed layer that is a `Node`'s operand becomes its `kaldi_form` (the
    plain component, named by the layer or else by the Node); `Reshape` and
    `Flatten` anywhere become their input (Kaldi's rows are flat already).
    ConfigWriteError for a typed layer Kaldi has no component for.
    """

    def lower(layer: Layer) -> Layer:
        if isinstance(layer, (Reshape, Flatten)):
            return layer.input
        if isinstance(layer, Node) and isinstance(layer.arg, Typed):
            return layer.with_children((layer.arg.kaldi_form(layer.name),))
        return layer

    return rewrite(roots, lower)
