"""The `symnet` parser: the program's own options, and each command's subparser, defined by its module."""

from __future__ import annotations

import argparse

from . import compute, copy, export, info, init, lda, train, xconfig

__all__ = ["COMMANDS", "PROG", "build_parser"]

PROG = "symnet"

#: The commands' modules, in the order `symnet --help` lists them; each has `add_parser(commands)` and `run`.
COMMANDS = (info, init, train, copy, compute, export, xconfig, lda)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line; a command's `run(args, stdout)` is `args.run`."""
    parser = argparse.ArgumentParser(prog=PROG, description="symnet: symbolic networks with Kaldi nnet3's engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser
