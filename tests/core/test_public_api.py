"""The public/private line: every module says what it exports (`__all__`), and every exported name exists.

A name in a module's `__all__` is what other modules and users may import from it. The public modules
(`symnet`, `symnet.train`, `symnet.engine`, ...) are the documented API and only re-export names of
`symnet._src`, the private implementation, whose 0.x paths still import for one release, with a warning.
"""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest

import symnet

PACKAGE = pathlib.Path(symnet.__file__).parent
MODULES = sorted(
    ".".join(("symnet", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
)


def test_every_module_is_listed() -> None:
    assert "symnet._src.engine.gradient" in MODULES and "symnet" in MODULES and len(MODULES) > 150


@pytest.mark.parametrize("name", MODULES)
def test_every_module_lists_its_exports_and_they_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ names a name twice"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names {missing}, which it does not define"


PUBLIC_MODULES = sorted(name for name in MODULES if not name.startswith("symnet._src"))


def test_the_public_modules_are_the_documented_ones() -> None:
    from symnet._src.base.moved import PUBLIC

    assert set(PUBLIC_MODULES) == PUBLIC | {"symnet", "symnet.__main__"}
    api = (PACKAGE.parent / "docs" / "api.md").read_text()
    assert all(f"::: {name}\n" in api for name in sorted(PUBLIC - {"symnet.demo"}) + ["symnet"])


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_a_public_module_defines_nothing_it_only_reexports(name: str) -> None:
    """Every function and class a public module lists is defined in symnet._src (the private implementation)."""
    module = importlib.import_module(name)
    defined_here = [
        item
        for item in getattr(module, "__all__", [])
        if callable(value := getattr(module, item)) and not getattr(value, "__module__", "").startswith("symnet._src")
    ]
    assert not defined_here, f"{name} defines {defined_here}; define them in symnet._src and re-export them"


OLD_PATHS = {
    "symnet.engine.dense": "symnet._src.engine.dense",
    "symnet.kaldi.xconfig.expand": "symnet._src.kaldi.text.xconfig.expand",
    "symnet.core.descriptor": "symnet._src.core.descriptor",
    "symnet.network": "symnet._src.network",
    "symnet.engine.cache": "symnet._src.engine.memo",
    "symnet.kaldi.compute": "symnet._src.kaldi.compute.nnet3_compute",
    "symnet.components.scale": "symnet._src.components.scaling",
}


def test_an_old_module_path_warns_and_is_the_same_module() -> None:
    """symnet 0.x's module paths are found for one release: the same module object (one copy of each class),
    each with a DeprecationWarning that names it (all in one fresh process, where none was imported before)."""
    code = (
        "import importlib, sys, warnings\n"
        "import symnet\n"
        f"for old, new in {OLD_PATHS!r}.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "    kinds = {w.category.__name__ for w in caught}\n"
        "    said = ' '.join(str(w.message) for w in caught)\n"
        "    target = importlib.import_module(new)\n"
        "    print(old, module is target, kinds == {'DeprecationWarning'}, old in said, target.__spec__.name == new)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [f"{old} True True True True" for old in OLD_PATHS], done.stdout + done.stderr


def test_public_paths_and_a_missing_one_do_not_warn() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import symnet.kaldi.xconfig.layers, symnet.engine, symnet.train, symnet.extend, symnet.errors\n"
        "try:\n"
        "    import symnet.engine.no_such_module\n"
        "except ModuleNotFoundError:\n"
        "    print('missing')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["missing"], done.stdout + done.stderr


def test_renamed_names_warn_and_are_the_new_objects() -> None:
    import symnet.components
    import symnet.extend

    with pytest.warns(DeprecationWarning, match="symnet.Full"):
        assert symnet.components.Constant is symnet.Full
    with pytest.warns(DeprecationWarning, match="symnet.extend.Formatter"):
        assert symnet.Formatter is symnet.extend.Formatter
    assert "Formatter" not in symnet.__all__ and "Constant" not in symnet.components.__all__
