"""The summary view: a network's layers with dims, parameter counts and context (`Network.summary()`)."""

from __future__ import annotations

from ..engine.summary import Summary
from .html import Html, box, escape, table

__all__ = ["summary_html"]


def summary_html(summary: Summary) -> Html:
    """The rows of `summary` as an HTML table, with the totals."""
    head, rows = summary.table()
    cells = [[escape(c) for c in row] for row in rows]
    total = f"<div><b>total</b>: {summary.params:,} parameters, {summary.state:,} state values</div>"
    return box(table(head, cells), total)
