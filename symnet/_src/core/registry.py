"""Stable names for layer and initialiser classes, so that a file can say which class to build.

`symnet._src.saving` writes each layer's and initialiser's class by name and, when
it loads, builds only classes registered here: classes that the running
process has already defined. A file never makes symnet import a module (that
would run code the file chose). Layer classes register through the
`layer_class` decorator, initialisers by subclassing `Initializer`.

Names: a class defined inside symnet is named by its `__qualname__` alone
(`Plus`, `AffineComponent`), so moving it between symnet's modules keeps old
files readable; any other class by `module:qualname` (`my_networks:Gated`), so
it cannot clash with symnet's. Defining a class again under the same module
and qualname (a notebook cell run twice, `importlib.reload`) replaces the
earlier definition; two different symnet modules claiming one name is an error
when the second is imported.
"""

from __future__ import annotations

from ..base.errors import LayerTypeError

__all__ = ["INITIALIZER_CLASSES", "LAYER_CLASSES", "ClassRegistry", "stable_name"]


def stable_name(cls: type) -> str:
    """The name a file uses for `cls`: the qualname for symnet's own classes, else `module:qualname`."""
    module = cls.__module__
    if module == "symnet" or module.startswith("symnet."):
        return cls.__qualname__
    return f"{module}:{cls.__qualname__}"


class ClassRegistry:
    """Classes of one kind (layers, initialisers) by their stable names."""

    def __init__(self, kind: str):
        self.kind = kind
        self._classes: dict[str, type] = {}
        self._renamed: dict[str, str] = {}

    def register(self, cls: type) -> None:
        """Make `cls` constructible by name; a redefinition (same module and qualname) replaces the old class."""
        name = stable_name(cls)
        old = self._classes.get(name)
        redefined = old is not None and (old.__module__, old.__qualname__) == (cls.__module__, cls.__qualname__)
        if old is not None and old is not cls and not redefined:
            raise LayerTypeError(
                f"two {self.kind} classes are named {name!r}: {old.__module__}.{old.__qualname__} and "
                f"{cls.__module__}.{cls.__qualname__}; rename one"
            )
        self._classes[name] = cls

    def name_of(self, cls: type) -> str | None:
        """The stable name of `cls` if a class of that name is registered (None if `cls` was never registered)."""
        name = stable_name(cls)
        return name if name in self._classes else None

    def rename(self, old: str, new: str) -> None:
        """Files written before a class was renamed name it `old`: `lookup(old)` finds the class named `new`."""
        self._renamed[old] = new

    def lookup(self, name: str) -> type | None:
        """The class registered under `name` (or under the name it was renamed to), or None."""
        return self._classes.get(self._renamed.get(name, name))

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._classes)


#: Every layer class defined with `symnet.layer_class` (core layers, descriptors, components, users' classes).
LAYER_CLASSES = ClassRegistry("layer")
#: Every subclass of `symnet.Initializer` (Zeros, Normal, Full, ..., users' initialisers).
INITIALIZER_CLASSES = ClassRegistry("initializer")
INITIALIZER_CLASSES.rename("Constant", "Full")  # components.Constant until 0.x; files of then name it so
