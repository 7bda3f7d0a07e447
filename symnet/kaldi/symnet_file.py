"""symnet's own model files (`.npz`, never a pickle): `save_model` and `load_model`.

A symnet model file is a NumPy `.npz` archive holding a JSON header, the
network as a Kaldi config (`symnet.kaldi.network.write_network`) and one array
per parameter; see `save_model`. It keeps any network a Kaldi config can
express, with its parameters and output objectives. (Kaldi's own model files
are `symnet.kaldi.model`'s.)
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..atomic import atomic_open
from ..errors import ConfigError, ModelFormatError, ParameterError
from ..network import Network
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


def save_model(path: str | os.PathLike[str], network: Network | KaldiNetwork,
               objectives: Mapping[str, str] | None = None) -> None:
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
        np.savez(f, **arrays)  # type: ignore[arg-type]  # mypy also matches **arrays to savez's allow_pickle: bool


def _string_entry(data: Any, key: str, path: str) -> str:
    if key not in data.files:
        raise ModelFormatError(f"{path}: not a symnet model file (no {key!r} entry)")
    value = data[key]
    if value.shape != () or value.dtype.kind != "U":
        raise ModelFormatError(f"{path}: entry {key!r} is not a string (dtype {value.dtype}, shape {value.shape})")
    return str(value)


def load_model(path: str | os.PathLike[str], *, read_matrix: Callable[[str], np.ndarray] | None = None) -> KaldiNetwork:
    """Read a model file written by `save_model` (no pickle); ModelFormatError if it is not one, or is damaged."""
    path = os.fspath(path)
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ModelFormatError(f"{path}: not a symnet model file ({e})") from None
    if not hasattr(data, "files"):
        raise ModelFormatError(f"{path}: not a symnet model file (a single array, not an archive)")
    with data:
        try:
            header = json.loads(_string_entry(data, _HEADER, path))
        except json.JSONDecodeError as e:
            raise ModelFormatError(f"{path}: damaged header: {e}") from None
        if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
            raise ModelFormatError(f"{path}: not a symnet model file (header format {header.get('format')!r})"
                                   if isinstance(header, dict) else f"{path}: damaged header")
        version = header.get("version")
        if not isinstance(version, int) or version < 1 or version > MODEL_VERSION:
            raise ModelFormatError(f"{path}: model format version {version!r}; this symnet reads versions 1 to "
                                   f"{MODEL_VERSION}")
        config = _string_entry(data, _CONFIG, path)
        declared = header.get("parameters")
        if not isinstance(declared, dict):
            raise ModelFormatError(f"{path}: damaged header: no parameter list")
        stored = {key[len(_PARAM):] for key in data.files if key.startswith(_PARAM)}
        if stored != set(declared):
            missing, extra = sorted(set(declared) - stored), sorted(stored - set(declared))
            raise ModelFormatError(
                f"{path}: parameters do not match the header (missing {missing}, unexpected {extra})")
        params = {}
        for name, info in declared.items():
            try:
                value = data[_PARAM + name]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
                raise ModelFormatError(f"{path}: parameter {name!r} cannot be read: {e}") from None
            if list(value.shape) != list(info.get("shape", [])) or value.dtype.str != info.get("dtype"):
                raise ModelFormatError(
                    f"{path}: parameter {name!r} has shape {list(value.shape)} and dtype {value.dtype.str}, "
                    f"the header says {info.get('shape')} and {info.get('dtype')}")
            params[name] = jnp.asarray(value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = parse_network(config, file=f"{path}[config]", read_matrix=read_matrix)
    except ConfigError as e:
        raise ModelFormatError(f"{path}: the stored config does not build: {e}") from None
    missing = sorted(set(built.network.structure.names) - set(params))
    try:
        if missing:
            raise ParameterError(f"the file has no values for {missing}")
        network = built.network.assign(params)
    except ParameterError as e:
        raise ModelFormatError(f"{path}: {e}") from None
    objectives = header.get("objectives") or {}
    return KaldiNetwork(network, {name: objectives.get(name, built.objectives.get(name, "linear"))
                                  for name in built.objectives})
