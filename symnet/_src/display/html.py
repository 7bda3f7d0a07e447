"""HTML primitives: the `Html` and `Svg` text types, escaping, tables, folds, and HTML back to plain text.

Every view is self-contained HTML or SVG text (no scripts, no external style
sheets or fonts, nothing fetched from the network), with inline styles from
the constants here, so a notebook cell shows it and a test can parse it.
"""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser
from typing import Any

__all__ = [
    "BOX",
    "CELL",
    "CHAR_W",
    "FONT",
    "GREY",
    "HEAD",
    "Html",
    "MARGIN",
    "MAX_ROWS",
    "MAX_TREE",
    "Svg",
    "TABLE",
    "box",
    "count",
    "escape",
    "fold",
    "html_to_text",
    "number",
    "short",
    "table",
]

FONT = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px"
BOX = f"{FONT}; line-height: 1.4"
TABLE = "border-collapse: collapse; margin: 4px 0"
CELL = "border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; white-space: nowrap"
HEAD = CELL + "; background: #f0f0f0"
GREY = "color: #777"
MAX_ROWS = 400  # table rows shown before eliding
MAX_TREE = 400  # tree entries shown before eliding
CHAR_W = 6.6  # px per character of the 11px monospace labels in pictures
MARGIN = 12  # px around a picture


class Html(str):
    """HTML text that a notebook renders (a `str`, so it can be printed, parsed, saved).

    Its `repr` is a plain-text rendering (tables as rows of cells), for
    consoles and notebook front ends that show only text.
    """

    def _repr_html_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return html_to_text(self)


class Svg(str):
    """SVG text that a notebook renders (a `str`)."""

    def _repr_svg_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"<SVG picture, {len(self)} characters: display it in a notebook or save it to a .svg file>"


class _TextRenderer(HTMLParser):
    """HTML to plain text: block elements and table rows on their own lines, cells separated by ' | '."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.line: list[str] = []
        self.cells = 0
        self.in_svg = 0
        self.in_cell = False

    def end_line(self) -> None:
        text = "".join(self.line).rstrip()
        if text:
            self.lines.append(text)
        self.line = []
        self.cells = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "svg":
            self.in_svg += 1
            self.line.append("[picture]")
        elif tag in ("td", "th"):
            if self.cells:
                self.line.append(" | ")
            self.cells += 1
            self.in_cell = True
        elif tag in ("div", "br") and self.in_cell:
            self.line.append(" ")
        elif tag in ("div", "tr", "details", "summary", "br"):
            self.end_line()

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.in_svg -= 1
        elif tag in ("td", "th"):
            self.in_cell = False
        elif tag == "div" and self.in_cell:
            pass
        elif tag in ("div", "tr", "details", "summary", "table"):
            self.end_line()

    def handle_data(self, data: str) -> None:
        if not self.in_svg:
            self.line.append(re.sub(r"\s+", " ", data) if self.line else data.lstrip())


def html_to_text(text: str) -> str:
    """A plain-text rendering of display HTML: one line per block or table row, cells joined by ' | '."""
    parser = _TextRenderer()
    parser.feed(text)
    parser.close()
    parser.end_line()
    return "\n".join(parser.lines)


def escape(value: Any) -> str:
    """`str(value)` escaped for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def short(text: str, width: int = 80) -> str:
    """`text` cut to `width` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def table(head: list[str], rows: list[list[str]], total: int | None = None) -> str:
    """A table from already escaped cells; rows beyond `MAX_ROWS` are elided with a note."""
    out = [f'<table style="{TABLE}"><thead><tr>']
    out += [f'<th style="{HEAD}">{h}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows[:MAX_ROWS]:
        out.append("<tr>" + "".join(f'<td style="{CELL}">{c}</td>' for c in row) + "</tr>")
    total = len(rows) if total is None else total
    if total > MAX_ROWS:
        out.append(f'<tr><td style="{CELL}; {GREY}" colspan="{len(head)}">… {total - MAX_ROWS} more rows</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def box(*parts: str) -> Html:
    """The outer element of every view: `parts` in one styled `<div>`."""
    return Html(f'<div class="symnet-display" style="{BOX}">' + "".join(parts) + "</div>")


def fold(summary: str, body: str, open: bool = False) -> str:
    """A `<details>` element: `summary` always shown, `body` when unfolded."""
    return f"<details{' open' if open else ''}><summary>{summary}</summary>{body}</details>"


def number(x: float) -> str:
    """A number in four significant digits (zero, infinities and NaN as Python prints them)."""
    if x == 0 or not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def count(n: int) -> str:
    """An integer with thousands separators."""
    return f"{n:,}"
