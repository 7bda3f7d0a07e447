"""`symnet copy`: nnet3-copy (nnet3-am-copy for acoustic models), any network file written as a Kaldi model."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from .options import FORCE_HELP, kaldi_bool

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `copy` subparser."""
    copy = commands.add_parser(
        "copy",
        help="copy a Kaldi model file, or write a network as one (nnet3-copy)",
        description="Read a Kaldi nnet3 model file (text or binary, raw nnet or acoustic "
        "model), a symnet model file or a Kaldi config, and write it as a Kaldi "
        "model file (atomically; OUT '-' is stdout). An acoustic model stays "
        "one unless --raw=true (nnet3-am-copy --raw); the rest are written as "
        "raw nnet3.",
    )
    copy.add_argument(
        "--binary", type=kaldi_bool, default=True, metavar="true|false", help="write in binary mode (default true)"
    )
    copy.add_argument(
        "--raw",
        type=kaldi_bool,
        default=False,
        metavar="true|false",
        help="write only the nnet of an acoustic model (default false)",
    )
    copy.add_argument("--force", action="store_true", help=FORCE_HELP)
    copy.add_argument("input", metavar="IN")
    copy.add_argument("output", metavar="OUT")
    copy.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Write IN as a Kaldi model file (binary or text, raw or acoustic model), OUT '-' to standard output."""
    from ...kaldi.models.model import format_model, write_model
    from ...loading import load_model
    from .files import Files

    Files().read("IN", [args.input]).write("OUT", [args.output]).check(args.force)
    model = load_model(args.input)
    raw = args.raw or not model.is_am
    if args.output == "-":
        sys.stdout.buffer.write(format_model(model, binary=args.binary, raw=raw))
        sys.stdout.buffer.flush()
        return 0
    write_model(args.output, model, binary=args.binary, raw=raw)
    kind = "raw nnet3" if raw else "acoustic model"
    print(f"wrote {args.output} ({kind}, {'binary' if args.binary else 'text'})", file=stdout)
    return 0
