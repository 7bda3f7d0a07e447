"""Kaldi nnet3 compatibility: config files (lines and descriptors), networks from configs, model files.

`parse_config` / `read_config` turn a config into immutable line objects
whose descriptors are symnet layers; `write_config` prints them back as Kaldi
does; `merge_config` adds a further config by Kaldi's rules; `check_config`
runs Kaldi's name and reference checks. `read_network` / `parse_network` /
`build_network` build a `Network` (its `objectives` the output-nodes')
from a config; `write_network` writes a Network back as a config.
Components: one record per Kaldi type in `symnet.kaldi.components`
(`build_component`, `component_options`, `COMPONENTS`). Kaldi's own model
files: `read_nnet` / `write_nnet` hold them at the token level (`NnetFile`),
`read_model` / `write_model` as networks (`KaldiModel`, whose `network` is the Network). symnet's own files,
which keep any network, are `symnet.save` / `symnet.load`.

Modules: `config` (config lines), `descriptor_text` (the descriptor grammar),
`build` (networks from configs), `network` (networks as configs; `KaldiNetwork`,
a deprecated alias), `components` (the component records), `nnet_file`, `binary`,
`token_kinds`, `token_values`, `transition_model` (model files at the token level), `model` and
`model_reader` (model files as networks), `compute`
(nnet3-compute), `exact` (every computable output frame, as the corpus's
nnet3-eval-exact), `scales` (Kaldi's compile-time rule on descriptor scales),
`lda` (the LDA-like input transform of recipes: nnet3-acc-lda-stats and
nnet-get-feature-transform);
the subpackage `xconfig` reads Kaldi's xconfig files.
"""

from ..errors import ComponentConfigError, ConfigWriteError, ModelWriteError
from .build import build_network, parse_network, read_network
from .components import (
    COMPONENTS,
    READABLE_TYPES,
    TOKEN_KINDS,
    WRITABLE_TYPES,
    KaldiComponentType,
    build_component,
    component_options,
    lookup,
)
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
from .model import KaldiModel, format_model, model_to_nnet, nnet_component, output_dims, write_model
from .model_reader import component_line, is_kaldi_model, model_from_nnet, parse_model, read_model
from .network import KaldiNetwork, network_config_lines, write_network
from .nnet_file import NnetComponent, NnetFile, format_nnet, parse_nnet, read_kaldi_array, read_nnet, write_nnet
from .transition_model import TransitionModel

__all__ = [
    "COMPONENTS",
    "READABLE_TYPES",
    "TOKEN_KINDS",
    "WRITABLE_TYPES",
    "ComponentConfigError",
    "ComponentLine",
    "ComponentNode",
    "ConfigLine",
    "ConfigWriteError",
    "DimRangeNode",
    "InputNode",
    "KaldiComponentType",
    "KaldiModel",
    "KaldiNetwork",
    "ModelWriteError",
    "NnetComponent",
    "NnetFile",
    "OptionReader",
    "OutputNode",
    "Source",
    "TransitionModel",
    "build_component",
    "build_network",
    "check_config",
    "component_line",
    "component_options",
    "format_model",
    "format_nnet",
    "is_kaldi_model",
    "lookup",
    "merge_config",
    "model_from_nnet",
    "model_to_nnet",
    "network_config_lines",
    "nnet_component",
    "normalize_descriptor",
    "output_dims",
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
    "write_config",
    "write_descriptor",
    "write_model",
    "write_network",
    "write_nnet",
]
