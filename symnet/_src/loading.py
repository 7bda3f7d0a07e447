"""Any network file as a Network: a symnet file (`symnet.save`), a Kaldi nnet3 model (text or binary, raw nnet
or acoustic model), an nnet3 config or an xconfig, told apart by its first bytes.

Every command that takes a network reads it here, and so can Python code (`symnet.load_network`). The module
sits above `kaldi` and `saving`, the two families of readers it joins, and imports a reader only when a file
needs it: reading a Kaldi model imports nothing of `saving`, and `load_structure` no jax at all.
"""

from __future__ import annotations

import os
import zipfile
from typing import TYPE_CHECKING

from .base.errors import ModelFormatError, SymnetError
from .base.paths import as_path
from .base.safe_read import open_regular, regular_file

if TYPE_CHECKING:
    from .core.structure import Structure
    from .kaldi.models.model import KaldiModel
    from .network import Network

__all__ = ["load_model", "load_network", "load_structure", "read_config"]

#: Bytes of a file looked at to tell text from binary: a NUL among them is no config's or xconfig's.
SNIFF_BYTES = 4096


def load_network(path: str | os.PathLike[str], *, seed: int = 0) -> Network:
    """The Network of any network file symnet reads, whatever its format.

    Args:
        path: a symnet file (`symnet.save`'s, of one Network), a Kaldi nnet3 model file (text or binary, a raw
            nnet or an acoustic model such as final.mdl), a Kaldi nnet3 config or a Kaldi xconfig.
        seed: the random seed of a config's or xconfig's new parameters (model and symnet files hold theirs).

    Raises:
        ModelFormatError: naming the file, where it is none of these formats, or a symnet file of something
            other than one network (a training state), or a damaged model file.
        ConfigError: naming the file and line, for a config or xconfig that cannot be read.
        FileNotFoundError: where there is no file.
    """
    path = as_path(path, "symnet.load_network")
    kind = _kind(path)
    if kind == "kaldi":
        from .kaldi.models.model_reader import read_model

        return read_model(path).network
    if kind == "symnet":
        return _saved_network(path)
    return _config_network(path, kind, seed)


def load_model(path: str | os.PathLike[str], *, seed: int = 0) -> KaldiModel:
    """What `load_network` reads, as a KaldiModel: an acoustic model keeps its priors and transition model."""
    from .kaldi.models.model import KaldiModel
    from .kaldi.models.model_reader import read_model

    path = as_path(path, "load_model")
    kind = _kind(path)
    if kind == "kaldi":
        return read_model(path)
    return KaldiModel(_saved_network(path) if kind == "symnet" else _config_network(path, kind, seed))


def load_structure(path: str | os.PathLike[str]) -> tuple[Structure, dict[str, str]]:
    """The structure and output objectives of what `load_network` reads, checked as it checks them, without
    a Network (no parameter drawn, no jax): what `symnet info` prints."""
    path = as_path(path, "load_structure")
    kind = _kind(path)
    if kind == "kaldi":
        from .kaldi.models.model_reader import read_model_structure

        return read_model_structure(path)
    if kind == "symnet":
        from .saving.network_structure import read_network_structure

        return read_network_structure(path)
    if kind == "xconfig":
        from .kaldi.text.xconfig import read_xconfig

        return read_xconfig(path).structure()
    from .kaldi.text.build import read_structure

    return read_structure(path)  # or the config reader's error, naming the line at fault


def read_config(path: str | os.PathLike[str], *, seed: int = 0, base: Network | None = None) -> Network:
    """The Network of a Kaldi nnet3 config or xconfig file; with `base`, the config adds to or overrides that
    network (nnet3-init's EXISTING), and an xconfig's layers may take `base`'s nodes as input."""
    from .kaldi.text.xconfig import is_xconfig

    path = as_path(path, "read_config")
    regular_file(path, SymnetError, "config")
    return _config_network(path, "xconfig" if is_xconfig(path) else "config", seed, base)


def _kind(path: str) -> str:
    """Which reader `path` is for: 'kaldi', 'symnet', 'xconfig' or 'config'; a ModelFormatError for a file that
    can be none of them (empty, or binary but neither a Kaldi model nor a symnet file)."""
    from .kaldi.models.model_reader import is_kaldi_model
    from .kaldi.text.xconfig import is_xconfig

    regular_file(path, SymnetError, "model or config")  # a device or FIFO would be read until memory runs out
    if is_kaldi_model(path):
        return "kaldi"
    if zipfile.is_zipfile(path):
        return "symnet"
    f, _ = open_regular(path, SymnetError, "model or config")
    with f:
        head = f.read(SNIFF_BYTES)
    if not head.strip() or b"\0" in head:
        what = "is empty" if not head.strip() else "is binary"
        raise ModelFormatError(
            f"{path} {what}: not a network file symnet reads (a symnet file, a Kaldi nnet3 model, "
            "an nnet3 config or an xconfig)"
        )
    return "xconfig" if is_xconfig(path) else "config"


def _saved_network(path: str) -> Network:
    """The one Network of a symnet file (only here is `saving` imported: reading a Kaldi model never needs it)."""
    from .network import Network
    from .saving.files import load

    saved = load(path)
    if not isinstance(saved, Network):
        raise ModelFormatError(f"{path} is a symnet file of a {type(saved).__name__}, not of one network")
    return saved


def _config_network(path: str, kind: str, seed: int, base: Network | None = None) -> Network:
    """The Network of a config (`kind` 'config') or xconfig file, `base`'s nodes known to an xconfig."""
    if kind == "xconfig":
        from .kaldi.text.xconfig import read_xconfig
        from .kaldi.text.xconfig.layers import node_dims

        existing = node_dims(base) if base is not None else {}
        return read_xconfig(path, existing=existing).network(seed=seed, base=base)
    from .kaldi.text.build import read_network

    return read_network(path, seed=seed, base=base)
