"""A Griffe extension for the API pages (mkdocs.yml): a public module's names are those its stub lists.

symnet's public modules give their `__all__` at run time from the stub beside them
(`symnet._src.base.exports`); Griffe reads code without running it, so this tells it the same
list, read by the same function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe

from symnet._src.base.exports import stub_exports


class StubExports(griffe.Extension):
    """Sets each public module's exports to the names of its stub."""

    def on_module(self, *, mod: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if mod.path.startswith("symnet._src"):
            return
        for path in mod.filepath if isinstance(mod.filepath, list) else [mod.filepath]:
            py = Path(path).with_suffix(".py")
            if py.with_suffix(".pyi").exists():
                mod.exports = list[str | griffe.ExprName](sorted(stub_exports(str(py))))
                return
