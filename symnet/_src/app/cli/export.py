"""`symnet export`: a network's output as a `jax.export` program (OUT) and its description (OUT.json), for
services without symnet."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ...base.text import is_digits
from .options import FORCE_HELP, FRAMES, count

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `export` subparser."""
    exported = commands.add_parser(
        "export",
        help="write the network's output as a jax.export program that runs without symnet (jax, jaxlib and the "
        "flatbuffers package, which jax.export.deserialize needs)",
        description="Write MODEL's output for [batch, T, dim] float32 input as a jax.export program: OUT holds "
        "the serialized program (the parameters inside), OUT.json its inputs, output, shapes and versions (both "
        "written atomically). A service loads it with jax.export.deserialize, without symnet (see "
        "symnet.export). The batch is symbolic unless --batch is a number; the frame count is symbolic if --frames is "
        "a name, where the network's outputs are local in time (computed in chunks of --chunk frames).",
    )
    exported.add_argument(
        "--frames",
        required=True,
        help="the frames of every sequence, or a symbolic dimension's name (t: any length, for networks whose "
        "outputs are local in time)",
    )
    exported.add_argument(
        "--chunk",
        type=count(1, FRAMES),
        help="with a symbolic --frames: the output frames each chunk computes (default: symnet.export's)",
    )
    exported.add_argument(
        "--batch", default="b", help="a symbolic dimension's name (default b: any batch size) or a fixed size"
    )
    exported.add_argument(
        "--mode",
        choices=("same", "valid"),
        default="same",
        help="same: one output frame per input frame, edge frames repeated (default); valid: only frames that "
        "need no padding",
    )
    exported.add_argument("--output", metavar="NAME", help="the output node (default: output, or the only one)")
    exported.add_argument("--force", action="store_true", help=FORCE_HELP)
    exported.add_argument("model", metavar="MODEL")
    exported.add_argument("out", metavar="OUT")
    exported.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Export MODEL's output to OUT and OUT.json."""
    from ...exporting import export
    from ...loading import load_network
    from .files import Files

    batch = int(args.batch) if is_digits(args.batch) else args.batch  # '²' is a name export refuses, not int('²')
    frames = int(args.frames) if is_digits(args.frames) else args.frames
    chunk = {} if args.chunk is None else {"chunk": args.chunk}
    files = Files().read("MODEL", [args.model]).write("OUT", [args.out])
    files.write("OUT.json", [args.out + ".json"]).check(args.force)
    network = load_network(args.model)
    export(network, args.out, frames=frames, batch=batch, mode=args.mode, output=args.output, **chunk)
    print(f"wrote {args.out} and {args.out}.json", file=stdout)
    return 0
