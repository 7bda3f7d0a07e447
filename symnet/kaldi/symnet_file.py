"""symnet's own model files (`.npz`, never a pickle): `save_model` and `load_model`.

A symnet model file is a NumPy `.npz` archive holding a JSON header, the
network as a Kaldi config (`symnet.kaldi.network.write_network`) and one array
per parameter; see `save_model`. It keeps any network a Kaldi config can
express, with its parameters and output objectives. (Kaldi's own model files
are `symnet.kaldi.model`'s.)
"""

from __future__ import annotations

import errno
import json
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..atomic import atomic_open
from ..errors import ConfigError, ModelFormatError, ParameterError
from ..network import Network
from ..safe_read import NpzArchive
from ..version import __version__
from .build import parse_network
from .config import write_config
from .network import KaldiNetwork, network_config_lines, unwrap_network

__all__ = ["MODEL_FORMAT", "MODEL_VERSION", "load_model", "save_model"]

#: The `format` field of a model file's header.
MODEL_FORMAT = "symnet-model"
#: The version of the model file format this code writes (and the newest it reads).
MODEL_VERSION = 1

_HEADER = "symnet.header"
_CONFIG = "symnet.config"
_PARAM = "params/"


def save_model(
    path: str | os.PathLike[str], network: Network | KaldiNetwork, objectives: Mapping[str, str] | None = None
) -> None:
    """Write symnet's model file: a NumPy `.npz` archive (a zip of `.npy` arrays), never a pickle.

    Entries:

    - `symnet.header`: a 0-d string array holding JSON:
      `{"format": "symnet-model", "version": 1, "symnet_version": ...,
      "parameters": {name: {"shape": [...], "dtype": "float32"}}, "objectives": {output: objective}}`;
    - `symnet.config`: a 0-d string array, the network as a Kaldi config (`write_network`);
    - `params/NAME`: one array per Weight, named as in `network.params` and `network.state`.

    Loading (`load_model`) reads it with `allow_pickle=False`, rebuilds the
    network from the config and checks every parameter against the header
    and the network. The file is written atomically: to a temporary file in
    the same directory, flushed, then renamed onto `path`, so `path` is
    either the old file or the complete new one, never half written.
    """
    net, objectives = unwrap_network(network, objectives)
    config = write_config(network_config_lines(net, objectives, exact=False))
    params = {name: np.asarray(value) for name, value in net.values.items()}  # parameters and state
    header = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "symnet_version": __version__,
        "parameters": {name: {"shape": list(v.shape), "dtype": v.dtype.str} for name, v in params.items()},
        "objectives": {name: objectives.get(name, "linear") for name, _ in net.structure.outputs},
    }
    arrays = {_HEADER: np.array(json.dumps(header, sort_keys=True)), _CONFIG: np.array(config)}
    arrays.update({_PARAM + name: value for name, value in params.items()})
    with atomic_open(path) as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy stubs type **kwds as allow_pickle


def load_model(path: str | os.PathLike[str], *, read_matrix: Callable[[str], np.ndarray] | None = None) -> KaldiNetwork:
    """Read a model file written by `save_model` (no pickle); ModelFormatError if it is not one, or is damaged.

    Every member is read through `symnet.safe_read.NpzArchive`: its `.npy` header is checked against the
    model header (shape, dtype) before any data is inflated, and members the header does not list are refused.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    with NpzArchive(path, error=ModelFormatError, what="symnet model file") as archive:
        for key in (_HEADER, _CONFIG):
            if key not in archive:
                raise ModelFormatError(f"{path}: not a symnet model file (no {key!r} entry)")
        header = archive.read_json(_HEADER)
        if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
            raise ModelFormatError(
                f"{path}: not a symnet model file (header format {header.get('format')!r:.40})"
                if isinstance(header, dict)
                else f"{path}: damaged header"
            )
        version = header.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1 or version > MODEL_VERSION:
            raise ModelFormatError(
                f"{path}: model format version {version!r:.20}; this symnet reads versions 1 to {MODEL_VERSION}"
            )
        config = archive.read_text(_CONFIG)
        declared = header.get("parameters")
        if not isinstance(declared, dict):
            raise ModelFormatError(f"{path}: damaged header: no parameter list")
        stored = {key[len(_PARAM) :] for key in archive.names if key.startswith(_PARAM)}
        unreferenced = sorted(set(archive.names) - {_HEADER, _CONFIG} - {_PARAM + n for n in stored})
        if stored != set(declared) or unreferenced:
            missing, extra = sorted(set(declared) - stored), sorted(stored - set(declared)) + unreferenced
            raise ModelFormatError(
                f"{path}: parameters do not match the header (missing {missing[:5]}, unexpected {extra[:5]})"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built = parse_network(config, file=f"{path}[config]", read_matrix=read_matrix)
        except ConfigError as e:
            raise ModelFormatError(f"{path}: the stored config does not build: {e}") from None
        own = built.network.values
        missing = sorted(set(own) - set(declared))
        if missing:
            raise ModelFormatError(f"{path}: the file has no values for {missing[:5]}")
        params = {}
        for name, info in declared.items():
            if name not in own:
                raise ModelFormatError(f"{path}: parameter {name!r} belongs to no layer of the stored config")
            shape, dtype = _declared(path, name, info)
            if shape != tuple(np.shape(own[name])):
                raise ModelFormatError(
                    f"{path}: parameter {name!r} has shape {list(shape)} in the header, "
                    f"the stored config gives it {list(np.shape(own[name]))}"
                )
            params[name] = jnp.asarray(archive.read(_PARAM + name, shape=shape, dtype=dtype))
    try:
        network = built.network.assign(params)
    except ParameterError as e:
        raise ModelFormatError(f"{path}: {e}") from None
    objectives = header.get("objectives") or {}
    return KaldiNetwork(
        network, {name: objectives.get(name, built.objectives.get(name, "linear")) for name in built.objectives}
    )


def _declared(path: str, name: str, info: Any) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype the header gives parameter `name` (ModelFormatError if they are not a shape and
    a number dtype)."""
    shape, dtype = (info.get("shape"), info.get("dtype")) if isinstance(info, dict) else (None, None)
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ModelFormatError(f"{path}: damaged header: parameter {name!r} has shape {shape!r:.60}")
    try:
        kind = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:
        kind = None
    if kind is None or kind.kind not in "biuf":
        raise ModelFormatError(f"{path}: damaged header: parameter {name!r} has dtype {dtype!r:.40}")
    return tuple(shape), kind
