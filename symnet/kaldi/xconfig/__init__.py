"""Kaldi xconfig files: the layer-level configs Kaldi's recipes write, expanded as xconfig_to_configs.py does.

    input dim=40 name=input
    relu-batchnorm-layer name=tdnn1 dim=512 input=Append(-2,-1,0,1,2)
    tdnnf-layer name=tdnnf2 dim=1536 bottleneck-dim=160 time-stride=1
    output-layer name=output dim=3000

`read_xconfig(path)` / `parse_xconfig(text)` read the layers (an `Xconfig`);
its `config_text("final")` is Kaldi's final.config, `config_lines()` the
config line objects, `network()` the Network (with its objectives). `read_xconfig_network`
and `parse_xconfig_network` do both steps. `is_xconfig(path)` tells an
xconfig from an nnet3 config by its first line. `LAYER_TYPES` maps every
supported layer type to its class; `KALDI_LAYER_TYPES` lists Kaldi's (all of
them supported: `UNSUPPORTED_LAYER_TYPES`, which would say why one is not,
is empty); `symnet.kaldi.xconfig.layers` has the same layers as Python
functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import LINE_KINDS, first_word
from .backend import Network
from .base import KALDI_LAYER_TYPES, LAYER_TYPES, UNSUPPORTED_LAYER_TYPES
from .expand import CONFIG_NAMES, Xconfig, parse_xconfig, read_xconfig, write_kaldi_matrix

__all__ = [
    "CONFIG_NAMES",
    "KALDI_LAYER_TYPES",
    "LAYER_TYPES",
    "UNSUPPORTED_LAYER_TYPES",
    "Xconfig",
    "is_xconfig",
    "parse_xconfig",
    "parse_xconfig_network",
    "read_xconfig",
    "read_xconfig_network",
    "write_kaldi_matrix",
]


def is_xconfig(path: str | os.PathLike[str]) -> bool:
    """Whether the file's first non-comment line starts with an xconfig layer type (not an nnet3 line type)."""
    word = first_word(path)
    if word is None or word in LINE_KINDS:
        return False
    kind = word.split("=")[0]
    return kind in LAYER_TYPES or kind in KALDI_LAYER_TYPES


def parse_xconfig_network(
    text: str, *, file: str = "<xconfig>", seed: int = 0, read_matrix: Callable[[str], np.ndarray] | None = None
) -> Network:
    """The Network of an xconfig text (Kaldi's final.config)."""
    return parse_xconfig(text, file=file).network(seed=seed, read_matrix=read_matrix)


def read_xconfig_network(
    source: str | os.PathLike[str] | Any,
    *,
    seed: int = 0,
    file: str | None = None,
    read_matrix: Callable[[str], np.ndarray] | None = None,
) -> Network:
    """The Network of an xconfig file (Kaldi's final.config)."""
    return read_xconfig(source, file=file).network(seed=seed, read_matrix=read_matrix)
