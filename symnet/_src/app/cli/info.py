"""`symnet info`: what nnet3-info prints of any network file, read to its structure (no parameter drawn, no jax)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `info` subparser."""
    info = commands.add_parser(
        "info",
        help="print a model's or config's dims, context, nodes and components",
        description="Print what nnet3-info prints: dims, left/right context, the number of "
        "parameters, every node with its dims, every component with its "
        "parameter shapes.",
    )
    info.add_argument("model", metavar="MODEL_OR_CONFIG", help="a symnet model file or a Kaldi nnet3 config")
    info.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Print nnet3-info's lines, or symnet's summary of a network Kaldi's config cannot say."""
    from ...base.errors import ConfigWriteError
    from ...kaldi.text.info import info_lines
    from ...loading import load_structure

    structure, objectives = load_structure(args.model)
    try:
        lines = info_lines(structure, objectives)
    except ConfigWriteError:  # a network from Python that Kaldi's config cannot say: symnet's own summary
        from ...engine.summary import summarize

        lines = str(summarize(dict(structure.outputs))).splitlines()
    for line in lines:
        print(line, file=stdout)
    return 0
