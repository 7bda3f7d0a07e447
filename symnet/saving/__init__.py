"""symnet's network files: `save(path, network)` and `load(path)` keep any network, without pickle.

A file holds the whole network: every layer (core layers, descriptors,
Node/Ref recurrences, components, users' layer classes) with its fields, the
Weights' initialisers and names, the arrays of `network.params` and
`network.state`, and, for a KaldiNetwork, the output objectives. Loading gives
a network with equal structure (`==`) and the same arrays, so equal outputs.
Nothing in a file is executed: the structure is JSON (`symnet.saving.structure`)
and only classes the running process has defined are built, and the arrays
are plain numbers read without pickle (`symnet.saving.archive`).

Kaldi's own formats (configs, nnet3 model files, `symnet.kaldi`) remain the
export for networks Kaldi can express.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..atomic import check_writable
from ..errors import ArgumentTypeError, ModelFormatError, SymnetError
from ..kaldi.network import KaldiNetwork
from ..network import Network
from ..paths import as_path
from ..version import __version__
from .archive import read_archive, write_archive
from .structure import check_mapping, decode_layers, encode_layers

__all__ = ["FORMAT", "VERSION", "load", "save"]

#: The `format` field of a network file's header.
FORMAT = "symnet-network"
#: The version of the format this symnet writes, and the newest it reads.
VERSION = 1


def save(path: str | os.PathLike[str], network: Network | KaldiNetwork) -> None:
    """Write `network` (a Network, or a KaldiNetwork with its objectives) to `path`, atomically.

    The file is a NumPy `.npz` archive: `header.npy` (UTF-8 JSON) and one
    `arrays/K.npy` per array. The header:

        {"format": "symnet-network", "version": 1, "symnet_version": "0.1.0",
         "layers": [{"class": "Input", "fields": {"name": "input", "dim": 4}}, ...],
         "outputs": [["output", 3]], "params": {"weight": 0}, "state": {},
         "arrays": [{"shape": [4, 3], "dtype": "<f4"}], "objectives": null}

    `layers` lists every distinct layer once, operands first (see
    `symnet.saving.structure`); `outputs` names the entry of each output,
    `params` and `state` the array of each Weight's value, `objectives` is
    null for a Network and the objectives of a KaldiNetwork. `path` is
    either left as it was or holds the whole new file. A layer whose class is
    not registered, or a field value the format cannot hold, is a SaveError
    (nothing is written), and so is a path that cannot be written (an
    OutputError: a folder, no permission).
    """
    path = as_path(path, "symnet.save")
    check_writable(path)
    if isinstance(network, KaldiNetwork):
        net, objectives = network.network, dict(network.objectives)
    elif isinstance(network, Network):
        net, objectives = network, None
    else:
        raise ArgumentTypeError(f"symnet.save takes a Network or a KaldiNetwork, not a {type(network).__name__}")
    arrays: list[np.ndarray] = []
    names = [name for name, _ in net.structure.outputs]
    layers, roots = encode_layers([layer for _, layer in net.structure.outputs], arrays)

    def values(mapping: Mapping[str, Any]) -> dict[str, int]:
        out = {}
        for name, value in mapping.items():
            out[name] = len(arrays)
            arrays.append(np.asarray(value))
        return out

    header = {
        "format": FORMAT,
        "version": VERSION,
        "symnet_version": __version__,
        "layers": layers,
        "outputs": [[name, k] for name, k in zip(names, roots, strict=True)],
        "params": values(net.params),
        "state": values(net.state),
        "arrays": [{"shape": list(a.shape), "dtype": a.dtype.str} for a in arrays],
        "objectives": objectives,
    }
    write_archive(path, header, arrays)


def load(path: str | os.PathLike[str]) -> Network | KaldiNetwork:
    """The network `save` wrote to `path`: a Network, or a KaldiNetwork if it was saved with objectives.

    Layer classes not defined in the running process (a user's class whose
    module was not imported yet), a file from a newer format version, a
    damaged or inconsistent file: each is a ModelFormatError naming the file
    and what is wrong. FileNotFoundError if there is no file.
    """
    path = as_path(path, "symnet.load")

    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(f"{path}: {message}")

    header, arrays = read_archive(path, lambda h: _array_table(h, fail))
    layers = decode_layers(header.get("layers"), arrays, fail, origin=path)
    outputs = {}
    stored_outputs = header.get("outputs")
    if not isinstance(stored_outputs, list) or not stored_outputs:
        raise fail("the header's 'outputs' is not a non-empty list")
    for item in stored_outputs:
        if (
            not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], int)
                and 0 <= item[1] < len(layers)
            )
            or item[0] in outputs
        ):
            raise fail(f"the header's output {item!r} is not a distinct [name, layer entry] pair")
        outputs[item[0]] = layers[item[1]]
    values = {}
    for half in ("params", "state"):
        named = check_mapping(header.get(half), half, fail)
        for name, k in named.items():
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(arrays):
                raise fail(f"the header's {half} entry {name!r} names no array ({k!r})")
        values[half] = {name: jnp.asarray(arrays[k]) for name, k in named.items()}
    try:
        network = Network(outputs, params=values["params"], state=values["state"])
    except SymnetError as e:
        raise fail(f"the stored network does not build: {e}") from None
    objectives = header.get("objectives")
    if objectives is None:
        return network
    objectives = check_mapping(objectives, "objectives", fail)
    unknown = sorted(set(objectives) - set(outputs))
    if unknown or not all(isinstance(v, str) for v in objectives.values()):
        raise fail(f"the header's objectives {objectives!r} are not strings for outputs of the network")
    return KaldiNetwork(network, objectives)


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
