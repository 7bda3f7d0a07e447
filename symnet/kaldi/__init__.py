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

Modules: `config` (config lines), `descriptor_text` (the descriptor grammar), `build` (networks from configs),
`network` (networks as configs; `KaldiNetwork`, a deprecated alias), `components` (the component records),
`nnet_file`, `token_kinds`, `token_values`, `transition_model` (model files at the token level), `model` and
`model_reader` (model files as networks), `compute` (nnet3-compute), `exact` (every computable output frame,
as the corpus's nnet3-eval-exact), `scales` (Kaldi's compile-time rule on descriptor scales), `lda` (the
LDA-like input transform of recipes: nnet3-acc-lda-stats and nnet-get-feature-transform); the subpackage `xconfig`
reads Kaldi's xconfig files. Kaldi's file formats themselves (binary and text tokens, archives, egs, FSTs) are
read by `symnet._src.kaldi_io`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from symnet._src.errors import ComponentConfigError, ConfigWriteError, ModelWriteError

if TYPE_CHECKING:
    from symnet._src.kaldi.build import build_network, parse_network, read_network
    from symnet._src.kaldi.components import (
        COMPONENTS,
        READABLE_TYPES,
        TOKEN_KINDS,
        WRITABLE_TYPES,
        KaldiComponentType,
        build_component,
        component_options,
        lookup,
    )
    from symnet._src.kaldi.config import (
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
    from symnet._src.kaldi.descriptor_text import normalize_descriptor, parse_descriptor, write_descriptor
    from symnet._src.kaldi.exact import exact_outputs
    from symnet._src.kaldi.lda import LdaOptions, accumulate_lda_stats
    from symnet._src.kaldi.model import (
        KaldiModel,
        format_model,
        model_to_nnet,
        nnet_component,
        output_dims,
        write_model,
    )
    from symnet._src.kaldi.model_reader import component_line, is_kaldi_model, model_from_nnet, parse_model, read_model
    from symnet._src.kaldi.network import KaldiNetwork, network_config_lines, write_network
    from symnet._src.kaldi.nnet3_compute import ComputeJob, ComputeOptions, Nnet3Computer
    from symnet._src.kaldi.nnet_file import (
        NnetComponent,
        NnetFile,
        format_nnet,
        parse_nnet,
        read_kaldi_array,
        read_nnet,
        write_nnet,
    )
    from symnet._src.kaldi.transition_model import TransitionModel
    from symnet._src.kaldi_io.egs import egs_chunks, read_cegs, read_egs


__all__ = [
    "COMPONENTS",
    "ComponentConfigError",
    "ComponentLine",
    "ComponentNode",
    "ComputeJob",
    "ComputeOptions",
    "ConfigLine",
    "ConfigWriteError",
    "DimRangeNode",
    "InputNode",
    "KaldiComponentType",
    "KaldiModel",
    "KaldiNetwork",
    "LdaOptions",
    "ModelWriteError",
    "Nnet3Computer",
    "NnetComponent",
    "NnetFile",
    "OptionReader",
    "OutputNode",
    "READABLE_TYPES",
    "Source",
    "TOKEN_KINDS",
    "TransitionModel",
    "WRITABLE_TYPES",
    "accumulate_lda_stats",
    "build_component",
    "build_network",
    "check_config",
    "component_line",
    "component_options",
    "egs_chunks",
    "exact_outputs",
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
    "read_cegs",
    "read_config",
    "read_egs",
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


#: Module (under `symnet._src`) -> the public names it defines; every name in `__all__` but the errors is imported
#: from its module on first use (`__getattr__`), so reading a config for `symnet info` imports no jax.
_MODULES: dict[str, tuple[str, ...]] = {
    "kaldi.build": ("build_network", "parse_network", "read_network"),
    "kaldi.components": (
        "COMPONENTS", "READABLE_TYPES", "TOKEN_KINDS", "WRITABLE_TYPES", "KaldiComponentType", "build_component",
        "component_options", "lookup",
    ),
    "kaldi.config": (
        "ComponentLine", "ComponentNode", "ConfigLine", "DimRangeNode", "InputNode", "OptionReader", "OutputNode",
        "Source", "check_config", "merge_config", "parse_config", "parse_line", "read_config", "write_config",
    ),
    "kaldi.descriptor_text": ("normalize_descriptor", "parse_descriptor", "write_descriptor"),
    "kaldi.model": ("KaldiModel", "format_model", "model_to_nnet", "nnet_component", "output_dims", "write_model"),
    "kaldi.model_reader": ("component_line", "is_kaldi_model", "model_from_nnet", "parse_model", "read_model"),
    "kaldi.network": ("KaldiNetwork", "network_config_lines", "write_network"),
    "kaldi.nnet_file": (
        "NnetComponent", "NnetFile", "format_nnet", "parse_nnet", "read_kaldi_array", "read_nnet", "write_nnet",
    ),
    "kaldi.transition_model": ("TransitionModel",),
    "kaldi_io.egs": ("egs_chunks", "read_cegs", "read_egs"),
    "kaldi.exact": ("exact_outputs",),
    "kaldi.lda": ("LdaOptions", "accumulate_lda_stats"),
    "kaldi.nnet3_compute": ("ComputeJob", "ComputeOptions", "Nnet3Computer"),
}  # fmt: skip

#: Public name -> its module.
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """A public name's object, imported from its module on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("symnet._src." + _LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
