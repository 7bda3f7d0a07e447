"""The registry behind `_repr_html_`: how an object finds its notebook renderer without importing it.

Core and engine classes (layers, tapes, networks, computations) have
`_repr_html_` methods, but their renderers live in `symnet.display`, which sits
above everything it draws. `symnet.display` registers a renderer per class when
it is imported (`import symnet` has `render_html` import it the first time it is
called: `on_first_render`); `render_html` picks the one registered for the nearest
class in the object's MRO.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

__all__ = ["on_first_render", "register_html", "render_html"]

_RENDERERS: dict[type, Callable[[Any], str]] = {}
_LOADERS: list[Callable[[], None]] = []


def register_html(cls: type, renderer: Callable[[Any], str]) -> None:
    """Make `renderer(obj) -> html` the notebook view of instances of `cls` (and its subclasses)."""
    _RENDERERS[cls] = renderer


def on_first_render(load: Callable[[], None]) -> None:
    """Run `load()` (which registers renderers, e.g. by importing `symnet.display`) before `render` first runs."""
    _LOADERS.append(load)


def render_html(obj: Any) -> str:
    """The HTML of `obj` from its class's renderer; escaped `repr` if none is registered."""
    while _LOADERS:
        _LOADERS.pop(0)()
    for cls in type(obj).__mro__:
        renderer = _RENDERERS.get(cls)
        if renderer is not None:
            return renderer(obj)
    return f"<pre>{html.escape(repr(obj))}</pre>"
