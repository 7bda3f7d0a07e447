"""Kaldi nnet3 descriptors as text: tokenizer, parser, Kaldi's normalisation and writer.

`parse_descriptor("Append(Offset(input, -1), input)")` gives the layer
`Append(Offset(Ref('input'), -1), Ref('input'))`; `write_descriptor` prints a
layer back exactly as Kaldi prints it. Both go through Kaldi's normal form, so
that a descriptor means what it means inside Kaldi and round-trips.

What Kaldi does on reading (src/nnet3/nnet-descriptor.cc), done here alike:

- `DescriptorTokenize` (nnet-parse.cc): tokens are `(`, `)`, `,` and words
  separated by spaces, tabs and those three; every word must be a valid name or
  a real number.
- `GeneralDescriptor::Parse`: the grammar. Keywords are always keywords (a node
  named `Sum` cannot be referred to); `Offset`'s x-offset is optional; `Sum`,
  `Append` and `Switch` take one or more arguments.
- `GeneralDescriptor::NormalizeAppend`: every `Append` moves to the top and
  nested ones flatten: `Offset(Append(a, b), 1)` -> `Append(Offset(a, 1),
  Offset(b, 1))`, `Sum(Append(a, b), Append(c, d))` -> `Append(Sum(a, c),
  Sum(b, d))`; arguments with different numbers of terms are an error.
- `GeneralDescriptor::Normalize`, one rewrite per pass, leftmost-outermost,
  until nothing changes: nested Offsets add up; `Offset(x, 0)` -> `x`;
  Offset/Round/ReplaceIndex/(one-argument) Switch move inside
  Sum/Failover/IfDefined (`Offset(Sum(a, b), 1)` -> `Sum(Offset(a, 1), Offset(b,
  1))`); `Sum(a)` -> `a`; `Sum(a, b, c)` -> `Sum(a, Sum(b, c))` (Kaldi's Sum is
  binary, so symnet keeps that nesting rather than an n-ary Sum); Scale moves
  inside Offset/Round/ReplaceIndex and distributes over Sum, nested Scales
  multiply (in float32, Kaldi's BaseFloat); Scale of anything else
  (IfDefined, Failover, Switch, Const) is an error.
- `ConvertToSumDescriptor` / `ConvertToForwardingDescriptor`: Const only at the
  Sum level, Scale only around a node name, nothing Sum-like inside a Switch.
- `GetScaleForNode` (checked by Kaldi when it compiles, here on reading): in
  one Append part a node must have one scale; a Failover's two sides must add
  the same constant; no nonzero Const inside IfDefined.

`Scale(1.0, x)` is written, and therefore read back, as `x`, as Kaldi does.
Scales and constants are rounded to float32, Kaldi's BaseFloat, and printed
as C++ streams print them (`%g`); where six digits would not give the same
float32 back, more digits are printed (Kaldi would lose the value there).
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...base.errors import ConfigError, DescriptorError, at
from ...core.descriptor import (
    Append,
    Const,
    Descriptor,
    Failover,
    IfDefined,
    Offset,
    Ref,
    ReplaceIndex,
    Round,
    Scale,
    Sum,
    Switch,
    node_name,
)
from ...core.layer import Layer

__all__ = [
    "C_SPACE",
    "KEYWORDS",
    "Token",
    "format_real",
    "is_valid_name",
    "normalize_descriptor",
    "parse_descriptor",
    "parse_int",
    "parse_real",
    "to_float32",
    "tokenize",
    "write_descriptor",
]

# ----- Kaldi's scalar syntax (util/text-utils.cc) ---------------------------------------

#: The characters C's isspace takes as blanks.
C_SPACE = " \t\n\v\f\r"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)[ \t\n\v\f\r]*\Z")
_REAL = re.compile(r"[ \t\n\v\f\r]*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[ \t\n\v\f\r]*\Z")
_INF_NAN = {
    "INF": math.inf, "+INF": math.inf, "-INF": -math.inf,
    "INFINITY": math.inf, "+INFINITY": math.inf, "-INFINITY": -math.inf,
    "NAN": math.nan, "+NAN": math.nan, "-NAN": math.nan,
    "1.#INF": math.inf, "-1.#INF": -math.inf, "1.#QNAN": math.nan, "-1.#QNAN": math.nan,
}  # fmt: skip
_INT32 = (-(2**31), 2**31 - 1)

KEYWORDS = ("Append", "Sum", "Failover", "IfDefined", "Offset", "Switch", "Scale", "Const", "Round", "ReplaceIndex")


def is_valid_name(text: str) -> bool:
    """Kaldi's IsValidName: a letter or `_`, then letters, digits, `_`, `-`, `.` (ASCII only)."""
    return bool(_NAME.match(text))


def parse_int(text: str) -> int | None:
    """Kaldi's ConvertStringToInteger for int32 (surrounding whitespace allowed), or None."""
    m = _INT.match(text)
    if not m:
        return None
    value = int(m.group(1))
    return value if _INT32[0] <= value <= _INT32[1] else None


def to_float32(value: float) -> float:
    """`value` rounded to float32 (Kaldi's BaseFloat), as a Python float."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.float32(value))


def parse_real(text: str) -> float | None:
    """Kaldi's ConvertStringToReal for BaseFloat, or None.

    A decimal number (surrounding whitespace allowed) or inf/nan spelled as
    Kaldi accepts them; finite values that overflow float32 are rejected. The
    value is returned unrounded; use `to_float32` for Kaldi's stored value.
    """
    m = _REAL.match(text)
    if m:
        value = float(m.group(1))
        return value if math.isfinite(to_float32(value)) else None
    word = text.strip(C_SPACE).upper()
    return _INF_NAN.get(word) if word and not any(c in C_SPACE for c in word) else None


def format_real(value: float) -> str:
    """A float32 value as C++'s `os << value` prints it (`%g`), with more digits only if needed to round-trip."""
    for precision in (6, 7, 8, 9):
        text = f"{value:.{precision}g}"
        if not math.isfinite(value) or to_float32(float(text)) == value:
            return text
    return repr(value)


# ----- tokens --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Token:
    """A descriptor token and its 1-based column in the config line; `text == ''` is the end of input."""

    text: str
    column: int


class _Fail(Exception):
    """An error at a column (None when the descriptor was built in Python)."""

    def __init__(self, message: str, column: int | None, where: str | None = None):
        super().__init__(message)
        self.message, self.column, self.where = message, column, where


def tokenize(text: str, column: int = 1) -> list[Token]:
    """Kaldi's DescriptorTokenize; `column` is the column of `text[0]`. Ends with an end-of-input token."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
        elif c in "(),":
            tokens.append(Token(c, column + i))
            i += 1
        else:
            j = i
            while j < n and text[j] not in " \t(),":
                j += 1
            word = text[i:j]
            if not is_valid_name(word) and parse_real(word) is None:
                raise _Fail(f"cannot tokenize descriptor: {word!r} is neither a name nor a number", column + i)
            tokens.append(Token(word, column + i))
            i = j
    tokens.append(Token("", column + n))
    return tokens


# ----- Kaldi's GeneralDescriptor, as an immutable tree ---------------------------------------


@dataclasses.dataclass(frozen=True)
class _D:
    """One node of a descriptor while it is parsed and normalised (Kaldi's GeneralDescriptor).

    `op` is a keyword or 'node'. `a`, `b`: Offset's t and x, Round's modulus,
    ReplaceIndex's value, Const's dim. `alpha`: Scale's scale or Const's value
    (float32). `name`: a node's name, or ReplaceIndex's variable.
    """

    op: str
    parts: tuple[_D, ...] = ()
    a: int = 0
    b: int = 0
    alpha: float = 0.0
    name: str = ""
    column: int | None = dataclasses.field(default=None, compare=False)
    where: str | None = dataclasses.field(default=None, compare=False)
    leaf: Layer | None = dataclasses.field(default=None, compare=False)  # the original Input/Node/Ref

    def with_parts(self, parts: Sequence[_D]) -> _D:
        return dataclasses.replace(self, parts=tuple(parts))


_MAX_NESTING = 64  # parentheses; keeps recursion far from Python's limit
_MAX_DEPTH = 128  # tree depth once Sums are binary
_MAX_STEPS = 100_000


class _Parser:
    """Recursive descent over the tokens, as GeneralDescriptor::Parse reads them."""

    def __init__(self, tokens: list[Token], where: Callable[[int], str | None]):
        self.tokens, self.i, self.where = tokens, 0, where

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, message: str, tok: Token | None = None) -> _Fail:
        tok = tok or self.tok
        got = f"{tok.text!r}" if tok.text else "end of input"
        return _Fail(f"{message}, got {got}", tok.column)

    def expect(self, text: str, what: str) -> None:
        if self.tok.text != text:
            raise self.fail(f"expected '{text}' in {what}")
        self.i += 1

    def integer(self, what: str) -> int:
        value = parse_int(self.tok.text)
        if value is None:
            raise self.fail(f"expected an integer in {what}")
        self.i += 1
        return value

    def real(self, what: str) -> float:
        value = parse_real(self.tok.text)
        if value is None:
            raise self.fail(f"expected a number in {what}")
        value = to_float32(value)
        if not math.isfinite(value):
            raise self.fail(f"{what} needs a finite number")
        self.i += 1
        return value

    def descriptor(self, depth: int = 0) -> _D:
        tok = self.tok
        if depth > _MAX_NESTING:
            raise _Fail(f"descriptor nested more than {_MAX_NESTING} levels deep", tok.column)
        if tok.text not in KEYWORDS:
            if not is_valid_name(tok.text):
                raise self.fail("expected a descriptor (a node name or Append, Sum, Offset, ...)")
            self.i += 1
            return _D("node", name=tok.text, column=tok.column, where=self.where(tok.column))
        op, what = tok.text, f"{tok.text}(...)"
        self.i += 1
        if self.tok.text != "(":
            raise self.fail(f"expected '(' after {op}")
        self.i += 1
        node = _D(op, column=tok.column, where=self.where(tok.column))
        if op in ("Append", "Sum", "Switch"):
            parts = [self.descriptor(depth + 1)]
            while self.tok.text == ",":
                self.i += 1
                parts.append(self.descriptor(depth + 1))
            if self.tok.text != ")":
                raise self.fail(f"expected ',' or ')' in {what}")
            self.i += 1
            return node.with_parts(parts)
        if op == "Scale":
            alpha = self.real("Scale(...)")
            self.expect(",", what)
            node = dataclasses.replace(node, alpha=alpha, parts=(self.descriptor(depth + 1),))
        elif op == "Const":
            alpha = self.real("Const(...)")
            self.expect(",", what)
            dim_tok = self.tok
            dim = self.integer("Const(...)")
            if dim <= 0:
                raise self.fail("Const(...) needs a positive dimension", dim_tok)
            node = dataclasses.replace(node, alpha=alpha, a=dim)
        else:
            node = node.with_parts([self.descriptor(depth + 1)])
            if op == "Failover":
                self.expect(",", what)
                node = node.with_parts(node.parts + (self.descriptor(depth + 1),))
            elif op == "Offset":
                self.expect(",", what)
                t = self.integer(what)
                x = 0
                if self.tok.text == ",":
                    self.i += 1
                    x = self.integer(what)
                node = dataclasses.replace(node, a=t, b=x)
            elif op == "Round":
                self.expect(",", what)
                mod_tok = self.tok
                modulus = self.integer(what)
                if modulus <= 0:
                    raise self.fail("Round(...) needs a positive t-modulus", mod_tok)
                node = dataclasses.replace(node, a=modulus)
            elif op == "ReplaceIndex":
                self.expect(",", what)
                if self.tok.text not in ("t", "x"):
                    raise self.fail("expected 't' or 'x' in ReplaceIndex(...)")
                variable = self.tok.text
                self.i += 1
                self.expect(",", what)
                node = dataclasses.replace(node, name=variable, a=self.integer(what))
        self.expect(")", what)
        return node


def _depth(d: _D) -> int:
    extra = len(d.parts) - 2 if d.op == "Sum" and len(d.parts) > 2 else 0
    return 1 + extra + max((_depth(p) for p in d.parts), default=0)


# ----- normalisation (GeneralDescriptor::NormalizeAppend / Normalize) ------------------------


def _append_terms(d: _D) -> list[_D]:
    """The Append terms of `d` with every Append moved to the top (NormalizeAppend, all terms at once)."""
    if d.op in ("node", "Const"):
        return [d]
    if d.op == "Append":
        return [t for p in d.parts for t in _append_terms(p)]
    per_part = [_append_terms(p) for p in d.parts]
    counts = [len(t) for t in per_part]
    if any(c != counts[0] for c in counts):
        raise _Fail(
            f"the arguments of {d.op}() have different numbers of Append() terms ({', '.join(map(str, counts))})",
            d.column,
            d.where,
        )
    return [d.with_parts([terms[i] for terms in per_part]) for i in range(counts[0])]


_FORWARDING = ("Offset", "Switch", "Round", "ReplaceIndex")
_SUM_LIKE = ("Sum", "Failover", "IfDefined")


def _rewrite(d: _D) -> _D | None:
    """One of Normalize's local rewrites at the root of `d`, or None if none applies."""
    changed = False
    if d.op == "Offset":
        child = d.parts[0]
        if child.op == "Offset":  # Offset(Offset(x, t1, x1), t2, x2) -> Offset(x, t1 + t2, x1 + x2)
            d = dataclasses.replace(d, parts=child.parts, a=d.a + child.a, b=d.b + child.b)
            changed = True
        elif d.a == 0 and d.b == 0:  # Offset(x, 0) -> x
            return child
    if d.op in _FORWARDING:
        child = d.parts[0]
        if child.op in _SUM_LIKE:  # Offset(Sum(a, b), 1) -> Sum(Offset(a, 1), Offset(b, 1))
            if len(d.parts) > 1:
                raise _Fail(
                    "Kaldi cannot normalize Sum(), Failover() or IfDefined() inside Switch()", child.column, child.where
                )
            return child.with_parts([d.with_parts([g]) for g in child.parts])
        return d if changed else None
    if d.op == "Sum":
        if len(d.parts) == 1:  # Sum(x) -> x
            return d.parts[0]
        if len(d.parts) > 2:  # Sum(a, b, c) -> Sum(a, Sum(b, c))
            return d.with_parts([d.parts[0], d.with_parts(d.parts[1:])])
        return None
    if d.op == "Scale":
        child = d.parts[0]
        if child.op in ("Offset", "ReplaceIndex", "Round"):  # Scale(s, Offset(x, 1)) -> Offset(Scale(s, x), 1)
            return child.with_parts([d.with_parts(child.parts)])
        if child.op == "Sum":  # Scale(s, Sum(a, b)) -> Sum(Scale(s, a), Scale(s, b))
            return child.with_parts([d.with_parts([g]) for g in child.parts])
        if child.op == "Scale":  # Scale(s, Scale(r, x)) -> Scale(s * r, x), in float32
            return dataclasses.replace(d, alpha=to_float32(d.alpha * child.alpha), parts=child.parts)
        if child.op != "node":
            raise _Fail(
                f"Kaldi cannot normalize Scale() of {child.op}(); push the Scale() inside it", d.column, d.where
            )
    return None


def _step(d: _D) -> _D | None:
    """One pass of Normalize: the first rewrite in pre-order, or None at the fixed point."""
    new = _rewrite(d)
    if new is not None:
        return new
    for i, part in enumerate(d.parts):
        new = _step(part)
        if new is not None:
            return d.with_parts(d.parts[:i] + (new,) + d.parts[i + 1 :])
    return None


def _normalize_term(d: _D) -> _D:
    for _ in range(_MAX_STEPS):
        new = _step(d)
        if new is None:
            return d
        d = new
    raise _Fail("descriptor too complex to normalize", d.column, d.where)


# ----- what Kaldi's Descriptor classes can hold ----------------------------------------------


def _check_sum(d: _D) -> None:
    """ConvertToSumDescriptor: Sum/Failover/IfDefined/Const, or a forwarding descriptor."""
    if d.op in _SUM_LIKE:
        for p in d.parts:
            _check_sum(p)
    elif d.op != "Const":
        _check_forwarding(d, None)


def _check_forwarding(d: _D, parent: _D | None) -> None:
    """ConvertToForwardingDescriptor: node, Scale(s, node), Offset, Switch, Round, ReplaceIndex."""
    inside = f" inside {parent.op}()" if parent else ""
    if d.op == "node":
        return
    if d.op in _FORWARDING:
        for p in d.parts:
            _check_forwarding(p, d)
    elif d.op == "Scale":
        if d.parts[0].op != "node":
            raise _Fail("invalid combination of Scale() with other expressions", d.column, d.where)
    elif d.op == "Const":
        raise _Fail(f"Const() cannot appear{inside}; only in Sum(), Append() or alone", d.column, d.where)
    else:
        raise _Fail(f"{d.op}(){inside} is not allowed", d.column, d.where)


def _const_term(d: _D) -> float:
    """The constant a Sum-level descriptor adds (Kaldi's GetScaleForNode(-1)), checked as Kaldi checks it."""
    if d.op == "Const":
        return d.alpha
    if d.op == "IfDefined":
        if _const_term(d.parts[0]) != 0.0:
            raise _Fail("Kaldi does not allow a nonzero Const() inside IfDefined()", d.column, d.where)
        return 0.0
    if d.op in ("Sum", "Failover"):
        s1, s2 = _const_term(d.parts[0]), _const_term(d.parts[1])
        if d.op == "Sum":
            return s1 + s2
        if s1 != s2:
            raise _Fail("Kaldi does not allow Failover() whose sides add different Const() values", d.column, d.where)
        return s1
    return 0.0


def _normal_form(d: _D) -> list[_D]:
    """Kaldi's normal form as its list of Append parts, checked as Kaldi checks it."""
    if _depth(d) > _MAX_DEPTH:
        raise _Fail(f"descriptor nested more than {_MAX_DEPTH} levels deep", d.column, d.where)
    parts = [_normalize_term(t) for t in _append_terms(d)]
    for part in parts:
        _check_sum(part)
        _const_term(part)
    # A node read with two scales in one part is accepted here, as by nnet3-init and nnet3-info; Kaldi's
    # compiler refuses it (symnet._src.kaldi.text.scales.check_descriptor_scales, run by nnet3-compute's counterpart).
    return parts


# ----- layers <-> trees ---------------------------------------------------------------------


def _to_layer(d: _D) -> Layer:
    w = {"where": d.where}
    if d.op == "node":
        return d.leaf if d.leaf is not None else Ref(d.name, **w)
    if d.op == "Scale" and d.alpha == 1.0:  # Kaldi writes Scale(1.0, x) as x
        return _to_layer(d.parts[0])
    if d.op == "Const":
        return Const(d.alpha, d.a, **w)
    parts = [_to_layer(p) for p in d.parts]
    if d.op == "Append":
        return Append(*parts, **w)
    if d.op == "Sum":
        return Sum(*parts, **w)
    if d.op == "Switch":
        return Switch(*parts, **w)
    if d.op == "Offset":
        return Offset(parts[0], d.a, d.b, **w)
    if d.op == "Round":
        return Round(parts[0], d.a, **w)
    if d.op == "ReplaceIndex":
        return ReplaceIndex(parts[0], d.name, d.a, **w)
    if d.op == "Scale":
        return Scale(d.alpha, parts[0], **w)
    if d.op == "Failover":
        return Failover(parts[0], parts[1], **w)
    return IfDefined(parts[0], **w)


def _from_layer(layer: Layer, depth: int = 0) -> _D:
    """The tree of a descriptor built in Python; DescriptorError for what Kaldi's grammar cannot say."""
    where = layer.where
    if depth > _MAX_NESTING:
        raise _Fail(f"descriptor nested more than {_MAX_NESTING} levels deep", None, where)

    def sub(child: Layer) -> _D:
        return _from_layer(child, depth + 1)

    if (node := node_name(layer)) is not None:
        if not is_valid_name(node) or node in KEYWORDS:
            raise _Fail(f"node name {node!r} cannot be written in a Kaldi descriptor", None, where)
        return _D("node", name=node, where=where, leaf=layer)
    name = layer.kaldi_name if isinstance(layer, Descriptor) else None
    if name is not None:  # the descriptor's own Kaldi form: operands, then ints (a, b), a float, a name
        assert isinstance(layer, Descriptor)
        parts: list[_D] = []
        ints: list[int] = []
        fields: dict[str, Any] = {}
        for arg in layer.kaldi_args():
            if isinstance(arg, Layer):
                parts.append(sub(arg))
            elif isinstance(arg, str):
                fields["name"] = arg
            elif isinstance(arg, float):
                value = to_float32(arg)
                if not math.isfinite(value):
                    raise _Fail(f"{type(layer).__name__} needs a finite float32 value, got {value}", None, where)
                fields["alpha"] = value
            else:
                ints.append(int(arg))
        fields.update(zip("ab", ints))
        return _D(name, tuple(parts), where=where, **fields)
    raise _Fail(f"{type(layer).__name__} is not part of Kaldi's descriptor grammar", None, where)


def _text(d: _D) -> str:
    if d.op == "node":
        return d.name
    if d.op == "Scale" and d.alpha == 1.0:
        return _text(d.parts[0])
    if d.op == "Const":
        return f"Const({format_real(d.alpha)}, {d.a})"
    args = [_text(p) for p in d.parts]
    if d.op == "Scale":
        args = [format_real(d.alpha)] + args
    elif d.op == "Offset":
        args += [str(d.a)] + ([str(d.b)] if d.b else [])
    elif d.op == "Round":
        args.append(str(d.a))
    elif d.op == "ReplaceIndex":
        args += [d.name, str(d.a)]
    return f"{d.op}({', '.join(args)})"


def _join(parts: list[_D]) -> _D:
    return parts[0] if len(parts) == 1 else _D("Append", tuple(parts), column=parts[0].column, where=parts[0].where)


# ----- public API ---------------------------------------------------------------------------


def parse_descriptor(
    text: str, *, file: str = "<config>", line: int = 0, column: int = 1, line_text: str | None = None
) -> Layer:
    """Parse Kaldi descriptor text into a layer in Kaldi's normal form; node names become `Ref`.

    `column` is the column of `text[0]` in `line_text` (the whole config line,
    default `text`); errors are ConfigError pointing at the offending token,
    and each layer's `where` is `file:line:column` of its token.
    """

    def fail(e: _Fail) -> ConfigError:
        return ConfigError(
            e.message, file=file, line=line, column=e.column or column, text=text if line_text is None else line_text
        )

    try:
        tokens = tokenize(text, column)
        parser = _Parser(tokens, lambda col: f"{file}:{line}:{col}")
        tree = parser.descriptor()
        if parser.tok.text:
            raise parser.fail("expected the end of the descriptor")
        return _to_layer(_join(_normal_form(tree)))
    except _Fail as e:
        raise fail(e) from None


def normalize_descriptor(layer: Layer) -> Layer:
    """A descriptor built in Python, in Kaldi's normal form (what Kaldi would read back from its text).

    Raises DescriptorError for what Kaldi's grammar cannot express or rejects.
    """
    try:
        return _to_layer(_join(_normal_form(_from_layer(layer))))
    except _Fail as e:
        raise DescriptorError(f"{e.message}{at(e.where)}") from None


def write_descriptor(layer: Layer) -> str:
    """Kaldi's text of a descriptor, normalised first, exactly as Kaldi's WriteConfig prints it.

    `Ref`, `Input` and `Node` leaves are written as their names. Raises
    DescriptorError for what Kaldi's grammar cannot express or rejects.
    """
    try:
        return _text(_join(_normal_form(_from_layer(layer))))
    except _Fail as e:
        raise DescriptorError(f"{e.message}{at(e.where)}") from None
