"""Kaldi's rule on the scales in a descriptor, which its compiler enforces (nnet-descriptor.cc GetScaleForNode).

Kaldi compiles each part of a node's descriptor (one argument of its top-level
`Append`, or the whole descriptor) into commands that read each source node
with one scale: the product of the `Scale(s, ...)` factors around it. A part
that reads one node with two different scales (`Switch(x, Scale(10, Offset(x,
1)))`) is accepted by nnet3-init and nnet3-info but refused by every
computation ("Invalid Descriptor encountered: for node-index 0, got two
different scales 10 vs. 1"). symnet's engine could compute such a descriptor;
`check_descriptor_scales` refuses it where Kaldi does, so that symnet's
nnet3-compute and exact evaluation agree with Kaldi's on which networks run.
"""

from __future__ import annotations

from typing import Any

from ...base.errors import SymnetError, at
from ...components.base import Component
from ...core.descriptor import Combine, Descriptor, Node, node_name
from ...core.layer import Identity, Layer
from ...core.walk import walk

__all__ = ["check_descriptor_scales"]


def check_descriptor_scales(network: Any) -> None:
    """SymnetError naming the node, the source node, the two scales and the line, for a descriptor part that
    reads a node with two different scales (see the module doc)."""
    roots = [layer for _, layer in network.structure.outputs]
    for name, layer in network.structure.outputs:
        _check(layer, f"output-node {name}")
    for layer in walk(roots):
        if isinstance(layer, Node) and isinstance(layer.arg, Component) and hasattr(layer.arg, "input"):
            _check(layer.arg.input, f"component-node {layer.name}")


def _source(layer: Layer) -> str | None:
    if (name := node_name(layer)) is not None:
        return name
    if isinstance(layer, Identity):
        return "input"
    return None


def _check(descriptor: Layer, owner: str) -> None:
    appended = isinstance(descriptor, Descriptor) and descriptor.combine is Combine.APPEND
    parts = descriptor.children if appended else (descriptor,)
    for part in parts:
        scales: dict[str, float] = {}
        stack: list[tuple[Layer, float]] = [(part, 1.0)]
        while stack:
            layer, scale = stack.pop()
            source = _source(layer)
            if source is not None:
                seen = scales.setdefault(source, scale)
                if seen != scale:
                    raise SymnetError(
                        f"{owner}: invalid descriptor for Kaldi: it reads node {source!r} with two different scales, "
                        f"{seen:g} and {scale:g}, in one part of its input{at(part.where)} (Kaldi's compiler refuses "
                        "this: 'got two different scales'); scale the node the same way everywhere in the part"
                    )
                continue
            factor = layer.scale_factor() if isinstance(layer, Descriptor) else None
            if factor is not None:
                stack.append((layer.children[0], scale * factor))
            else:
                stack.extend((child, scale) for child in reversed(layer.children))
