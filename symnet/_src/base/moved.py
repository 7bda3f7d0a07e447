"""The module paths of symnet 0.x's implementation, kept for one release with a DeprecationWarning.

symnet's modules used to be public paths (`symnet.kaldi.model`, `symnet.engine.dense`,
...); they now live under `symnet._src`, which is private (JAX's layout). The public
names are those of `symnet` and its public subpackages (`PUBLIC`). Until the next
release, `import symnet.engine.dense` still finds `symnet._src.engine.dense` (the same
module object, so classes and registries are shared) and warns with the public home of
what it holds. `symnet/__init__.py` installs the finder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["PUBLIC", "RENAMED", "install"]

#: The public modules; every other `symnet.*` path is an old one, found under `symnet._src`.
PUBLIC = frozenset(
    f"symnet.{name}"
    for name in (
        "chain", "components", "datasets", "decode", "demo", "display", "engine", "errors", "extend", "features",
        "kaldi", "kaldi.xconfig", "kaldi.xconfig.layers", "layers", "train",
    )
)  # fmt: skip


#: Old paths of modules (and packages, with everything under them) that were renamed as they moved; the rest
#: keep their names under `symnet._src`.
RENAMED = {
    "symnet.engine.cache": "symnet._src.engine.memo",
    "symnet.kaldi.compute": "symnet._src.kaldi.compute.nnet3_compute",
    "symnet.components.scale": "symnet._src.components.scaling",
    "symnet.kaldi.components.scale": "symnet._src.kaldi.components.scaling",
    # Kaldi's file formats, gathered in symnet._src.kaldi_io
    "symnet.kaldi.binary": "symnet._src.kaldi_io.binary",
    "symnet.kaldi.egs": "symnet._src.kaldi_io.egs",
    "symnet.kaldi.egs_index": "symnet._src.kaldi_io.egs_index",
    "symnet.kaldi.egs_sparse": "symnet._src.kaldi_io.egs_sparse",
    "symnet.train.ark": "symnet._src.kaldi_io.ark",
    "symnet.chain.fst": "symnet._src.kaldi_io.fst",
    # the base modules, the applications, and symnet._src.kaldi by concern (text, model files, computations)
    "symnet.atomic": "symnet._src.base.atomic",
    "symnet.safe_read": "symnet._src.base.safe_read",
    "symnet.bounded": "symnet._src.base.bounded",
    "symnet.host_memory": "symnet._src.base.host_memory",
    "symnet.paths": "symnet._src.base.paths",
    "symnet.version": "symnet._src.base.version",
    "symnet.moved": "symnet._src.base.moved",
    "symnet.text": "symnet._src.base.text",
    "symnet.exports": "symnet._src.base.exports",
    "symnet.levenshtein": "symnet._src.base.levenshtein",
    "symnet.cli": "symnet._src.app.cli",
    "symnet.kaldi.config": "symnet._src.kaldi.text.config",
    "symnet.kaldi.descriptor_text": "symnet._src.kaldi.text.descriptor_text",
    "symnet.kaldi.build": "symnet._src.kaldi.text.build",
    "symnet.kaldi.network": "symnet._src.kaldi.text.network",
    "symnet.kaldi.scales": "symnet._src.kaldi.text.scales",
    "symnet.kaldi.info": "symnet._src.kaldi.text.info",
    "symnet.kaldi.xconfig": "symnet._src.kaldi.text.xconfig",
    "symnet.kaldi.nnet_file": "symnet._src.kaldi.models.nnet_file",
    "symnet.kaldi.token_kinds": "symnet._src.kaldi.models.token_kinds",
    "symnet.kaldi.token_values": "symnet._src.kaldi.models.token_values",
    "symnet.kaldi.transition_model": "symnet._src.kaldi.models.transition_model",
    "symnet.kaldi.model": "symnet._src.kaldi.models.model",
    "symnet.kaldi.model_reader": "symnet._src.kaldi.models.model_reader",
    "symnet.kaldi.nnet3_compute": "symnet._src.kaldi.compute.nnet3_compute",
    "symnet.kaldi.exact": "symnet._src.kaldi.compute.exact",
    "symnet.kaldi.lda": "symnet._src.kaldi.compute.lda",
    "symnet.kaldi.chain_lda": "symnet._src.kaldi.compute.chain_lda",
    "symnet.kaldi.ark_writer": "symnet._src.kaldi.compute.ark_writer",
    "symnet.kaldi.float32": "symnet._src.kaldi.compute.float32",
}


def _renamed(fullname: str) -> str:
    """Where the old path `fullname` is now: under its longest renamed prefix, else under `symnet._src`."""
    old = max((p for p in RENAMED if fullname == p or fullname.startswith(p + ".")), key=len, default=None)
    if old is None:
        return "symnet._src." + fullname[len("symnet.") :]
    return RENAMED[old] + fullname[len(old) :]


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module now at `target`, and keeps that module's own spec."""

    def __init__(self, target: str):
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the old path's spec; the module keeps its own


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds `symnet.<path>` (not public) as `symnet._src.<path>`, with a DeprecationWarning."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("symnet.") or fullname.startswith("symnet._src") or fullname in PUBLIC:
            return None
        new = _renamed(fullname)
        try:
            found = importlib.util.find_spec(new)
        except ImportError:
            return None
        if found is None:
            return None
        home = next((p for p in sorted(PUBLIC, key=len, reverse=True) if fullname.startswith(p + ".")), "symnet")
        warnings.warn(
            f"{fullname} is deprecated: symnet's modules moved under symnet._src, which is private; import the public "
            f"names from {home} (this path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.util.spec_from_loader(
            fullname, _Alias(new), is_package=found.submodule_search_locations is not None
        )


def install() -> None:
    """Put the finder first on `sys.meta_path` (once), so an old path never loads a second copy of a module."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
