"""Kaldi nnet3 compatibility: config files (lines and descriptors), networks from configs, model files.

`parse_config` / `read_config` turn a config into immutable line objects
whose descriptors are symnet layers; `write_config` prints them back as Kaldi
does; `merge_config` adds a further config by Kaldi's rules; `check_config`
runs Kaldi's name and reference checks. `read_network` / `parse_network` /
`build_network` build a `KaldiNetwork` (a Network plus output objectives)
from a config; `write_network` writes a Network back as a config;
`save_model` / `load_model` are symnet's own (pickle-free) model files.
Kaldi's own model files: `read_nnet` / `write_nnet` hold them at the token
level (`NnetFile`), `read_model` / `write_model` as networks (`KaldiModel`).
Kaldi's xconfig files are read by the subpackage `symnet.kaldi.xconfig`.
"""

from .config import (
    ComponentLine,
    ComponentNode,
    ConfigLine,
    DimRangeNode,
    InputNode,
    OptionReader,
    OutputNode,
    Source,
    check_config,
    merge_config,
    parse_config,
    parse_line,
    read_config,
    write_config,
)
from .descriptor_text import normalize_descriptor, parse_descriptor, write_descriptor
from .model import KaldiModel, ModelWriteError, format_model, parse_model, read_model, write_model
from .model_io import (
    NnetComponent,
    NnetFile,
    TransitionModel,
    format_nnet,
    parse_nnet,
    read_kaldi_array,
    read_nnet,
    write_nnet,
)
from .network import (
    ConfigWriteError,
    KaldiNetwork,
    build_network,
    component_options,
    load_model,
    network_config_lines,
    parse_network,
    read_network,
    save_model,
    write_network,
)

__all__ = [
    "ComponentLine",
    "ComponentNode",
    "ConfigLine",
    "ConfigWriteError",
    "DimRangeNode",
    "InputNode",
    "KaldiModel",
    "KaldiNetwork",
    "ModelWriteError",
    "NnetComponent",
    "NnetFile",
    "OptionReader",
    "OutputNode",
    "Source",
    "TransitionModel",
    "build_network",
    "check_config",
    "component_options",
    "format_model",
    "format_nnet",
    "load_model",
    "merge_config",
    "network_config_lines",
    "normalize_descriptor",
    "parse_config",
    "parse_descriptor",
    "parse_line",
    "parse_model",
    "parse_network",
    "parse_nnet",
    "read_config",
    "read_kaldi_array",
    "read_model",
    "read_network",
    "read_nnet",
    "save_model",
    "write_config",
    "write_descriptor",
    "write_model",
    "write_network",
    "write_nnet",
]
