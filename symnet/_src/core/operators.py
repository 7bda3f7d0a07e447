"""The layer classes that `Layer`'s operators build (`a + b` is `Plus(a, b)`), by class name.

They are subclasses of `Layer` (`symnet._src.core.arithmetic`), so `symnet._src.core.layer` cannot import
them: that would be an import cycle. Arithmetic registers each class here when it is imported; the core
package (`symnet._src.core.__init__`, which Python runs before any of its modules) installs the loader that
imports it, run the first time an operator is used, so that `import symnet` still imports no numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..base.errors import LayerTypeError

if TYPE_CHECKING:
    from .layer import Layer

__all__ = ["on_first_use", "operator_layer", "register_operator"]

C = TypeVar("C", bound=type)

_CLASSES: dict[str, Callable[..., Layer]] = {}
_LOADERS: list[Callable[[], None]] = []


def register_operator(cls: C) -> C:
    """Class decorator: make `cls` the layer that the operator building a `cls.__name__` builds."""
    _CLASSES[cls.__name__] = cls
    return cls


def on_first_use(load: Callable[[], None]) -> None:
    """Run `load()` (which registers the classes, by importing their module) when a class is first missing."""
    _LOADERS.append(load)


def operator_layer(name: str) -> Callable[..., Layer]:
    """The registered layer class named `name` (`Plus`); an error, never a fallback, when there is none."""
    cls = _CLASSES.get(name)
    if cls is None:
        for load in tuple(_LOADERS):  # kept, not popped: a load is an import, so running it again is a no-op
            load()
        cls = _CLASSES.get(name)
    if cls is None:
        raise LayerTypeError(
            f"no layer class {name!r} is registered for Layer's operators: symnet._src.core.arithmetic "
            "registers them when it is imported (the package symnet._src.core imports it on first use)"
        )
    return cls
