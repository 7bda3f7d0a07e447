"""The implementation behind `symnet.kaldi.xconfig.layers` (private: import its names from there)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

from ....base.errors import SymnetError
from ....core.descriptor import Append, Input, Node, Offset, Ref
from ....core.layer import Layer
from ....core.source import user_line
from ....core.walk import rewrite, walk
from .backend import write_descriptor
from .base import LAYER_TYPES, XInput, XLayer
from .basic import XOutput
from .expand import Xconfig
from .syntax import XconfigLine, parse_xconfig_line

__all__ = ["apply_layer", "function_name", "node_dims", "splice"]


def splice(x: Layer, *offsets: int) -> Layer:
    """`Append(Offset(x, o) for o in offsets)` with no Offset for 0: the xconfig `Append(-1,0,1)` of `x`."""
    return Append(*(x if o == 0 else Offset(x, o) for o in offsets))


def function_name(layer_type: str) -> str:
    """The Python name of an xconfig layer type: `tdnnf-layer` -> `tdnnf`, `output-layer` -> `output_layer`."""
    if layer_type == "output-layer":
        return "output_layer"
    return layer_type.removesuffix("-layer").replace("-", "_")


def _leaves(x: Layer) -> dict[str, Input | Node]:
    """The Inputs and Nodes a descriptor refers to, by name."""
    found: dict[str, Input | Node] = {}
    stack = [x]
    while stack:
        item = stack.pop()
        if isinstance(item, (Input, Node)):
            if found.setdefault(item.name, item) is not item and found[item.name] != item:
                raise SymnetError(f"the input refers to two different nodes named {item.name!r}")
        elif isinstance(item, Ref):
            raise SymnetError(f"the input of a layer function cannot be a Ref ({item.name!r}); pass the node")
        else:
            stack.extend(item.children)
    return found


def _dim(leaf: Input | Node) -> int:
    if isinstance(leaf, Input):
        return leaf.dim
    arg = leaf.arg
    dim = getattr(arg, "output_dim", None)  # a component's, or a DimRange's
    if not isinstance(dim, int):
        raise SymnetError(f"node {leaf.name!r} is not a component or dim-range node, so its dim is not known")
    return dim


def node_dims(network: Any) -> dict[str, int]:
    """The dim of every input and component or dim-range node of a Network."""
    dims: dict[str, int] = {}
    for layer in walk([layer for _, layer in network.structure.outputs]):
        if isinstance(layer, (Input, Node)):
            try:
                dims.setdefault(layer.name, _dim(layer))
            except SymnetError:
                pass
    return dims


def _text(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f'"{text}"' if "=" in text or not text or any(c.isspace() for c in text) else text


def _where() -> tuple[str, int]:
    where = user_line() or "<python>:0"
    match = re.match(r"(.*), line (\d+)\Z", where) or re.match(r"(.*):(\d+)\Z", where)
    return (match.group(1), int(match.group(2))) if match else (where, 0)


def _line(text: str, file: str, line: int) -> XconfigLine:
    parsed = parse_xconfig_line(text, file=file, line=line)
    assert parsed is not None  # only a blank or comment line parses to None; these start with a layer type
    return parsed


def apply_layer(layer_type: str, x: Layer, *, name: str, **options: Any) -> Layer:
    """The output of xconfig layer `layer_type` named `name` on input `x`, with xconfig `options`."""
    cls = LAYER_TYPES.get(layer_type)
    if cls is None or layer_type == "input":
        raise SymnetError(f"unknown xconfig layer type {layer_type!r}")
    leaves = _leaves(x)
    file, line = _where()
    words = [layer_type, f"name={name}", f"input={write_descriptor(x)}"]
    words += [f"{key.replace('_', '-')}={_text(value)}" for key, value in options.items()]
    previous: list[XLayer] = []
    for leaf_name, leaf in leaves.items():
        source = _line(f"input name={leaf_name} dim={_dim(leaf)}", file, line)
        previous.append(XInput(source, previous))
    layer = cls(_line(" ".join(words), file, line), previous)
    layers = [*previous, layer]
    output = name
    if layer.referable:
        output = "_layer_output"
        out_line = _line(f"output name={output} input={name}", file, line)
        layers.append(XOutput(out_line, layers))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not used by any")
        network = Xconfig(tuple(layers), file).network()
    built = network.outputs[output]
    return rewrite([built], lambda layer: leaves.get(layer.name, layer) if isinstance(layer, Input) else layer)[0]


def _function(layer_type: str) -> Callable[..., Layer]:
    cls = LAYER_TYPES[layer_type]
    py_name = function_name(layer_type)

    def function(x: Layer, *, name: str, **options: Any) -> Layer:
        return apply_layer(layer_type, x, name=name, **options)

    defaults = {k: v for k, v in cls.defaults().items() if k != "input"}
    listed = ", ".join(f"{k.replace('-', '_')}={v!r}" for k, v in defaults.items())
    function.__name__ = function.__qualname__ = py_name
    function.__doc__ = (
        f"The xconfig `{layer_type}` on input `x`, named `name`: its output node.\n\n"
        f"{(cls.__doc__ or '').strip()}\n\nOptions (xconfig's, dashes as underscores) and "
        f"their defaults: {listed}."
    )
    return function


for _type in sorted(LAYER_TYPES):
    if _type not in ("input", "output"):
        globals()[function_name(_type)] = _function(_type)
        __all__.append(function_name(_type))
