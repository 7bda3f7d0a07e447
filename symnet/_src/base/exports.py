"""Public modules list their names once, in a stub beside them; this module makes the stub's names the module's.

Every public module of symnet (`symnet`, `symnet.train`, `symnet.kaldi`, ...) is a
docstring and one call, and its names are written in one place: the stub beside it
(`__init__.pyi`, or `datasets.pyi` beside `datasets.py`), one re-export per line,

    from symnet._src.train.loop import fit as fit

which is what type checkers and editors read (the `X as X` form is how a stub says
"re-exported", PEP 484). At run time `attach(__name__, __file__)` reads the same
stub (its syntax tree: nothing in it runs) and gives the module its `__all__` and
a module `__getattr__` (PEP 562) that imports each name from its home on first use,
so `import symnet` imports neither jax nor numpy and a program pays only for what it
touches: the scientific-Python pattern of SPEC 1 (`lazy_loader.attach_stub`).
`eager=True` imports every name at once, for modules whose import registers
something (notebook views). Names that were public by mistake stay reachable for one
release through `deprecated`, with a DeprecationWarning.

One public module lists its names where they are made: `symnet.kaldi.xconfig.layers`,
whose functions (`tdnnf`, `fast_lstmp`, ...) are made one per registered xconfig layer
type, so no static list could name them without repeating the registry.
"""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["attach", "stub_exports"]


def stub_exports(file: str) -> dict[str, tuple[str, str]]:
    """Public name -> (absolute module, its attribute or submodule) from the stub beside `file`.

    Only `from M import X as X` lines are exports (M absolute: the stub says where each name lives); a stub
    line of any other kind is an error, so the stub stays a plain list.
    """
    stub = Path(file).with_suffix(".pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"), filename=str(stub))
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            raise ImportError(
                f"{stub}:{node.lineno}: a public stub holds only `from M import X as X` lines, M absolute"
            )
        base = node.module
        for alias in node.names:
            if alias.asname != alias.name:  # PEP 484: only `X as X` re-exports X (ruff drops any other import)
                raise ImportError(f"{stub}:{node.lineno}: write {alias.name} as `{alias.name} as {alias.name}`")
            if alias.asname in out:
                raise ImportError(f"{stub}:{node.lineno}: {alias.asname} is exported twice")
            # `from P import m as m` names a module when P is a package and m one of its modules
            out[alias.asname] = (base, alias.name)
    return out


def _resolve(base: str, attribute: str) -> Any:
    """`attribute` of the module `base`, or its submodule of that name (imported, never asked of `base`'s own
    `__getattr__`, which may be the one resolving it)."""
    module = importlib.import_module(base)
    if attribute in module.__dict__:
        return module.__dict__[attribute]
    if hasattr(module, "__path__"):
        try:
            return importlib.import_module(f"{base}.{attribute}")
        except ModuleNotFoundError as e:
            if e.name != f"{base}.{attribute}":
                raise
    return getattr(module, attribute)


def attach(
    module_name: str,
    file: str,
    *,
    eager: bool = False,
    deprecated: Mapping[str, tuple[str, str, str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`(__getattr__, __dir__, __all__)` for the public module `module_name` (its `__file__` is `file`).

    `deprecated`: name -> (absolute module, attribute, the warning's message): found with a
    DeprecationWarning, and not in `__all__`.
    """
    exports = stub_exports(file)
    names = sorted(exports)
    namespace = sys.modules[module_name].__dict__
    old = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = _resolve(*exports[name])
            namespace[name] = value  # found directly from now on
            return value
        if name in old:
            home, attribute, message = old[name]
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            return _resolve(home, attribute)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    if eager:
        for name in names:
            namespace[name] = _resolve(*exports[name])
    return __getattr__, __dir__, names
