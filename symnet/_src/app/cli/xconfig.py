"""`symnet xconfig`: steps/nnet3/xconfig_to_configs.py, an xconfig expanded to final.config (or a config
folder), the files its layers write kept inside the output folder."""

from __future__ import annotations

import argparse
import io
import os
import warnings
from typing import Any, TextIO

from ...base.errors import SymnetError
from .options import FORCE_HELP, UsageError

__all__ = ["XCONFIG_BYTES", "add_parser", "run"]

#: The largest xconfig file `symnet xconfig` reads (Kaldi's recipes write a few kilobytes).
XCONFIG_BYTES = 1 << 24


def add_parser(commands: Any) -> None:
    """The `xconfig` subparser."""
    xconfig = commands.add_parser(
        "xconfig",
        help="expand a Kaldi xconfig to an nnet3 config (xconfig_to_configs.py)",
        description="Expand the layers of a Kaldi xconfig as steps/nnet3/xconfig_to_configs.py does and check the "
        "network builds. Prints final.config, or writes it to -o; --config-dir writes "
        "init.config (if any), ref.config, final.config, xconfig.expanded.1 and .2 and the matrices "
        "the layers write (idct-layer). A file a layer writes (an idct-layer's affine-transform-file, a path "
        "from the working folder as final.config reads it) is written with them only if it lies inside the "
        "output folder (DIR, or the folder of -o's file), with no '..' and no symbolic link on the way, else the "
        "xconfig is refused naming the option and its line; every file written is listed. The files are "
        "written as a set: all old or all new, or the error says which changed.",
    )
    xconfig.add_argument(
        "-o",
        "--output",
        metavar="FINAL_CONFIG",
        help="write final.config here, and beside it the matrices the layers write (each listed as written)",
    )
    xconfig.add_argument("--config-dir", metavar="DIR", help="write every config file into DIR")
    xconfig.add_argument(
        "--existing-model",
        metavar="MODEL",
        help="a model (or config) whose nodes the xconfig's layers may take as input, as in Kaldi's transfer "
        "recipes; the configs then hold the new layers only (join them with symnet init MODEL final.config OUT)",
    )
    xconfig.add_argument("--force", action="store_true", help=FORCE_HELP)
    xconfig.add_argument("xconfig", metavar="XCONFIG")
    xconfig.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Expand XCONFIG, check its networks build, and print or write the configs (and the files layers write)."""
    from ...base.atomic import atomic_write_all
    from ...base.safe_read import read_file
    from ...kaldi.text.xconfig import read_xconfig
    from ...kaldi.text.xconfig.layers import node_dims
    from ...loading import load_network
    from .files import Files

    if args.output and args.config_dir:
        raise UsageError("give -o or --config-dir, not both")
    files = Files().read("XCONFIG", [args.xconfig]).read("--existing-model", [args.existing_model])
    base = load_network(args.existing_model) if args.existing_model else None
    existing = node_dims(base) if base is not None else {}
    text = read_file(args.xconfig, XCONFIG_BYTES, error=SymnetError, what="xconfig").decode("utf-8", errors="replace")
    xconfig = read_xconfig(io.StringIO(text), file=args.xconfig, existing=existing)
    # The checks xconfig_to_configs.py makes with nnet3-init of ref.config (random matrices where final.config reads
    # files a later recipe step writes, such as lda.mat) and init.config: errors name the xconfig line.
    # config_dir_files makes them (ref.config's network gives `vars`) before anything is written.
    if args.config_dir:
        folder = args.config_dir
        contents = xconfig.config_dir_files(folder, text, base)  # with the files the layers write
        named = xconfig.layer_files(folder)
    else:
        xconfig.check_contexts(base)
        final = xconfig.config_text("final")
        assert final is not None  # only init.config can be missing
        if not args.output:
            stdout.write(final)
            for unwritten in xconfig.files_named():  # final.config names them; standard output holds one file
                warnings.warn(f"the config names {unwritten}, written only with -o or --config-dir", stacklevel=1)
            return 0
        # the files the layers write (an idct-layer's matrix), at the paths their options give inside the folder
        folder = os.path.dirname(args.output) or "."
        named = xconfig.layer_files(folder, taken=[args.output])
        contents = {args.output: final.encode("utf-8")} | {path: file.data for path, file in named.items()}
    for path in contents:
        files.write(named[path].what if path in named else ("--config-dir" if args.config_dir else "-o"), [path])
    files.check(args.force)
    atomic_write_all(contents, inside={path: folder for path in named})
    for path in contents:
        print(f"wrote {path}" + (f" ({named[path].what})" if path in named else ""), file=stdout)
    return 0
