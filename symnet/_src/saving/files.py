"""`save(path, tree)` and `load(path)`: a pytree of Networks, arrays, optax states and plain values in a file."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..base.atomic import check_writable
from ..base.errors import ModelFormatError, SaveError
from ..base.paths import as_path
from ..base.version import __version__
from ..network import Network
from .archive import FORMAT, MAX_JSON_DEPTH, VERSION, dtype_name, read_archive, write_archive
from .networks import decode_network, encode_network
from .structure import network_entries
from .tree import NO_TEMPLATE, check_like, decode_tree, encode_tree

__all__ = ["load", "save"]


def save(path: str | os.PathLike[str], tree: Any) -> None:
    """Write `tree` (a Network, or any pytree of Networks, arrays, optax states and plain values) to `path`.

    The file is a NumPy `.npz` archive: `header.npy` (UTF-8 JSON) and one
    `arrays/K.npy` per array. The header of `save(path, {"net": net, "step": 3})`:

        {"format": "symnet-network", "version": 2, "symnet_version": "0.1.0",
         "arrays": [{"shape": [4, 3], "dtype": "<f4"}],
         "networks": [{"layers": [...], "outputs": [["output", 3]], "params": {"weight": 0},
                       "state": {}, "objectives": {}}],
         "tree": {"dict": [["net", {"network": 0}], ["step", 3]]}}

    `networks` holds each Network once (`symnet._src.saving.networks`), `tree` the
    value (`symnet._src.saving.tree`). The write is atomic (`symnet._src.base.atomic`):
    `path` is either left as it was or holds the whole new file. A value the
    format cannot hold (a layer whose class is not registered, an object that
    is not one of the kinds above) is a SaveError naming where it is, and
    nothing is written; so is a path that cannot be written (an OutputError:
    a folder, no permission).
    """
    path = as_path(path, "symnet.save")
    check_writable(path)
    arrays: list[np.ndarray] = []
    networks: list[dict[str, Any]] = []
    numbers: dict[int, int] = {}

    def network(net: Network) -> int:
        if id(net) not in numbers:
            numbers[id(net)] = len(networks)
            networks.append(encode_network(net, arrays))
        return numbers[id(net)]

    encoded = encode_tree(tree, arrays, network)
    if 1 + _depth(encoded) > MAX_JSON_DEPTH:  # in the header object: what `load` would refuse
        raise SaveError(f"the tree nests too deep for a symnet file (its JSON would be deeper than {MAX_JSON_DEPTH})")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "symnet_version": __version__,
        "arrays": [{"shape": list(a.shape), "dtype": dtype_name(a.dtype)} for a in arrays],
        "networks": networks,
        "tree": encoded,
    }
    write_archive(path, header, arrays)


def load(path: str | os.PathLike[str], like: Any = None) -> Any:
    """The value `save` wrote to `path` (a file of version 1, one Network, too).

    With `like` (a template: the value a fresh run starts from, such as
    `{"net": net, "opt": optimizer.init(net.params)}`), namedtuples come back
    as the template's types and the result must have the template's tree
    structure and array shapes and dtypes; without it, only optax's own state
    types are known (see `symnet._src.saving.tree`). Layer classes not defined in
    the running process (a user's class whose module was not imported yet), a
    file from a newer format version, a damaged or inconsistent file, a
    mismatch with `like`: each is a ModelFormatError naming the file and what
    is wrong. FileNotFoundError if there is no file.
    """
    path = as_path(path, "symnet.load")

    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(f"{path}: {message}")

    header, arrays = read_archive(path)
    if header["version"] == 1:
        tree: Any = decode_network(header, arrays, fail, origin=path)
    else:
        networks = []
        for k, entry in enumerate(network_entries(header, fail)):

            def fail_k(message: str, k: int = k) -> ModelFormatError:
                return fail(f"network #{k}: {message}")

            networks.append(decode_network(entry, arrays, fail_k, origin=f"{path}, network #{k}"))
        if "tree" not in header:
            raise fail("the header has no 'tree'")
        tree = decode_tree(header["tree"], arrays, networks, fail, NO_TEMPLATE if like is None else like)
    if like is not None:
        check_like(tree, like, fail)
    return tree


def _depth(node: Any) -> int:
    """How deep a JSON value nests (a scalar: 0)."""
    if isinstance(node, dict):
        return 1 + max((_depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((_depth(v) for v in node), default=0)
    return 0
