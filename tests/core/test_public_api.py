"""The public/private line: every module says what it exports (`__all__`), and every exported name exists.

A name in a module's `__all__` is what other modules and users may import from it; the packages'
`__all__` (`symnet`, `symnet.train`, `symnet.engine`, ...) are the documented API.
"""

from __future__ import annotations

import importlib
import pathlib

import pytest

import symnet

PACKAGE = pathlib.Path(symnet.__file__).parent
MODULES = sorted(
    ".".join(("symnet", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
)


def test_every_module_is_listed() -> None:
    assert "symnet.engine.gradient" in MODULES and "symnet" in MODULES and len(MODULES) > 150


@pytest.mark.parametrize("name", MODULES)
def test_every_module_lists_its_exports_and_they_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names a name twice"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names {missing}, which it does not define"
