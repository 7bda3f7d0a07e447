"""Kaldi nnet3 compatibility: config files (lines and descriptors).

`parse_config` / `read_config` turn a config into immutable line objects
whose descriptors are symnet layers; `write_config` prints them back as Kaldi
does; `merge_config` adds a further config by Kaldi's rules; `check_config`
runs Kaldi's name and reference checks.
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

__all__ = [
    "ComponentLine",
    "ComponentNode",
    "ConfigLine",
    "DimRangeNode",
    "InputNode",
    "OptionReader",
    "OutputNode",
    "Source",
    "check_config",
    "merge_config",
    "normalize_descriptor",
    "parse_config",
    "parse_descriptor",
    "parse_line",
    "read_config",
    "write_config",
    "write_descriptor",
]
