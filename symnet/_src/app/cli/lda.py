"""`symnet lda`: nnet3-acc-lda-stats (or nnet3-chain-acc-lda-stats) and nnet-get-feature-transform, the
LDA-like input transform of a recipe's fixed-affine-layer (lda.mat)."""

from __future__ import annotations

import argparse
import io
from collections.abc import Mapping
from typing import Any, TextIO

from ...base.errors import SymnetError
from .options import ALLOW_PIPES_HELP, FORCE_HELP, FRAMES, UsageError, count, kaldi_bool
from .xconfig import XCONFIG_BYTES

__all__ = ["add_parser", "run"]

#: Options of Kaldi's LDA programs that `symnet lda` refuses, and why.
LDA_UNSUPPORTED = {
    "--write-cholesky": "symnet lda writes the transform (and --write-stats), not the within-class Cholesky factor",
    "--write-within-covar": "symnet lda writes the transform (and --write-stats), not the within-class covariance",
    "--frame-subsampling-factor": "symnet lda takes every frame of the features, as nnet3-get-egs's egs without "
    "subsampling hold them; for chain recipes' nnet3-chain-acc-lda-stats give --chain-egs (the egs hold their "
    "subsampled frames)",
}
#: `symnet lda` options that apply to features and targets, not to --chain-egs.
FEATURES_ONLY = (
    "--posteriors",
    "--alignments",
    "--ivectors",
    "--online-ivectors",
    "--online-ivector-period",
    "--frames-per-chunk",
    "--targets-length-tolerance",
    "--length-tolerance",
)


def add_parser(commands: Any) -> None:
    """The `lda` subparser."""
    lda = commands.add_parser(
        "lda",
        help="estimate a recipe's LDA-like input transform, lda.mat (nnet3-acc-lda-stats, nnet-get-feature-transform)",
        description="What nnet3-acc-lda-stats and nnet-get-feature-transform do in Kaldi's recipes: run NETWORK "
        "(an xconfig, whose init.config part is used; init.config; or a model whose 'output' is the LDA's input) "
        "over every frame of the features, accumulate LDA statistics with the targets' pdfs as classes, and write "
        "the scaled LDA transform to LDA_MAT (atomically; Kaldi's matrix format, [dim, input dim + 1]). The numbers "
        "are Kaldi's: see docs/kaldi.md. As nnet3-get-egs does, an utterance without targets or i-vectors, or "
        "whose targets are more than --targets-length-tolerance frames off, is skipped with a warning.",
    )
    lda.add_argument(
        "--chain-egs",
        action="store_true",
        help="FEATS_RSPECIFIER is chain egs (cegs.*.ark): nnet3-chain-acc-lda-stats, the network computed at each "
        "eg's supervised frames from its inputs, the classes the posteriors of its supervision FST",
    )
    lda.add_argument("--posteriors", metavar="RSPECIFIER", help="targets: pdf posteriors (ali-to-post's output)")
    lda.add_argument("--alignments", metavar="RSPECIFIER", help="targets: pdf alignments (ali-to-pdf's output)")
    lda.add_argument("--ivectors", metavar="RSPECIFIER", help="one i-vector per utterance")
    lda.add_argument("--online-ivectors", metavar="RSPECIFIER", help="i-vectors every --online-ivector-period frames")
    lda.add_argument(
        "--online-ivector-period", type=count(0, FRAMES), default=0, help="frames between rows of --online-ivectors"
    )
    lda.add_argument(
        "--rand-prune",
        type=float,
        default=0.0,
        help="nnet3-acc-lda-stats's randomized pruning of weights below it (default 0: none; recipes pass 4.0), "
        "with the draws of glibc's rand() from seed 1",
    )
    lda.add_argument("--dim", type=int, default=-1, help="the output dim (default -1: the input dim)")
    lda.add_argument(
        "--within-class-factor",
        type=float,
        default=0.001,
        help="scale of the directions with little between-class variance (default 0.001; 1.0: plain LDA)",
    )
    lda.add_argument(
        "--max-singular-value",
        type=float,
        default=5.0,
        help="singular values of the transform above it are capped at it (default 5.0; <= 0: no cap)",
    )
    lda.add_argument(
        "--remove-offset",
        type=kaldi_bool,
        default=True,
        metavar="true|false",
        help="add the column that makes the output's mean zero (default true)",
    )
    lda.add_argument(
        "--binary", type=kaldi_bool, default=True, metavar="true|false", help="write in binary mode (default true)"
    )
    lda.add_argument(
        "--write-stats",
        metavar="FILE",
        help="also write the statistics as nnet3-acc-lda-stats writes them (for sum-lda-accs, "
        "nnet-get-feature-transform)",
    )
    lda.add_argument(
        "--targets-length-tolerance",
        type=count(0),
        default=None,
        help="frames by which the targets may be shorter or longer than the features (nnet3-get-egs's; default 2)",
    )
    lda.add_argument(
        "--length-tolerance",
        type=count(0),
        default=None,
        help="frames by which the online i-vectors may fall short or run over (nnet3-get-egs's; default 100)",
    )
    lda.add_argument(
        "--frames-per-chunk",
        type=count(1, FRAMES),
        default=None,
        help="frames computed together, as in `symnet compute` (default 50); online i-vectors are taken per chunk",
    )
    lda.add_argument("--allow-pipes", action="store_true", help=ALLOW_PIPES_HELP)
    lda.add_argument("--force", action="store_true", help=FORCE_HELP)
    for option in LDA_UNSUPPORTED:
        lda.add_argument(option, help=argparse.SUPPRESS)
    lda.add_argument("network", metavar="NETWORK")
    lda.add_argument("feats_rspecifier", metavar="FEATS_RSPECIFIER")
    lda.add_argument("lda_mat", metavar="LDA_MAT")
    lda.set_defaults(run=run)


def _lda_network(path: str) -> Any:
    """The network whose `output` is the LDA's input: an xconfig's init.config, or a config or model file."""
    from ...base.safe_read import read_file, regular_file
    from ...kaldi.text.xconfig import is_xconfig, read_xconfig
    from ...loading import load_network

    regular_file(path, SymnetError, "network")
    if not is_xconfig(path):
        return load_network(path)
    text = read_file(path, XCONFIG_BYTES, error=SymnetError, what="xconfig").decode("utf-8", errors="replace")
    xconfig = read_xconfig(io.StringIO(text), file=path)
    if not xconfig.has("init"):
        raise SymnetError(
            f"{path} has no LDA-like layer, so no init.config (the network a fixed-affine-layer's "
            "affine-transform-file is estimated on)"
        )
    return xconfig.network(which="init")


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Accumulate the LDA statistics over the features (or chain egs) and write the transform."""
    from ...base.atomic import check_writable
    from ...kaldi.compute.lda import LdaOptions, accumulate_lda_stats
    from ...kaldi_io.tables import iter_table, read_posteriors, read_table
    from .files import Files, rspecifier_files

    for option in LDA_UNSUPPORTED:
        if getattr(args, option[2:].replace("-", "_")) is not None:
            raise UsageError(f"{option} is not supported: {LDA_UNSUPPORTED[option]}")
    if args.chain_egs:
        given = [o for o in FEATURES_ONLY if getattr(args, o[2:].replace("-", "_")) not in (None, False)]
        if given:
            raise UsageError(
                f"{', '.join(given)}: with --chain-egs the egs hold the inputs (i-vectors included) and the "
                "supervision that gives the classes"
            )
    elif (args.posteriors is None) == (args.alignments is None):
        raise UsageError("give the targets: --posteriors RSPECIFIER or --alignments RSPECIFIER (one of them)")
    if args.ivectors and args.online_ivectors:
        raise UsageError("give --ivectors or --online-ivectors, not both")
    if args.online_ivectors and args.online_ivector_period <= 0:
        raise UsageError("--online-ivectors needs --online-ivector-period > 0")
    options = LdaOptions(
        dim=args.dim,
        within_class_factor=args.within_class_factor,
        max_singular_value=args.max_singular_value,
        remove_offset=args.remove_offset,
    )
    files = Files().read("NETWORK", [args.network]).read("FEATS_RSPECIFIER", rspecifier_files(args.feats_rspecifier))
    for option in ("posteriors", "alignments", "ivectors", "online_ivectors"):
        files.read("--" + option.replace("_", "-"), rspecifier_files(getattr(args, option)))
    files.write("LDA_MAT", [args.lda_mat]).write("--write-stats", [args.write_stats]).check(args.force)
    check_writable(args.lda_mat)  # a typo in an output path found now, not after the pass over the data
    if args.write_stats:
        check_writable(args.write_stats)
    network = _lda_network(args.network)
    pipes = args.allow_pipes
    if args.chain_egs:
        from ...kaldi.compute.chain_lda import accumulate_chain_lda_stats
        from ...kaldi_io.egs import read_cegs

        accumulation = accumulate_chain_lda_stats(network, read_cegs(args.feats_rspecifier), rand_prune=args.rand_prune)
        return _write_lda(args, accumulation, options, stdout)
    targets: Mapping[str, Any]
    if args.posteriors is not None:
        targets = read_posteriors(args.posteriors, "posteriors", allow_pipes=pipes)
    else:
        targets = read_table(args.alignments, "alignments", allow_pipes=pipes)
    accumulation = accumulate_lda_stats(
        network,
        iter_table(args.feats_rspecifier, "features", allow_pipes=pipes),
        targets,
        ivectors=read_table(args.ivectors, "i-vectors", allow_pipes=pipes) if args.ivectors else None,
        online_ivectors=(
            read_table(args.online_ivectors, "online i-vectors", allow_pipes=pipes) if args.online_ivectors else None
        ),
        online_ivector_period=args.online_ivector_period,
        rand_prune=args.rand_prune,
        targets_length_tolerance=2 if args.targets_length_tolerance is None else args.targets_length_tolerance,
        length_tolerance=100 if args.length_tolerance is None else args.length_tolerance,
        frames_per_chunk=50 if args.frames_per_chunk is None else args.frames_per_chunk,
    )
    return _write_lda(args, accumulation, options, stdout)


def _write_lda(args: argparse.Namespace, accumulation: Any, options: Any, stdout: TextIO) -> int:
    """`symnet lda`'s outputs: the transform (and --write-stats), written as one set, and what was done."""
    from ...base.atomic import atomic_write_all
    from ...kaldi_io.writer import Writer

    stats = accumulation.stats
    result = stats.rounded().transform(options)  # Kaldi estimates from its stats file: the same float round trip
    writer = Writer(args.binary)
    if args.binary:
        writer.raw(b"\0B")
    writer.matrix(result.matrix)
    files = {args.lda_mat: writer.getvalue()}
    if args.write_stats:
        files[args.write_stats] = stats.to_kaldi(args.binary)
    atomic_write_all(files)
    what = "chain egs" if args.chain_egs else "utterances"
    print(
        f"accumulated LDA statistics from {accumulation.utterances} {what} ({len(accumulation.skipped)} "
        f"skipped): soft frame count {stats.count:g}, dim {stats.dim}, {int((stats.counts != 0).sum())} classes "
        "with data",
        file=stdout,
    )
    if args.write_stats:
        print(f"wrote {args.write_stats}", file=stdout)
    rows, cols = result.matrix.shape
    capped = f", {result.capped} singular values capped at {args.max_singular_value:g}" if result.capped else ""
    smoothed = f", {result.smoothed:g} added to the within-class diagonal" if result.smoothed else ""
    print(f"wrote {args.lda_mat}: {rows} x {cols}{capped}{smoothed}", file=stdout)
    return 0
