"""Printing a layer tree as the Python expression that builds it (the `repr` of every layer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .walk import walk

if TYPE_CHECKING:
    from .layer import Layer


class Formatter:
    """Prints a layer as the Python expression that builds it, within a length budget.

    A layer class can override `_format(fmt) -> (text, precedence)`, calling
    `fmt.sub(operand, min_precedence)` for its operands; the precedences are
    Python's (`ATOM` binds tightest). The budget keeps repr finite on DAGs whose
    tree expansion is exponential.
    """

    ATOM, POWER, UNARY, PRODUCT, SUM = 9, 7, 6, 5, 4

    def __init__(self, budget: int = 4000):
        self.budget = budget
        self._done: dict[int, tuple[str, int]] = {}

    def top(self, layer: Layer) -> str:
        """The text of `layer`: every sub-tree is formatted once, operands first (no recursion)."""
        for node in walk([layer]):
            text, prec = node._format(self)
            self._done[id(node)] = (text if len(text) <= self.budget else text[: self.budget] + "…", prec)
        return self._done[id(layer)][0]

    def with_operands(self, layer: Layer, operands: Mapping[int, str]) -> str:
        """The text of `layer` alone, with each operand in `operands` (by identity) printed as the text given.

        For tables that refer to operands by name or row number (`#3 @ h.weight`).
        """
        self._done.update({key: (text, Formatter.ATOM) for key, text in operands.items()})
        return layer._format(self)[0]

    def sub(self, layer: Layer, min_prec: int) -> str:
        """The text of an operand, in parentheses if it binds less tightly than `min_prec`."""
        done = self._done.get(id(layer))
        text, prec = done if done is not None else layer._format(self)
        return f"({text})" if prec < min_prec else text

    def arg(self, value: Any, field: attrs.Attribute[Any]) -> str | None:
        if hasattr(value, "_format"):  # a layer
            return self.sub(value, 0)
        if isinstance(value, tuple) and field.metadata.get("children"):
            return ", ".join(self.sub(v, 0) for v in value)
        if field.default is not attrs.NOTHING and value == field.default:
            return None
        return f"{field.name}={value!r}" if field.default is not attrs.NOTHING else repr(value)
