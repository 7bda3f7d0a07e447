"""`symnet init`: nnet3-init, a model file from a Kaldi config (or xconfig), with an existing model's nodes."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import numpy as np

from .options import FORCE_HELP, UsageError

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `init` subparser."""
    init = commands.add_parser(
        "init",
        help="initialise a model from a Kaldi config (nnet3-init)",
        description="Build the network of a Kaldi nnet3 config, initialise its parameters "
        "as Kaldi does, and write a symnet model file (atomically). With "
        "EXISTING (a model or config), the config adds to or overrides it.",
    )
    init.add_argument("--seed", type=int, default=0, help="random seed of the initialisation (default 0)")
    init.add_argument("--force", action="store_true", help=FORCE_HELP)
    init.add_argument("paths", nargs="+", metavar="[EXISTING] CONFIG OUT")
    init.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Build CONFIG's network (on EXISTING's) and save it to OUT."""
    from ...loading import load_network, read_config
    from ...saving.files import save
    from .files import Files, config_files

    paths = args.paths
    if len(paths) not in (2, 3):
        raise UsageError("init takes [EXISTING] CONFIG OUT")
    config, out = paths[-2], paths[-1]
    files = Files().read("EXISTING", paths[:-2]).read("CONFIG", [config])
    files.read("a file CONFIG names", config_files(config))
    files.write("OUT", [out]).check(args.force)
    base = load_network(paths[0]) if len(paths) == 3 else None
    network = read_config(config, seed=args.seed, base=base)
    save(out, network)
    values = network.values
    total = sum(int(np.prod(np.shape(v))) for v in values.values())
    print(f"wrote {out}: {len(values)} parameter arrays, {total} values", file=stdout)
    return 0
