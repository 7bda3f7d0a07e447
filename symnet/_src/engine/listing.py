"""A network as a few readable lines: one per named node, operands by name, repeated blocks elided.

`repr(network)` prints this (as Equinox prints a model): each Node is a line
`name = expression`, its operands shown by their names (`input`, another
Node's name, `Offset(lstm1.m, -1)` for a descriptor between Nodes), followed
by the dtypes and shapes of the arrays named after it (`f32[128,72]`); an output that is not a Node gets
a line of its own. A run of blocks (the Nodes sharing a first name component,
`tdnnf3.*`) that repeat the one before it line for line, up to the block
names, is one line (`tdnnf3 … tdnnf12: 10 blocks as tdnnf2`). `repr(layer)` and
`repr(network.structure)` still print the whole expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.descriptor import Input, Node, Ref
from ..core.formatting import Formatter
from ..core.layer import Identity, Layer, Weight
from ..core.walk import walk
from .graph import DEFAULT_INPUT

__all__ = ["array_text", "listing"]


def listing(outputs: Mapping[str, Layer], arrays: Mapping[str, Any]) -> list[str]:
    """The lines of a network (see the module doc); `arrays` are its parameters and state by name."""
    order = walk(list(outputs.values()))
    texts: dict[int, str] = {}

    def text(layer: Layer) -> str:
        """How an operand shows: a Node's, input's or Weight's name, else its expression over such names."""
        known = texts.get(id(layer))
        if known is not None:
            return known
        if isinstance(layer, Node):
            shown = layer.name
        elif isinstance(layer, (Identity, Input)):
            shown = layer.input_name or DEFAULT_INPUT
        elif isinstance(layer, (Ref, Weight)) and layer.name:
            shown = layer.name
        else:
            shown = expression(layer)
        texts[id(layer)] = shown
        return shown

    def expression(layer: Layer) -> str:
        shown, prec = Formatter().with_operands(layer, {id(c): text(c) for c in layer.children})
        return shown if prec == Formatter.ATOM else f"({shown})"

    lines: list[tuple[str, str]] = []  # (name, line)
    for layer in order:
        if isinstance(layer, Node):
            lines.append((layer.name, f"{layer.name} = {_own(layer, text)}{_shapes(layer.name, arrays)}"))
    for name, layer in outputs.items():
        if not isinstance(layer, Node):
            lines.append((name, f"{name} = {_unwrapped(expression(layer))}"))
        elif layer.name != name:
            lines.append((name, f"{name} = {layer.name}"))
    return _elided(lines)


def _own(node: Node, text: Any) -> str:
    """A Node's expression without what its line says already: its name, and its own Weights (`name.field`),
    whose shapes follow as a comment."""
    layer, prefix = node.arg, node.name + "."
    own = {id(c) for c in layer.children if isinstance(c, Weight) and (c.name or "").startswith(prefix)}
    operands = {id(c): _HIDDEN if id(c) in own else text(c) for c in layer.children}
    shown, _ = Formatter().with_operands(layer, operands)
    shown = re.sub(rf"(, {_HIDDEN}|{_HIDDEN}, |{_HIDDEN})", "", shown)
    return shown.replace(f", name={node.name!r}", "").replace(f"({node.name!r}, ", "(")


_HIDDEN = "\x00"


def _unwrapped(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _shapes(name: str, arrays: Mapping[str, Any]) -> str:
    """`  # bias_params f32[128], linear_params f32[128,72]`: the arrays named `name.field`, if any."""
    own = [(key[len(name) + 1 :], value) for key, value in arrays.items() if key.startswith(name + ".")]
    shown = [f"{field} {array_text(value)}" for field, value in own if "." not in field]
    return "  # " + ", ".join(shown) if shown else ""


def array_text(value: Any) -> str:
    """An array's dtype and shape as Equinox prints them: `f32[128,72]`, `f32[]` for a scalar."""
    dtype = np.dtype(getattr(value, "dtype", np.asarray(value).dtype))
    kind = {"f": "f", "i": "i", "u": "u", "b": "bool", "c": "c"}.get(dtype.kind, dtype.name)
    short = "bf16" if dtype.name == "bfloat16" else (f"{kind}{dtype.itemsize * 8}" if kind in "fiuc" else kind)
    return f"{short}[{','.join(map(str, np.shape(value)))}]"


def _elided(lines: list[tuple[str, str]]) -> list[str]:
    """`lines` with each run of blocks that repeat the block before them folded into one line."""
    blocks: list[tuple[str, list[str]]] = []
    for name, line in lines:
        head = name.split(".", 1)[0]
        if blocks and blocks[-1][0] == head:
            blocks[-1][1].append(line)
        else:
            blocks.append((head, [line]))
    heads = [head for head, _ in blocks]
    out: list[str] = []
    k = 0
    while k < len(blocks):
        head, block = blocks[k]
        out += block
        shape = _signature(block, head, heads)
        end = k + 1
        while (
            end < len(blocks) and len(blocks[end][1]) > 1 and _signature(blocks[end][1], blocks[end][0], heads) == shape
        ):
            end += 1
        if end - k > 2:  # two or more repeats: one line
            out.append(f"{blocks[k + 1][0]} … {blocks[end - 1][0]}: {end - k - 1} blocks as {head}")
            k = end
        else:
            k += 1
    return out


def _signature(block: list[str], head: str, heads: list[str]) -> tuple[str, ...]:
    """A block's lines with its own name and the other blocks' names replaced: equal for repeated blocks."""
    others = sorted((h for h in set(heads) if h != head), key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, [head, *others])) + r")\b")
    return tuple(pattern.sub(lambda m: "@" if m.group(1) == head else "#", line) for line in block)
