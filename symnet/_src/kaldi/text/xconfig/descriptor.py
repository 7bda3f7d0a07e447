"""Xconfig descriptors: Kaldi's descriptor grammar with the xconfig shorthands.

On top of nnet3's `Offset`, `Append`, `Sum`, `Switch`, `Failover`, `IfDefined`,
`Round`, `ReplaceIndex`, `Scale(value, descriptor)` and `Const(value, dim)`
(steps/libs/nnet3/xconfig/utils.py, Descriptor):

- a bare integer `n` is the previous layer at time offset `n`:
  `Append(-1,0,1)` after layer `tdnn1` is `Append(Offset(tdnn1, -1), tdnn1, Offset(tdnn1, 1))`;
- `name@n` is `Offset(name, n)` (`@0` and a bare `0` add no Offset);
- `[-k]` is the name of the k-th previous layer (`[-1]` the previous one), and
  may be followed by `.aux` for an auxiliary output (`[-1].c`).

A name refers to a layer (`tdnn1`), or to one of its auxiliary outputs
(`lstm1.c`). `XDescriptor.config_text(resolve)` writes the descriptor as it
appears in the generated config, each layer name replaced by that layer's
output node (or output descriptor), which `resolve` gives; `dim(dim_of)`
works out its dimension.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs

from ....base.errors import ConfigError
from ....base.text import clip

__all__ = ["DimMismatch", "XDescriptor", "parse_xdescriptor"]

_VALID_NAME = re.compile(r"[a-zA-Z_][-a-zA-Z_0-9.]*")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_OPERATORS = ("Offset", "Round", "ReplaceIndex", "Append", "Sum", "Switch", "Failover", "IfDefined")
_SAME_DIM = ("Sum", "Failover", "IfDefined", "Switch")
#: Operators whose first argument is a number (Kaldi's xconfig reads it with Python's float()).
_VALUED = ("Scale", "Const")


class DimMismatch(Exception):
    """Parts of a Sum, Failover, IfDefined or Switch with different dims."""


class DescriptorSyntaxError(Exception):
    """A descriptor that does not parse: the message and the 0-based position in the text."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.message = message
        self.position = position


@attrs.frozen
class XDescriptor:
    """A parsed xconfig descriptor: a layer name (`operator` None, `items == (name,)`), or an operator
    whose items are descriptors, integers and (ReplaceIndex) the variable name."""

    operator: str | None
    items: tuple[XDescriptor | int | float | str, ...]

    def __str__(self) -> str:
        """Kaldi's normalized text, with layer names (as `xconfig.expanded.2` shows it)."""
        return self.config_text(lambda name: name)

    def config_text(self, resolve: Callable[[str], str]) -> str:
        """The text in the generated config, each layer name replaced by `resolve(name)`."""
        if self.operator is None:
            return resolve(str(self.items[0]))
        parts = [item.config_text(resolve) if isinstance(item, XDescriptor) else str(item) for item in self.items]
        return f"{self.operator}({', '.join(parts)})"

    def names(self) -> list[str]:
        """The layer names referred to, in order."""
        if self.operator is None:
            return [str(self.items[0])]
        return [name for item in self.items if isinstance(item, XDescriptor) for name in item.names()]

    def dim(self, dim_of: Callable[[str], int]) -> int:
        """The dimension, given the dimension of each layer name; DimMismatch names mismatched parts."""
        if self.operator is None:
            return dim_of(str(self.items[0]))
        if self.operator == "Const":
            dim = self.items[1]
            assert isinstance(dim, int)  # the parser reads Const()'s second argument as an integer
            return dim
        parts = [item for item in self.items if isinstance(item, XDescriptor)]
        if self.operator == "Append":
            return sum(part.dim(dim_of) for part in parts)
        if self.operator in _SAME_DIM:
            dims = [part.dim(dim_of) for part in parts]
            if len(set(dims)) > 1:
                raise DimMismatch(f"the parts of {clip(str(self))} have different dims: {', '.join(map(str, dims))}")
            return dims[0]
        return parts[0].dim(dim_of)


def _name(name: str) -> XDescriptor:
    return XDescriptor(None, (name,))


def _offset(d: XDescriptor, t: int) -> XDescriptor:
    return d if t == 0 else XDescriptor("Offset", (d, t))


def _tokens(text: str, previous: Sequence[str]) -> list[tuple[str, int]]:
    """Tokens with their positions; `[-k]` becomes the k-th previous layer's name, joined to what follows."""
    out: list[tuple[str, int]] = []
    word, start, pos = "", -1, 0
    while pos < len(text):
        c = text[pos]
        if c == "[":
            close = text.find("]", pos)
            inner = text[pos + 1 : close] if close > 0 else ""
            if close < 0 or not _INT.match(inner.strip()) or not (0 < -int(inner) <= len(previous)):
                raise DescriptorSyntaxError(
                    f"[{inner}] must be [-k] with 1 <= k <= {len(previous)} (the number of layers before this one)"
                    if close > 0
                    else "'[' without a closing ']'",
                    pos,
                )
            if start < 0:
                start = pos
            word += previous[int(inner)]
            pos = close + 1
            continue
        if c == "]":
            raise DescriptorSyntaxError("']' without an opening '['", pos)
        if c in "(),@" or c.isspace():
            if word:
                out.append((word, start))
                word, start = "", -1
            if not c.isspace():
                out.append((c, pos))
            pos += 1
            continue
        if start < 0:
            start = pos
        word += c
        pos += 1
    if word:
        out.append((word, start))
    out.append(("", len(text)))
    return out


#: The deepest nesting of descriptor operators read (Kaldi's own configs nest a few levels).
MAX_NESTING = 64


class _Parser:
    def __init__(self, tokens: list[tuple[str, int]], previous: Sequence[str]):
        self.tokens = tokens
        self.i = 0
        self.previous = previous

    def peek(self) -> tuple[str, int]:
        return self.tokens[self.i]

    def take(self) -> tuple[str, int]:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expect(self, text: str, what: str) -> None:
        token, pos = self.take()
        if token != text:
            raise DescriptorSyntaxError(f"parsing {what}, expected '{text}' but got '{token or 'the end'}'", pos)

    def integer(self, what: str) -> int:
        token, pos = self.take()
        if not _INT.match(token):
            raise DescriptorSyntaxError(f"parsing {what}, expected an integer but got '{token or 'the end'}'", pos)
        return int(token)

    def number(self, what: str) -> float:
        token, pos = self.take()
        try:
            return float(token)
        except ValueError:
            raise DescriptorSyntaxError(
                f"parsing {what}, expected a number but got '{token or 'the end'}'", pos
            ) from None

    def descriptor(self, depth: int = 0) -> XDescriptor:
        token, pos = self.take()
        if token in _VALUED:
            if depth >= MAX_NESTING:
                raise DescriptorSyntaxError(f"descriptor nested more than {MAX_NESTING} levels deep", pos)
            self.expect("(", token + "()")
            value = self.number(token + "()")
            self.expect(",", token + "()")
            second: XDescriptor | int
            if token == "Scale":
                second = self.descriptor(depth + 1)
            else:
                second = self.integer("Const()")
                if second <= 0:
                    raise DescriptorSyntaxError(
                        f"Const() needs a positive dim, got {second}", self.tokens[self.i - 1][1]
                    )
            self.expect(")", token + "()")
            return XDescriptor(token, (value, second))
        if token in _OPERATORS:
            if depth >= MAX_NESTING:  # keeps the recursion far from Python's limit
                raise DescriptorSyntaxError(f"descriptor nested more than {MAX_NESTING} levels deep", pos)
            self.expect("(", token + "()")
            first = self.descriptor(depth + 1)
            items: list[XDescriptor | int | str] = [first]
            if token == "Offset":
                self.expect(",", "Offset()")
                items.append(self.integer("Offset()"))
                if self.peek()[0] == ",":
                    self.take()
                    items.append(self.integer("Offset()"))
                self.expect(")", "Offset()")
            elif token == "Round":
                self.expect(",", "Round()")
                modulus_pos = self.peek()[1]
                modulus = self.integer("Round()")
                if modulus <= 0:
                    raise DescriptorSyntaxError(f"Round() needs a positive modulus, got {modulus}", modulus_pos)
                items.append(modulus)
                self.expect(")", "Round()")
            elif token == "ReplaceIndex":
                self.expect(",", "ReplaceIndex()")
                variable, variable_pos = self.take()
                if variable not in ("x", "t"):
                    raise DescriptorSyntaxError(
                        f"parsing ReplaceIndex(), expected 'x' or 't', got '{variable or 'the end'}'", variable_pos
                    )
                items.append(variable)
                self.expect(",", "ReplaceIndex()")
                items.append(self.integer("ReplaceIndex()"))
                self.expect(")", "ReplaceIndex()")
            else:
                while True:
                    sep, sep_pos = self.take()
                    if sep == ")":
                        break
                    if sep != ",":
                        raise DescriptorSyntaxError(
                            f"parsing {token}(), expected ')' or ',', got '{sep or 'the end'}'", sep_pos
                        )
                    items.append(self.descriptor(depth + 1))
                count = len(items)
                if (token == "Failover" and count != 2) or (token == "IfDefined" and count != 1):
                    want = 2 if token == "Failover" else 1
                    raise DescriptorSyntaxError(f"{token}() takes {want} argument{'s' * (want > 1)}, got {count}", pos)
            return XDescriptor(token, tuple(items))
        if token in ("", "(", ")", ",", "@"):
            raise DescriptorSyntaxError(f"expected a descriptor, got '{token or 'the end'}'", pos)
        if _INT.match(token):
            if not self.previous:
                raise DescriptorSyntaxError(f"cannot interpret '{token}': there is no previous layer", pos)
            return _offset(_name(self.previous[-1]), int(token))
        if not _VALID_NAME.match(token):
            raise DescriptorSyntaxError(f"expected a descriptor, got '{token}'", pos)
        d = _name(token)
        if self.peek()[0] == "@":
            self.take()
            d = _offset(d, self.integer(f"{token}@"))
        return d


def parse_xdescriptor(text: str, previous: Sequence[str], *, fail: Callable[[str, int], ConfigError]) -> XDescriptor:
    """Parse xconfig descriptor `text`; `previous` are the names of the layers before this one.

    Errors go through `fail(message, position)` (position 0-based in `text`).
    """
    try:
        parser = _Parser(_tokens(text, previous), previous)
        d = parser.descriptor()
        token, pos = parser.peek()
        if token:
            raise DescriptorSyntaxError(f"unexpected '{token}' after the descriptor", pos)
        return d
    except DescriptorSyntaxError as e:
        raise fail(e.message, e.position) from None
