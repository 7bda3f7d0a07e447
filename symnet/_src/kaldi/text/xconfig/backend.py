"""What the xconfig package expands into: Kaldi config lines and the network builder.

This is the one module of the package that imports symnet's Kaldi config and
network code, so that a change there is one change here.
"""

from __future__ import annotations

from ...components import read_matrix_file
from ..build import build_network, sized_structure
from ..config import ConfigLine, OutputNode, Source, parse_line
from ..descriptor_text import write_descriptor

__all__ = [
    "ConfigLine",
    "OutputNode",
    "Source",
    "build_network",
    "parse_line",
    "read_matrix_file",
    "sized_structure",
    "write_descriptor",
]
