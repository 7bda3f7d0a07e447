"""The layer tree view: an expression, one foldable entry per sub-expression, shared ones shown once."""

from __future__ import annotations

from typing import Any

from ..core.layer import Layer
from ..core.roles import value_names
from .html import GREY, MAX_TREE, Html, box, escape, fold, short
from .labels import COLOURS, kind, label

__all__ = ["layer_html", "tree"]


def layer_html(layer: Any, *, open_depth: int = 3) -> Html:
    """The expression tree of `layer`, one foldable entry per sub-expression.

    A sub-expression used more than once (the same object) is expanded the
    first time and referred to by its number after that, so DAGs with
    exponentially many paths stay small.
    """
    return box(
        f'<div style="{GREY}">{escape(short(repr(layer), 200))}</div>',
        tree(layer, open_depth),
    )


def tree(root: Any, open_depth: int, output: str = "") -> str:
    """The entries of `root`'s tree: folds open above `open_depth`, at most `MAX_TREE` expanded; each value
    named as `Network.summary()` names it (`lstm1.gates`; `output` is the name of the output `root` is)."""
    numbers: dict[int, int] = {}
    shown = [0]
    names = value_names([(output, root)]) if isinstance(root, Layer) else {}

    def entry(layer: Any, field: str, depth: int) -> str:
        prefix = f'<span style="{GREY}">{escape(field)}: </span>' if field else ""
        if not isinstance(layer, Layer):
            return f"<div>{prefix}{escape(repr(layer))}</div>"
        colour = COLOURS[kind(layer)][1]
        text = f'<b style="color: {colour}">{escape(label(layer))}</b>'
        value = names.get(id(layer), "")
        if value and value not in label(layer):
            text = f"{escape(value)}: {text}"
        where = f' <span style="{GREY}">{escape(layer.where)}</span>' if getattr(layer, "where", None) else ""
        key = id(layer)
        children = list(layer.named_children())
        if key in numbers:
            return f'<div>{prefix}{text} <span style="{GREY}">(shared: #{numbers[key]})</span></div>'
        numbers[key] = len(numbers) + 1
        tag = f'<span style="{GREY}">#{numbers[key]}</span> '
        shown[0] += 1
        if not children:
            return f"<div>{prefix}{tag}{text}{where}</div>"
        if shown[0] > MAX_TREE or depth > 200:
            return f'<div>{prefix}{tag}{text} <span style="{GREY}">… (not expanded)</span></div>'
        body = "".join(entry(c, name, depth + 1) for name, c in children)
        body = f'<div style="margin-left: 1.4em; border-left: 1px dotted #bbb; padding-left: 0.4em">{body}</div>'
        return fold(f"{prefix}{tag}{text}{where}", body, open=depth < open_depth)

    return entry(root, "", 0)
