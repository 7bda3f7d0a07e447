"""Kaldi nnet3 config files as immutable line objects: reading, writing, merging, checking.

A config file is a list of lines, one of

    input-node name=input dim=40
    component name=affine1 type=NaturalGradientAffineComponent input-dim=120 output-dim=512
    component-node name=affine1 component=affine1 input=Append(Offset(input, -1), input, Offset(input, 1))
    output-node name=output input=affine1 objective=linear
    dim-range-node name=lstm1.c input-node=lstm1.c_t dim-offset=0 dim=512

`parse_config(text)` gives one frozen object per line (`InputNode`,
`ComponentLine`, `ComponentNode`, `OutputNode`, `DimRangeNode`); descriptors
are parsed into layers in Kaldi's normal form (see `descriptor_text`).
`write_config(lines)` prints them as Kaldi's GetConfigLines does, so
`parse_config(write_config(lines)) == lines`.

Line syntax follows Kaldi (util/text-utils.cc ReadConfigLines and
ConfigLine::ParseLine, nnet3/nnet-nnet.cc ReadConfig): `#` starts a comment
anywhere; options are `key=value` in any order; an unquoted value runs up to
the last blank before the next `=`, so descriptors may contain spaces;
`key='a b'` and `key="a b"` quote. Node lines take exactly Kaldi's options
(anything else is an error, as Kaldi's "Unused values"); an output-node
without `objective=` gets `objective=linear`. Component lines keep their
options as strings for the component's builder to read (with
`symnet._src.kaldi.components.ComponentOptionReader`), whose `finish()` reports
the unread ones as Kaldi's "Could not process these elements in
initializer" does.

A key given twice keeps its first value, as in Kaldi (whose xconfig writes
`max-change` twice for an output-layer with a bottleneck), with a warning naming
the value ignored. Deliberate differences from Kaldi: a trailing carriage return is ignored (Kaldi fails on
blank CRLF lines); `Round(x, m)` with m < 1, non-finite Scale/Const values and
inconsistent scales are rejected on reading (Kaldi fails later, when it
compiles).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TextIO

import attrs

from ...base.errors import ConfigError
from ...core.layer import Layer
from .descriptor_text import (
    C_SPACE,
    is_valid_name,
    normalize_descriptor,
    parse_descriptor,
    parse_int,
    parse_real,
    tokenize,
    write_descriptor,
)

__all__ = [
    "ComponentLine",
    "ComponentNode",
    "ConfigLine",
    "DimRangeNode",
    "InputNode",
    "OptionReader",
    "OutputNode",
    "Source",
    "LINE_KINDS",
    "check_config",
    "first_word",
    "merge_config",
    "parse_config",
    "parse_line",
    "read_config",
    "write_config",
]

# ----- where a line came from ------------------------------------------------------------


@attrs.frozen
class Source:
    """The file, line number and text a line was read from, with the columns (1-based) of its options."""

    file: str
    line: int
    text: str
    kind_column: int = 1
    end_column: int = 1  # just after the last character before any comment
    # (key, value as written, key column, value column); a column is None where not known (a generated line)
    options: tuple[tuple[str, str, int | None, int | None], ...] = ()

    def key_column(self, key: str) -> int | None:
        return next((c for k, _, c, _ in self.options if k == key), None)

    def value_column(self, key: str) -> int | None:
        return next((c for k, _, _, c in self.options if k == key), None)

    def value(self, key: str) -> str | None:
        return next((v for k, v, _, _ in self.options if k == key), None)

    def error(self, message: str, column: int | None = None) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line, column=column or self.end_column, text=self.text)


def _error(source: Source | None, message: str, column: int | None = None) -> ConfigError:
    return source.error(message, column) if source else ConfigError(message)


# ----- typed options with Kaldi's conversions ------------------------------------------------

_REQUIRED: Any = object()
_INT_ITEM = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+\Z")


class OptionReader:
    """Reads `key=value` options with Kaldi's ConfigLine::GetValue rules, remembering which were read.

    Errors are ConfigError pointing at the value (or at the end of the line
    for a missing option). `finish()` reports every option never read.
    """

    def __init__(
        self,
        options: Sequence[tuple[str, str]],
        source: Source | None = None,
        *,
        used: Iterable[str] = (),
        unused_message: str = "Could not process these elements in initializer",
    ):
        self.options = dict(options)
        self.source = source
        self.used: set[str] = set(used)
        self.unused_message = unused_message

    def has(self, key: str) -> bool:
        return key in self.options

    def error(self, key: str | None, message: str) -> ConfigError:
        column = self.source.value_column(key) if self.source and key else None
        return _error(self.source, message, column)

    def _take(self, key: str, default: Any, what: str) -> str | None:
        if key not in self.options:
            if default is _REQUIRED:
                raise self.error(None, f"missing option {key}=<{what}>")
            return None
        return self.options[key]

    def _done(self, key: str, value: Any) -> Any:
        self.used.add(key)  # as in Kaldi, an option counts as read only once it converted
        return value

    def get_str(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._take(key, default, "string")
        return default if value is None else self._done(key, value)

    def get_int(self, key: str, default: Any = _REQUIRED) -> Any:
        """An int32 (ConvertStringToInteger)."""
        value = self._take(key, default, "integer")
        if value is None:
            return default
        result = parse_int(value)
        if result is None:
            too_big = re.fullmatch(r"\s*[+-]?[0-9]+\s*", value) is not None
            why = "is beyond Kaldi's int32 (-2147483648 to 2147483647)" if too_big else "is not an integer"
            raise self.error(key, f"option {key}={value!r} {why}")
        return self._done(key, result)

    def get_float(self, key: str, default: Any = _REQUIRED) -> Any:
        """A number (ConvertStringToReal for BaseFloat: decimal, inf or nan; float32 overflow is an error)."""
        value = self._take(key, default, "number")
        if value is None:
            return default
        result = parse_real(value)
        if result is None:
            raise self.error(key, f"option {key}={value!r} is not a number")
        return self._done(key, result)

    def get_bool(self, key: str, default: Any = _REQUIRED) -> Any:
        """Kaldi's rule: a value starting with t or T is true, with f or F false; anything else is an error."""
        value = self._take(key, default, "true|false")
        if value is None:
            return default
        if value[:1] in ("t", "T"):
            return self._done(key, True)
        if value[:1] in ("f", "F"):
            return self._done(key, False)
        raise self.error(key, f"option {key}={value!r} is not a boolean (true or false)")

    def get_ints(self, key: str, default: Any = _REQUIRED) -> Any:
        """A list of int32 separated by `,` or `:` with empty items skipped (SplitStringToIntegers)."""
        value = self._take(key, default, "list of integers")
        if value is None:
            return default
        result, start = [], 0
        for item in re.split(r"([:,])", value):
            if item in (":", ","):
                start += 1
                continue
            number = parse_int(item) if _INT_ITEM.match(item) else None
            if item and number is None:
                column = self.source.value_column(key) if self.source else None
                raise _error(
                    self.source, f"option {key}: {item!r} is not an integer", column + start if column else None
                )
            if item:
                result.append(number)
            start += len(item)
        return self._done(key, tuple(result))

    def unused(self) -> list[str]:
        return [k for k in self.options if k not in self.used]

    def finish(self) -> None:
        """Kaldi's HasUnusedValues: an error naming every option never read, pointing at the first."""
        unused = self.unused()
        if unused:
            text = " ".join(f"{k}={self.options[k]}" for k in unused)
            column = self.source.key_column(unused[0]) if self.source else None
            raise _error(self.source, f"{self.unused_message}: {text}", column)


# ----- line objects ------------------------------------------------------------------------


def _check_name(what: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, str) or not is_valid_name(value):
            raise ConfigError(f"{what} {value!r} is not a valid Kaldi name")

    return check


def _check_int(low: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or value >= 2**31:
            raise ConfigError(f"{attribute.name}={value!r} must be an integer from {low} to 2147483647 (Kaldi's int32)")

    return check


def _descriptor(value: Any) -> Layer:
    if not isinstance(value, Layer):
        raise ConfigError(f"a descriptor must be a layer, got {value!r}")
    return normalize_descriptor(value)


@attrs.frozen(kw_only=True)
class ConfigLine:
    """One line of a Kaldi nnet3 config; compared by content (never by where it was read)."""

    kind: ClassVar[str] = ""
    name: str = attrs.field(validator=_check_name("name"))
    source: Source | None = attrs.field(default=None, eq=False, repr=False)

    def to_text(self) -> str:
        """The line as Kaldi writes it."""
        raise NotImplementedError

    def error(self, message: str, key: str | None = None) -> ConfigError:
        """A ConfigError at this line, pointing at option `key`'s value when the line was read from text."""
        column = self.source.value_column(key) if self.source and key else None
        return _error(self.source, message, column or (self.source.kind_column if self.source else None))


@attrs.frozen(kw_only=True)
class InputNode(ConfigLine):
    """`input-node name=... dim=...`: a network input."""

    kind: ClassVar[str] = "input-node"
    dim: int = attrs.field(validator=_check_int(1))

    def to_text(self) -> str:
        return f"input-node name={self.name} dim={self.dim}"


def _options(value: Any) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, dict) else value
    return tuple((str(k), str(v)) for k, v in items)


@attrs.frozen(kw_only=True)
class ComponentLine(ConfigLine):
    """`component name=... type=... <options>`: the options stay strings, in their order, for the component."""

    kind: ClassVar[str] = "component"
    type: str = attrs.field(validator=_check_name("component type"))
    options: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_options)

    def reader(self) -> OptionReader:
        """An OptionReader over `options` (name and type count as read)."""
        return OptionReader(self.options, self.source, used=("name", "type"))

    def to_text(self) -> str:
        words = [f"component name={self.name} type={self.type}"]
        words += [f"{key}={_quote(value, self)}" for key, value in self.options]
        return " ".join(words)


@attrs.frozen(kw_only=True)
class ComponentNode(ConfigLine):
    """`component-node name=... component=... input=<descriptor>`; `descriptor` is in Kaldi's normal form."""

    kind: ClassVar[str] = "component-node"
    component: str = attrs.field(validator=_check_name("component"))
    descriptor: Layer = attrs.field(converter=_descriptor)

    def to_text(self) -> str:
        return f"component-node name={self.name} component={self.component} input={write_descriptor(self.descriptor)}"


@attrs.frozen(kw_only=True)
class OutputNode(ConfigLine):
    """`output-node name=... input=<descriptor> objective=linear|quadratic` (Kaldi's default: linear)."""

    kind: ClassVar[str] = "output-node"
    descriptor: Layer = attrs.field(converter=_descriptor)
    objective: str = attrs.field(default="linear", validator=attrs.validators.in_(("linear", "quadratic")))

    def to_text(self) -> str:
        return f"output-node name={self.name} input={write_descriptor(self.descriptor)} objective={self.objective}"


@attrs.frozen(kw_only=True)
class DimRangeNode(ConfigLine):
    """`dim-range-node name=... input-node=... dim-offset=... dim=...`: columns of a component or input node."""

    kind: ClassVar[str] = "dim-range-node"
    input_node: str = attrs.field(validator=_check_name("input-node"))
    dim_offset: int = attrs.field(validator=_check_int(0))
    dim: int = attrs.field(validator=_check_int(1))

    def to_text(self) -> str:
        return (
            f"dim-range-node name={self.name} input-node={self.input_node} dim-offset={self.dim_offset} dim={self.dim}"
        )


_LINE_TYPES: dict[str, type[ConfigLine]] = {
    cls.kind: cls for cls in (InputNode, ComponentLine, ComponentNode, OutputNode, DimRangeNode)
}


def _quote(value: str, line: ConfigLine) -> str:
    """`value` as ParseLine will read it back: bare when safe, else in quotes."""
    if "#" in value or "\n" in value:
        raise line.error(f"option value {value!r} cannot be written in a config file")
    if value and not any(c in value for c in C_SPACE + "='\""):
        return value
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise line.error(f"option value {value!r} has both kinds of quotes and cannot be written")


# ----- reading ----------------------------------------------------------------------------


def _split(
    body: str, source: Source, repeated: Callable[[str, str], int | None] | None = None
) -> tuple[str, list[tuple[str, str, int, int]]]:
    """Kaldi's ConfigLine::ParseLine: the first word and the `key=value` options with 0-based positions.
    A key given twice warns (the first value is used, as Kaldi); `repeated(key, ignored value)`, where given,
    says at which column to warn, or None to say nothing (see `parse_line`)."""
    n, pos = len(body), 0
    while pos < n and body[pos] in C_SPACE:
        pos += 1
    start = pos
    while pos < n and body[pos] not in C_SPACE:
        if body[pos] == "=":  # `foo=bar ...`: no first word
            pos = start
            break
        pos += 1
    kind = body[start:pos]
    if kind not in _LINE_TYPES:
        word = body[start:].split()[0].split("=")[0] if kind == "" else kind
        xconfig = word in ("input", "output") or word.endswith(("-layer", "-component", "-block"))
        hint = (
            ("; this looks like a Kaldi xconfig line: read the file with symnet.kaldi.xconfig (or `symnet xconfig`)")
            if xconfig
            else ""
        )
        raise source.error(
            f"expected a line type (input-node, component, component-node, output-node or dim-range-node), "
            f"got {word!r}{hint}",
            start + 1,
        )
    options: list[tuple[str, str, int, int]] = []
    first: dict[str, str] = {}
    repeats: list[tuple[str, str, int]] = []
    while pos < n:
        if body[pos] in C_SPACE:
            pos += 1
            continue
        equals = body.find("=", pos)
        if equals == pos or equals < 0:
            raise source.error(f"expected key=value, got {body[pos:].split()[0]!r}", pos + 1)
        key = body[pos:equals]
        if not is_valid_name(key):
            word = key.split()[0] if key.split() else key
            message = f"expected key=value, got {word!r}" if word != key else f"{key!r} is not a valid option name"
            raise source.error(message, pos + 1)
        if equals + 1 < n and body[equals + 1] in "'\"":
            quote = body[equals + 1]
            close = body.find(quote, equals + 2)
            if close < 0:
                raise source.error(f"no closing {quote} for the value of {key}", equals + 2)
            value, value_pos, pos = body[equals + 2 : close], equals + 2, close + 1
        else:
            end = n
            next_equals = body.find("=", equals + 1)
            if next_equals >= 0:
                blank = max(body.rfind(" ", equals, next_equals), body.rfind("\t", equals, next_equals))
                if blank > equals:
                    end = blank
            while end > equals + 1 and body[end - 1] in C_SPACE:
                end -= 1
            value, value_pos, pos = body[equals + 1 : end], equals + 1, end
        if key in first:  # Kaldi's ConfigLine keeps the first value (its own xconfig output-layer writes two)
            repeats.append((key, value, equals - len(key) + 1))
            continue
        first[key] = value
        options.append((key, value, equals - len(key), value_pos))
    if repeated is not None:
        repeats = [(key, value, column) for key, value, _ in repeats if (column := repeated(key, value)) is not None]
    if repeats:  # one warning per line: a crafted line may repeat a key millions of times
        key, value, column = repeats[0]
        more = f" (and {len(repeats) - 1} more repeated options)" if len(repeats) > 1 else ""
        warnings.warn(
            f"{source.file}:{source.line}:{column}: option {key} is given twice; as Kaldi, "
            f"the first value {_shorten(first[key])} is used and {key}={_shorten(value)} is ignored{more}",
            stacklevel=4,
        )
    return kind, options


def _shorten(value: str, limit: int = 80) -> str:
    """A value as a message quotes it: at most `limit` characters."""
    return value if len(value) <= limit else value[: limit - 3] + "..."


_NODE_OPTIONS = {
    "input-node": "name, dim",
    "component-node": "name, component, input",
    "output-node": "name, input, objective",
    "dim-range-node": "name, input-node, dim-offset, dim",
}


def _node_reader(kind: str, options: list[tuple[str, str, int, int]], source: Source) -> OptionReader:
    message = f"{kind} takes only {_NODE_OPTIONS.get(kind)}; could not process"
    return OptionReader([(k, v) for k, v, *_ in options], source, unused_message=message)


def _name(reader: OptionReader, key: str, what: str = "name") -> str:
    value = reader.get_str(key)
    words = value.split()
    if len(words) > 1 and reader.source is not None:  # `name=a junk ...`: Kaldi reads the value 'a junk'
        column = (reader.source.value_column(key) or 1) + value.index(words[1], len(words[0]))
        raise reader.source.error(f"expected key=value, got {words[1]!r}", column)
    if not is_valid_name(value):
        raise reader.error(key, f"{key} {value!r} is not a valid {what}")
    return value


def _positive(reader: OptionReader, key: str, low: int) -> int:
    value = reader.get_int(key)
    if value < low:
        raise reader.error(key, f"{key} must be {'positive' if low > 0 else 'non-negative'}, got {value}")
    return value


def _read_descriptor(reader: OptionReader, source: Source) -> Layer:
    text = reader.get_str("input")
    return parse_descriptor(
        text, file=source.file, line=source.line, column=source.value_column("input") or 1, line_text=source.text
    )


def parse_line(
    text: str,
    *,
    file: str = "<config>",
    line: int = 1,
    repeated: Callable[[str, str], int | None] | None = None,
) -> ConfigLine | None:
    """One config line as a line object, or None for a blank or comment-only line.

    A key the line gives twice warns at its column (Kaldi's ConfigLine keeps the first value). For a line generated
    from another (an xconfig line), `repeated(key, ignored value)` gives the column of that line to warn at, or
    None where there is nothing to say (Kaldi's own layers write some keys twice)."""
    if text.endswith("\r"):
        text = text[:-1]
    body = text.split("#", 1)[0]
    if not body.strip(C_SPACE):
        return None
    end = len(body.rstrip(C_SPACE)) + 1
    source = Source(file, line, text, end_column=end)
    kind, options = _split(body, source, repeated)
    source = attrs.evolve(
        source,
        kind_column=len(body) - len(body.lstrip(C_SPACE)) + 1,
        options=tuple((k, v, kp + 1, vp + 1) for k, v, kp, vp in options),
    )
    reader = _node_reader(kind, options, source)
    if kind == "component":
        return ComponentLine(
            name=_name(reader, "name"),
            type=_name(reader, "type", "component type"),
            source=source,
            options=[(k, v) for k, v, *_ in options if k not in ("name", "type")],
        )
    name = _name(reader, "name")
    if kind == "input-node":
        result: ConfigLine = InputNode(name=name, dim=_positive(reader, "dim", 1), source=source)
    elif kind == "component-node":
        component = _name(reader, "component")
        result = ComponentNode(
            name=name, component=component, descriptor=_read_descriptor(reader, source), source=source
        )
    elif kind == "output-node":
        descriptor = _read_descriptor(reader, source)
        objective = reader.get_str("objective", "linear")
        if objective not in ("linear", "quadratic"):
            raise reader.error("objective", f"objective must be linear or quadratic, got {objective!r}")
        result = OutputNode(name=name, descriptor=descriptor, objective=objective, source=source)
    else:
        input_node = _name(reader, "input-node")
        result = DimRangeNode(
            name=name,
            input_node=input_node,
            dim_offset=_positive(reader, "dim-offset", 0),
            dim=_positive(reader, "dim", 1),
            source=source,
        )
    reader.finish()
    return result


#: The kinds of line of an nnet3 config, each its first word.
LINE_KINDS = ("input-node", "component", "component-node", "output-node", "dim-range-node")


def first_word(path: str | os.PathLike[str]) -> str | None:
    """The first word of the file's first line with one (comments left out); None if none or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for text in f:
                words = text.split("#", 1)[0].split()
                if words:
                    return words[0]
    except OSError:
        return None
    return None


def parse_config(text: str, *, file: str = "<config>") -> list[ConfigLine]:
    """Every line of a config text as line objects (blank and comment lines dropped)."""
    lines = []
    for number, line_text in enumerate(text.split("\n"), 1):
        line = parse_line(line_text, file=file, line=number)
        if line is not None:
            lines.append(line)
    return lines


def read_config(source: str | os.PathLike[str] | TextIO, *, file: str | None = None) -> list[ConfigLine]:
    """The lines of a config file, given as a path or an open text file."""
    if hasattr(source, "read"):
        text = source.read()
        name = file or getattr(source, "name", "<config>")
    else:
        with open(source, encoding="utf-8", errors="replace") as f:
            text = f.read()
        name = file or os.fspath(source)
    return parse_config(text, file=str(name))


# ----- writing -----------------------------------------------------------------------------


def write_config(lines: Iterable[ConfigLine]) -> str:
    """The config text of `lines`, one per line, as Kaldi writes them."""
    return "".join(line.to_text() + "\n" for line in lines)


# ----- merging and checking -----------------------------------------------------------------


def merge_config(existing: Sequence[ConfigLine], new: Sequence[ConfigLine]) -> list[ConfigLine]:
    """`existing` with the lines of a further config `new` added, by Kaldi's rules (Nnet::ReadConfig).

    Node and component names are separate namespaces. A new component with an
    existing component's name replaces it where it stood; a new node line
    with an existing node's name removes the old line, and the new one comes
    in the order of `new`. A name defined twice within `new` is an error.
    """
    seen: dict[tuple[bool, str], ConfigLine] = {}
    for line in new:
        key = (isinstance(line, ComponentLine), line.name)
        if key in seen:
            what = "component" if key[0] else "node"
            raise line.error(f"{what} name {line.name} appears twice in the same config file", "name")
        seen[key] = line
    placed: set[str] = set()
    merged: list[ConfigLine] = []
    for line in existing:
        replacement = seen.get((isinstance(line, ComponentLine), line.name))
        if replacement is None:
            merged.append(line)
        elif isinstance(line, ComponentLine):
            merged.append(replacement)
            placed.add(line.name)
    merged += [line for line in new if not (isinstance(line, ComponentLine) and line.name in placed)]
    return merged


def _reference_error(line: ConfigLine, name: str, message: str) -> ConfigError:
    """An error pointing at the first token `name` of the line's descriptor text (at `input=` if none)."""
    source = line.source
    column = source.value_column("input") if source else None
    if source is None or column is None:
        return line.error(message, "input")
    tokens = tokenize(source.value("input") or "", column)  # it tokenized when the line was read
    return source.error(message, next((t.column for t in tokens if t.text == name), column))


def _refs(layer: Layer) -> list[str]:
    from ...core.descriptor import node_name

    if (name := node_name(layer)) is not None:
        return [name]
    return [name for child in layer.children for name in _refs(child)]


def check_config(lines: Sequence[ConfigLine]) -> None:
    """The checks of Kaldi's ReadConfig and Nnet::Check that need no dimensions; ConfigError on the first failure.

    Names are unique per namespace (node names also must not clash with the
    hidden `<name>_input` node of each component-node); every component-node
    names a component line; descriptors refer only to input-, component- and
    dim-range-nodes; dim-range-nodes read an input- or component-node; there
    is at least one input-node and one output-node.
    """
    if not any(isinstance(line, InputNode) for line in lines):
        raise ConfigError("the config has no input-node", file=_file(lines))
    if not any(isinstance(line, OutputNode) for line in lines):
        raise ConfigError("the config has no output-node", file=_file(lines))
    nodes: dict[str, ConfigLine] = {}
    hidden: dict[str, ComponentNode] = {}  # Kaldi's `<name>_input` node of each component-node
    components: dict[str, ComponentLine] = {}
    for line in lines:
        if isinstance(line, ComponentLine):
            if line.name in components:
                raise line.error(f"component name {line.name} is defined twice", "name")
            components[line.name] = line
            continue
        if line.name in nodes:
            raise line.error(f"node name {line.name} is defined twice", "name")
        if line.name in hidden:
            raise line.error(
                f"node name {line.name} clashes with the hidden input node of component-node {hidden[line.name].name}",
                "name",
            )
        nodes[line.name] = line
        if isinstance(line, ComponentNode):
            if line.name + "_input" in nodes:
                raise line.error(
                    f"component-node {line.name} needs a hidden node {line.name}_input, but a node of that name exists",
                    "name",
                )
            hidden[line.name + "_input"] = line
    for line in lines:
        if isinstance(line, ComponentNode) and line.component not in components:
            raise line.error(f"no component named {line.component}", "component")
        if isinstance(line, (ComponentNode, OutputNode)):
            for name in dict.fromkeys(_refs(line.descriptor)):
                target = nodes.get(name)
                if not isinstance(target, (InputNode, ComponentNode, DimRangeNode)):
                    what = (
                        "an output-node"
                        if isinstance(target, OutputNode)
                        else "no input-, component- or dim-range-node"
                    )
                    raise _reference_error(line, name, f"descriptor refers to {name}, which is {what}")
        if isinstance(line, DimRangeNode):
            target = nodes.get(line.input_node)
            if not isinstance(target, (InputNode, ComponentNode)):
                raise line.error(f"input-node {line.input_node} is not an input-node or component-node", "input-node")


def _file(lines: Sequence[ConfigLine]) -> str:
    return next((line.source.file for line in lines if line.source), "<config>")
