"""What `symnet info` prints for a network: nnet3-info's lines (dims, context, modulus, nodes, components).

The node lines are the network's config lines as Kaldi writes them, with the
dims nnet3-info adds; the context is Kaldi's probe (`Network.context`). All of
it comes from the network's structure and objectives (parameter counts from
the Weights' shapes), so a config is described without drawing its parameters
(`symnet._src.kaldi.text.build.read_structure`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...base.errors import SymnetError
from ...components.base import Component
from ...core.structure import Structure
from ...core.walk import walk
from ...engine.context import modulus as graph_modulus
from ...engine.context import structure_context
from ...engine.graph import Graph
from .config import ComponentLine, ComponentNode, DimRangeNode, InputNode, OutputNode
from .descriptor_text import write_descriptor
from .network import descriptor_dim, structure_config_lines

__all__ = ["info_lines"]


def _components(structure: Structure) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for layer in walk([layer for _, layer in structure.outputs]):
        if isinstance(layer, Component):
            found.setdefault(layer.name, layer)
    return found


def info_lines(structure: Structure, objectives: Mapping[str, str]) -> list[str]:
    """The lines `symnet info` prints for a network's structure and objectives (on the output-node lines)."""
    lines = structure_config_lines(structure, objectives, exact=False)
    components = _components(structure)
    dims: dict[str, int] = {}
    for line in lines:
        if isinstance(line, InputNode):
            dims[line.name] = line.dim
        elif isinstance(line, ComponentNode):
            dims[line.name] = components[line.component].output_dim
        elif isinstance(line, DimRangeNode):
            dims[line.name] = line.dim
    out_dims = {
        line.name: descriptor_dim(line.descriptor, dims, line) for line in lines if isinstance(line, OutputNode)
    }
    output_names = [name for name, _ in structure.outputs]
    default = "output" if "output" in output_names else output_names[0]
    out: list[str] = [
        f"input-dim: {dims.get('input', -1) if isinstance(_line(lines, 'input'), InputNode) else -1}",
        f"ivector-dim: {dims.get('ivector', -1) if isinstance(_line(lines, 'ivector'), InputNode) else -1}",
        f"output-dim: {out_dims[default]}",
    ]
    try:
        left, right = structure_context(structure, default)
        out += [f"left-context: {left}", f"right-context: {right}"]
    except SymnetError as e:
        reason = str(e).splitlines()[0]
        out += [f"left-context: unknown ({reason})", "right-context: unknown"]
    weights = dict(zip(structure.names, structure.weights, strict=True))
    trainable = sum(math.prod(w.shape) for w in weights.values() if w.trainable)
    fixed = sum(math.prod(w.shape) for w in weights.values() if not w.trainable)
    out.append(f"num-parameters: {trainable}")
    if fixed:
        out.append(f"num-fixed-parameters: {fixed}")
    out.append(f"modulus: {graph_modulus(Graph(dict(structure.outputs)))}")
    for line in lines:
        if isinstance(line, ComponentLine):
            continue
        text = line.to_text()
        if isinstance(line, ComponentNode):
            component = components[line.component]
            text += f" input-dim={component.input_dim} output-dim={component.output_dim}"
        elif isinstance(line, OutputNode):
            text = (
                f"output-node name={line.name} input={write_descriptor(line.descriptor)} "
                f"dim={out_dims[line.name]} objective={line.objective}"
            )
        out.append(text)
    for line in lines:
        if not isinstance(line, ComponentLine):
            continue
        component = components[line.name]
        shapes = []
        counts = {True: 0, False: 0}  # trainable or fixed -> values
        for field in component.param_fields:
            name = getattr(getattr(component, field), "name", None)
            weight = weights.get(name) if isinstance(name, str) else None
            if weight is not None:
                shape = weight.shape
                counts[weight.trainable] += math.prod(shape)
                shapes.append(f"{field}=[{','.join(map(str, shape))}]")
        words = [
            f"component name={line.name} type={line.type}",
            f"input-dim={component.input_dim}",
            f"output-dim={component.output_dim}",
        ]
        if shapes:
            words.append(f"num-parameters={counts[True]}")
            if counts[False]:
                words.append(f"num-fixed-parameters={counts[False]}")
        words += shapes
        out.append(" ".join(words))
    return out


def _line(lines: Sequence[Any], name: str) -> Any:
    return next((line for line in lines if line.name == name and line.kind != "component"), None)
