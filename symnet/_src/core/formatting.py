"""Printing a layer tree as the Python expression that builds it (the `repr` of every layer and Network).

A sub-expression that occurs more than once (the same layer, or an equal one)
and is longer than `FOLD_WIDTH` characters is printed once, as an assignment
expression `(name := ...)` where Python evaluates it first, and as `name`
after that; so the repr of an LSTM is as long as its definition (not
exponential in its depth), and evaluating it builds the same shared tree. The
name is the value's (`symnet._src.core.roles`: the Node's, the Weight's,
`lstm1.gates`) made an identifier (`lstm1_gates`), else `_1`, `_2`, ....

Numbers print as written: a float that a float32 holds exactly prints as the
shortest decimal that gives that float32 (`0.66`, not `0.6600000262260437`, for
a value read from a Kaldi model), any other as Python prints it.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from .naming import unique_name
from .roles import value_names
from .walk import walk

if TYPE_CHECKING:
    from .layer import Layer

__all__ = ["FOLD_WIDTH", "Formatter", "number_text"]

#: Repeated sub-expressions longer than this are printed once and named after that.
FOLD_WIDTH = 32

_MARK = re.compile("\x00([0-9]+)\x00")  # where a folded sub-expression goes, until `_expand` writes it
_RESERVED = set(keyword.kwlist) | set(dir(builtins)) | {"x", "array"}


def number_text(value: float) -> str:
    """A float as written: the shortest decimal of its float32 where a float32 holds it exactly, else its repr."""
    value = float(value)
    text = repr(value)
    if not np.isfinite(value) or float(np.float32(value)) != value:
        return text
    short = repr(float(str(np.float32(value))))
    return short if len(short) < len(text) else text


def _value_text(value: Any) -> str:
    """An option's value as Python writes it, with floats as written (`number_text`)."""
    if isinstance(value, (float, np.floating)):
        return number_text(float(value))
    if isinstance(value, tuple):
        items = [_value_text(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(value)


def _identifier(name: str) -> str:
    """`name` as a Python identifier: other characters as `_`; a leading `_` where it could be a class,
    keyword or builtin (`Tanh`, `input`) or starts with a digit."""
    text = re.sub(r"\W", "_", name, flags=re.ASCII)
    if not text or text[0].isdigit() or text[0].isupper() or text in _RESERVED:
        text = "_" + text
    return text


class Formatter:
    """Prints layers as the Python expressions that build them, folding repeated sub-expressions.

    A layer class can override `_format(fmt) -> (text, precedence)`, calling
    `fmt.sub(operand, min_precedence)` for its operands and `fmt.value(v)`
    for settings; the precedences are Python's (`ATOM` binds tightest).
    """

    ATOM, POWER, UNARY, PRODUCT, SUM = 9, 7, 6, 5, 4

    def __init__(self) -> None:
        self._done: dict[int, tuple[str, int]] = {}
        self._same: dict[int, Layer] = {}  # a layer -> the first equal one (what is printed for both)
        self._folded: dict[int, str] = {}  # a folded layer -> its identifier
        self._body: dict[int, str] = {}  # a folded layer -> its text
        self._written: set[int] = set()  # the folded layers `_expand` has written out

    def top(self, layer: Layer) -> str:
        """The text of `layer`."""
        return self.outputs([("", layer)])[0]

    def outputs(self, roots: Sequence[tuple[str, Layer]]) -> list[str]:
        """The texts of a network's outputs `(name, layer)`: a sub-expression shared by two is printed in the
        first and named in the later ones. Every sub-tree is formatted once, operands first (no recursion)."""
        order = walk([layer for _, layer in roots])
        first: dict[Layer, Layer] = {}
        uses: dict[int, int] = {}
        for layer in order:
            self._same[id(layer)] = rep = first.setdefault(layer, layer)
            if rep is layer:
                for child in layer.children:
                    key = id(first[child])
                    uses[key] = uses.get(key, 0) + 1
        for _, root in roots:
            uses[id(first[root])] = uses.get(id(first[root]), 0) + 1
        names = value_names(roots)
        taken = set(_RESERVED)
        unnamed = 0  # folded sub-expressions without a name: `_1`, `_2`, ...
        for layer in order:
            if self._same[id(layer)] is not layer:
                continue
            text, prec = layer._format(self)
            if uses.get(id(layer), 0) > 1 and len(_MARK.sub("name", text)) > FOLD_WIDTH:
                name = names.get(id(layer))
                if not name:
                    unnamed += 1
                ident = unique_name(_identifier(name) if name else f"_{unnamed}", taken)
                taken.add(ident)
                self._folded[id(layer)] = ident
                self._body[id(layer)] = text
                text, prec = f"\x00{id(layer)}\x00", Formatter.ATOM
            self._done[id(layer)] = (text, prec)
        return [self._expand(self._done[id(self._same[id(layer)])][0]) for _, layer in roots]

    def _expand(self, text: str) -> str:
        """`text` with each folded sub-expression written out where it first occurs and named after that."""
        out: list[str] = []
        stack: list[str] = [text]
        while stack:
            part = stack.pop()
            if part.startswith("\x01"):  # the end of an assignment expression
                out.append(part[1:])
                continue
            match = _MARK.search(part)
            if match is None:
                out.append(part)
                continue
            out.append(part[: match.start()])
            stack.append(part[match.end() :])
            key = int(match[1])
            ident = self._folded[key]
            if key in self._written:
                out.append(ident)
                continue
            self._written.add(key)
            out.append(f"({ident} := ")
            stack.append("\x01)")
            stack.append(self._body[key])
        return "".join(out)

    def with_operands(self, layer: Layer, operands: Mapping[int, str]) -> tuple[str, int]:
        """The text and precedence of `layer` alone, with each operand in `operands` (by identity) printed as the
        text given: for tables that refer to operands by name (`Offset(forward0.h, -1)`)."""
        self._done.update({key: (text, Formatter.ATOM) for key, text in operands.items()})
        return layer._format(self)

    def sub(self, layer: Layer, min_prec: int) -> str:
        """The text of an operand, in parentheses if it binds less tightly than `min_prec`."""
        done = self._done.get(id(self._same.get(id(layer), layer)))
        text, prec = done if done is not None else layer._format(self)
        return f"({text})" if prec < min_prec else text

    def value(self, value: Any) -> str:
        """A setting's text: as Python writes it, with floats as written (`number_text`)."""
        return _value_text(value)

    def arg(self, value: Any, field: attrs.Attribute[Any]) -> str | None:
        if hasattr(value, "_format"):  # a layer
            return self.sub(value, 0)
        if isinstance(value, tuple) and field.metadata.get("children"):
            return ", ".join(self.sub(v, 0) for v in value)
        if field.default is not attrs.NOTHING and value == field.default:
            return None
        text = _value_text(value)
        return f"{field.name}={text}" if field.default is not attrs.NOTHING else text
