"""symnet's files: `save(path, tree)` and `load(path)` keep networks and whole training states, without pickle.

A file holds a pytree (`symnet._src.saving.tree`): Networks, arrays (JAX and
NumPy), optax states (namedtuples such as `ScaleByAdamState`, `EmptyState`,
and the tuples of a chain), and dicts, lists, tuples, None, bool, int, float
and str. A Network is kept whole (`symnet._src.saving.networks`): every layer
(core layers, descriptors, Node/Ref recurrences, components, users' layer
classes) with its fields, the Weights' initialisers and names, the arrays of
`params` and `state`, and the outputs' `objectives`. Loading gives a network
with equal structure (`==`) and the same arrays, so equal outputs. Nothing in
a file is executed and no module is imported by a name it holds: the
structure is JSON (`symnet._src.saving.structure`), only classes the running
process has defined are built, namedtuples come back as the type of a
template (`load(path, like=...)`) or of optax's exported state classes, and
the arrays are plain numbers read without pickle (`symnet._src.saving.archive`).

Kaldi's own formats (configs, nnet3 model files, `symnet.kaldi`) remain the
export for networks Kaldi can express.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..atomic import check_writable
from ..errors import ModelFormatError, SaveError
from ..network import Network
from ..paths import as_path
from ..version import __version__
from .archive import MAX_JSON_DEPTH, read_archive, write_archive
from .networks import decode_network, encode_network
from .tree import NO_TEMPLATE, check_like, decode_tree, encode_tree

__all__ = ["FORMAT", "VERSION", "load", "save"]

#: The `format` field of a symnet file's header.
FORMAT = "symnet-network"
#: The version of the format this symnet writes, and the newest it reads (version 1 holds one Network).
VERSION = 2


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
    value (`symnet._src.saving.tree`). The write is atomic (`symnet._src.atomic`):
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
        "arrays": [{"shape": list(a.shape), "dtype": a.dtype.str} for a in arrays],
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

    header, arrays = read_archive(path, lambda h: _array_table(h, fail))
    if header["version"] == 1:
        tree: Any = decode_network(header, arrays, fail, origin=path)
    else:
        entries = header.get("networks")
        if not isinstance(entries, list):
            raise fail("the header's 'networks' is not a list")
        networks = []
        for k, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise fail(f"the header's network #{k} is not an object")

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


def _array_table(header: dict[str, Any], fail: Any) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The header's format and version checked, and its table of arrays as `(shape, dtype)`."""
    if header.get("format") != FORMAT:
        raise fail(f"not a symnet network file (format {header.get('format')!r}, expected {FORMAT!r})")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise fail(f"the header's format version is {version!r}, not a version number")
    if version > VERSION:
        raise fail(
            f"format version {version} (written by symnet {header.get('symnet_version', '?')}); this symnet "
            f"({__version__}) reads versions 1 to {VERSION}: upgrade symnet to read it"
        )
    table = header.get("arrays")
    if not isinstance(table, list):
        raise fail("the header's 'arrays' is not a list")
    out = []
    for k, item in enumerate(table):
        shape, dtype = (item.get("shape"), item.get("dtype")) if isinstance(item, dict) else (None, None)
        if not (
            isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            and isinstance(dtype, str)
        ):
            raise fail(f"the header's array #{k} is not {{'shape': [sizes], 'dtype': name}}: {item!r}")
        try:
            parsed = np.dtype(dtype)
        except (TypeError, ValueError):
            raise fail(f"the header's array #{k} has dtype {dtype!r}, which is not a NumPy dtype") from None
        if parsed.kind not in "biufc" or parsed.fields is not None:
            raise fail(f"the header's array #{k} has dtype {dtype!r}: symnet files hold numbers only")
        out.append((tuple(shape), parsed))
    return out
