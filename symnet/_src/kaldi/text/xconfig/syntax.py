"""The lines of an xconfig file: a layer type and `key=value` options, with the columns of each.

Kaldi's rules (steps/libs/nnet3/xconfig/utils.py, parse_config_line):

    relu-batchnorm-layer name=tdnn1 dim=512 input=Append(-2,-1,0,1,2)
    output-layer name=output dim=3000 ng-affine-options="update-period=2 max-change=1.0"

- `#` starts a comment; a line that is blank after it is skipped.
- The first word is the layer type, lower-case letters, digits and dashes.
- Options are `key=value`; an unquoted value runs up to the next
  `key=` (so descriptors may contain spaces, and runs of blanks inside a value
  count as one); a value containing `=` is written in double quotes.
- A key given twice is an error, and so is text that is not `key=value`.
- Only letters, digits, blanks and `. - ( ) @ _ = , / + : "` may appear
  (Kaldi's set), and `[ ]` for references like `[-1]` to earlier layers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

from ....base.errors import ConfigError

__all__ = ["XconfigLine", "parse_xconfig_line", "xconfig_lines"]

_BAD_CHAR = re.compile(r"[^a-zA-Z0-9.\-()@_=,/+:\s\"\[\]]")
_TYPE = re.compile(r"[a-z][-a-z0-9]+\Z")
_KEY = re.compile(r"\s*([-a-zA-Z0-9_]*)=")


@attrs.frozen
class XconfigLine:
    """One xconfig line: its layer type and options (strings, in order), and where it was read.

    `columns` holds, for every option, the 1-based columns of its key and of its value.
    """

    type: str
    options: tuple[tuple[str, str], ...]
    file: str = "<xconfig>"
    line: int = 1
    text: str = ""
    type_column: int = 1
    columns: tuple[tuple[str, int, int], ...] = ()

    def value(self, key: str) -> str | None:
        return next((v for k, v in self.options if k == key), None)

    def key_column(self, key: str) -> int | None:
        return next((c for k, c, _ in self.columns if k == key), None)

    def value_column(self, key: str) -> int | None:
        return next((c for k, _, c in self.columns if k == key), None)

    def error(self, message: str, column: int | None = None) -> ConfigError:
        """A ConfigError at this line (at `column`, else at the layer type)."""
        return ConfigError(message, file=self.file, line=self.line, column=column or self.type_column, text=self.text)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def parse_xconfig_line(text: str, *, file: str = "<xconfig>", line: int = 1) -> XconfigLine | None:
    """One xconfig line, or None for a blank or comment-only line."""
    if text.endswith("\r"):
        text = text[:-1]
    body = text.split("#", 1)[0]

    def fail(message: str, column: int) -> ConfigError:
        return ConfigError(message, file=file, line=line, column=column, text=text)

    bad = _BAD_CHAR.search(body)
    if bad is not None:
        char = bad.group(0)
        hint = " (use double quotes for values containing '=')" if char == "'" else ""
        raise fail(f"character {char!r} is not allowed in an xconfig line{hint}", bad.start() + 1)
    first = re.search(r"\S+", body)
    if first is None:
        return None
    layer_type = first.group(0)
    if not _TYPE.match(layer_type):
        word = layer_type.split("=")[0]
        raise fail(
            f"expected a layer type (lower-case letters, digits and dashes, like relu-batchnorm-layer), got {word!r}",
            first.start() + 1,
        )
    options: list[tuple[str, str]] = []
    columns: list[tuple[str, int, int]] = []
    pos, n = first.end(), len(body)
    while True:
        while pos < n and body[pos].isspace():
            pos += 1
        if pos >= n:
            break
        key_match = _KEY.match(body, pos)
        if key_match is None:
            word = body[pos:].split()[0]
            raise fail(f"expected key=value, got {word!r}", pos + 1)
        key, key_pos = key_match.group(1), key_match.start(1)
        if not re.match(r"[a-zA-Z_]", key):
            raise fail(f"an option name must start with a letter or _, got {key!r}", key_pos + 1)
        start = key_match.end()
        if start < n and body[start] == '"':
            close = body.find('"', start + 1)
            if close < 0:
                raise fail(f'no closing " for the value of {key}', start + 1)
            value, value_pos, pos = body[start + 1 : close], start + 2, close + 1
            if pos < n and not body[pos].isspace():
                raise fail(f"expected a blank after the quoted value of {key}", pos + 1)
        else:
            following = _KEY.search(body, start)
            end = following.start() if following else n
            value, value_pos, pos = body[start:end], start + 1, end
        if any(k == key for k, _ in options):
            raise fail(f"option {key} given twice", key_pos + 1)
        options.append((key, " ".join(value.split())))
        columns.append((key, key_pos + 1, value_pos))
    return XconfigLine(layer_type, tuple(options), file, line, text, first.start() + 1, tuple(columns))


def xconfig_lines(text: str, *, file: str = "<xconfig>") -> Iterator[XconfigLine]:
    """The non-blank lines of an xconfig text."""
    for number, line_text in enumerate(text.split("\n"), 1):
        parsed = parse_xconfig_line(line_text, file=file, line=number)
        if parsed is not None:
            yield parsed
