"""A symnet file's network as its Structure, without building a Network: what `symnet info` reads.

No parameter array becomes a jax array and no jax module is imported, so
describing a saved network costs what reading its header costs.
"""

from __future__ import annotations

import os

from ..base.errors import ModelFormatError, SymnetError
from ..core.structure import Structure
from .archive import read_archive
from .structure import decode_outputs, network_entries

__all__ = ["read_network_structure"]


def read_network_structure(path: str | os.PathLike[str]) -> tuple[Structure, dict[str, str]]:
    """The structure and objectives of the one Network a symnet file holds.

    A file of anything else (a training state: a dict of a network and an
    optimiser state) is a SymnetError naming what it holds.
    """

    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(f"{os.fspath(path)}: {message}")

    header, arrays = read_archive(path)
    entry = header
    if header["version"] > 1:
        tree, entries = header.get("tree"), network_entries(header, fail)
        network = tree.get("network") if isinstance(tree, dict) and len(tree) == 1 else None
        if not isinstance(network, int) or isinstance(network, bool) or not 0 <= network < len(entries):
            raise SymnetError(f"{os.fspath(path)} is a symnet file of {_kind(tree)}, not of one network")
        entry = entries[network]
    outputs, objectives = decode_outputs(entry, arrays, fail, origin=os.fspath(path))
    return Structure.of(outputs), objectives or {}


def _kind(node: object) -> str:
    """What a tree node of the header (`symnet._src.saving.tree`) holds, in words: "a dict", "a ScaleByAdamState"."""
    if isinstance(node, dict) and node:
        key = next(iter(node))
        return f"a {node[key]}" if key == "namedtuple" else f"a {key}"
    return "None" if node is None else f"a {type(node).__name__}"
