"""The implementation behind `symnet.kaldi.xconfig` (private: import its names from `symnet.kaldi.xconfig`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import LINE_KINDS, first_word
from .base import KALDI_LAYER_TYPES, LAYER_TYPES, UNSUPPORTED_LAYER_TYPES
from .expand import CONFIG_NAMES, Xconfig, parse_xconfig, read_xconfig, write_kaldi_matrix

if TYPE_CHECKING:
    from ....network import Network

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
