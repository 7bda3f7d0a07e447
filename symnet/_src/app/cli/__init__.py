"""The `symnet` command line, in the spirit of Kaldi's nnet3 tools.

    symnet info MODEL_OR_CONFIG          what nnet3-info prints: dims, context, parameters, nodes, components
    symnet init [--seed N] [EXISTING] CONFIG OUT
                                         a model from a Kaldi config (nnet3-init); with EXISTING, the config
                                         adds to or overrides that model
    symnet train CONFIG_OR_MODULE (--data builtin:hmm | --feats RSPEC --targets RSPEC) --out MODEL
                                         train with symnet.train.fit and write the model
    symnet copy [--binary=true|false] [--raw=true|false] IN OUT
                                         a Kaldi model file (nnet3-copy; nnet3-am-copy for acoustic models)
    symnet compute [options] MODEL FEATS_RSPECIFIER MATRIX_WSPECIFIER
                                         nnet3-compute: the network's 'output' for every utterance;
                                         compiled programs are kept for the next run (--compile-cache)
    symnet xconfig [-o FINAL_CONFIG | --config-dir DIR] [--existing-model MODEL] XCONFIG
                                         steps/nnet3/xconfig_to_configs.py: an xconfig expanded to final.config
                                         (and the matrices its layers write, inside the output folder only)
    symnet lda [options] (--posteriors RSPEC | --alignments RSPEC) NETWORK FEATS_RSPECIFIER LDA_MAT
                                         nnet3-acc-lda-stats + nnet-get-feature-transform: the LDA-like input
                                         transform of a recipe's fixed-affine-layer (lda.mat)
    symnet lda [options] --chain-egs NETWORK CEGS_RSPECIFIER LDA_MAT
                                         nnet3-chain-acc-lda-stats + nnet-get-feature-transform: the same from
                                         chain egs, the supervision's posteriors as the classes
    symnet export --frames T|t [--chunk N] [--batch b|N] [--mode same|valid] [--output NAME] MODEL OUT
                                         the network's output as a jax.export program (OUT and OUT.json) that
                                         runs without symnet: jax, jaxlib, flatbuffers

MODEL_OR_CONFIG is a Kaldi nnet3 model file (text or binary, raw nnet or
acoustic model, see `symnet._src.kaldi.models.model_reader`), a symnet network file
(`symnet init`'s and `symnet train`'s output, see `symnet.save`), a Kaldi nnet3
config file or a Kaldi xconfig file (told apart by its first bytes: `symnet.load_network`);
so is CONFIG. OUT is written atomically: on any error it is left as it was
(or absent). Kaldi's boolean options take `--name=true|false`; a bare
`--name` means true. A command refuses an output that is one of its input files (the same
file through any link), unless --force, and two outputs that are one file.

Errors in the user's input print one line, the symnet error text, to stderr
and exit with status 1; usage errors exit with status 2 (argparse's rule).

Each command is a module of this package (`info`, `init`, `train`, `copy`, `compute`, `export`, `xconfig`,
`lda`) with its subparser (`add_parser`) and its `run`; `parser` joins them, `options` holds what their
parsers share and `files` the check that no output replaces an input. The work is the library's: reading
any network file (`symnet._src.loading`), computing a table (`symnet._src.compute_table`), training, ...
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from ...base.errors import SymnetError
from ...base.host_memory import tune_host_memory
from .options import UsageError, kaldi_flags
from .parser import PROG, build_parser

__all__ = ["PROG", "main"]


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (0, or 1 after printing an error).

    It first keeps freed host memory (`symnet.tune_host_memory`), as a process of its own may.
    """
    tune_host_memory()
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = build_parser()
    args = parser.parse_args(kaldi_flags(sys.argv[1:] if argv is None else argv))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = args.run(args, stdout)
        for warning in caught:
            print(f"{PROG} {args.command}: warning: {str(warning.message).splitlines()[0]}", file=stderr)
        return status
    except UsageError as e:
        parser.print_usage(stderr)
        print(f"{PROG} {args.command}: error: {e}", file=stderr)
        return 2
    except SymnetError as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{PROG} {args.command}: {message}", file=stderr)
        return 1
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        print(f"{PROG} {args.command}: {e.strerror or e}{where}", file=stderr)
        return 1
