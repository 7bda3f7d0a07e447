"""`symnet compute`: nnet3-compute, the network's `output` for every utterance of a features table, written
to a matrix archive by `symnet.kaldi.compute_table`; this module reads the options and the model."""

from __future__ import annotations

import argparse
import warnings
from typing import Any, TextIO

from ...base.errors import SymnetError
from .options import ALLOW_PIPES_HELP, COMPILE_CACHE_HELP, FORCE_HELP, FRAMES, count, kaldi_bool

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `compute` subparser."""
    compute = commands.add_parser(
        "compute",
        help="run a network over Kaldi feature archives (nnet3-compute)",
        description="What nnet3-compute does: for every utterance of FEATS_RSPECIFIER the network's 'output' "
        "(test mode, chunks with clamped padding; utterances whole where the network is local in time, "
        "which gives the same frames), written to MATRIX_WSPECIFIER through kaldiio "
        "(ark:, ark,t:, scp:, ark,scp:), atomically. As in Kaldi, an utterance without an i-vector "
        "(--ivectors/--online-ivectors) or without frames is skipped with a warning; the status is 1 "
        "if none was computed. Features of the wrong dim are an error.",
    )
    compute.add_argument("--frames-per-chunk", type=count(1, FRAMES), default=50)
    compute.add_argument("--extra-left-context", type=count(0, FRAMES), default=0)
    compute.add_argument("--extra-right-context", type=count(0, FRAMES), default=0)
    compute.add_argument("--extra-left-context-initial", type=count(-1, FRAMES), default=-1)
    compute.add_argument("--extra-right-context-final", type=count(-1, FRAMES), default=-1)
    compute.add_argument("--frame-subsampling-factor", type=count(1, FRAMES), default=1)
    compute.add_argument("--acoustic-scale", type=float, default=1.0)
    compute.add_argument("--apply-exp", type=kaldi_bool, default=False, metavar="true|false")
    compute.add_argument(
        "--use-priors",
        type=kaldi_bool,
        default=False,
        metavar="true|false",
        help="subtract the log-priors of an acoustic model",
    )
    compute.add_argument("--ivectors", metavar="RSPECIFIER", help="one i-vector per utterance")
    compute.add_argument("--online-ivectors", metavar="RSPECIFIER", help="i-vectors every --online-ivector-period")
    compute.add_argument("--online-ivector-period", type=count(0, FRAMES), default=0)
    compute.add_argument(
        "--use-gpu",
        default="no",
        metavar="yes|no|optional|wait",
        help="accepted for Kaldi compatibility and ignored (JAX picks the device)",
    )
    compute.add_argument("--allow-pipes", action="store_true", help=ALLOW_PIPES_HELP)
    compute.add_argument("--force", action="store_true", help=FORCE_HELP)
    compute.add_argument(
        "--compile-cache",
        metavar="DIR|off",
        default=None,
        help=COMPILE_CACHE_HELP,
    )
    compute.add_argument("model", metavar="MODEL")
    compute.add_argument("feats_rspecifier", metavar="FEATS_RSPECIFIER")
    compute.add_argument("matrix_wspecifier", metavar="MATRIX_WSPECIFIER")
    compute.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Compute the table with the model (its priors with --use-priors) and say what was done."""
    from ...compute_table import compute_table
    from ...engine.compile_cache import enable_compile_cache
    from ...kaldi.compute.ark_writer import writes_to_stdout
    from ...kaldi.compute.nnet3_compute import ComputeOptions
    from ...kaldi.models.model import output_dims
    from ...loading import load_model
    from .files import Files, rspecifier_files, wspecifier_files

    enable_compile_cache(args.compile_cache)  # before the first compilation (the model's initialisers)
    if args.use_gpu != "no":
        warnings.warn(f"--use-gpu={args.use_gpu} is ignored: symnet runs on JAX's default device", stacklevel=2)
    model = load_model(args.model)
    priors = None
    if args.use_priors:
        if not model.is_am:
            raise SymnetError(
                f"--use-priors=true needs an acoustic model (a .mdl with priors, nnet3-am-init); "
                f"{args.model} is not one"
            )
        if model.priors is None or len(model.priors) == 0:
            warnings.warn(f"{args.model} has no priors; --use-priors has no effect (as in Kaldi)", stacklevel=2)
        else:
            priors = model.priors
            dim = output_dims(model.network).get("output")
            if dim is not None and dim != len(priors):
                raise SymnetError(f"the priors of {args.model} have dim {len(priors)}, but the output has dim {dim}")
    options = ComputeOptions(
        frames_per_chunk=args.frames_per_chunk,
        extra_left_context=args.extra_left_context,
        extra_right_context=args.extra_right_context,
        extra_left_context_initial=args.extra_left_context_initial,
        extra_right_context_final=args.extra_right_context_final,
        frame_subsampling_factor=args.frame_subsampling_factor,
        acoustic_scale=args.acoustic_scale,
        apply_exp=args.apply_exp,
    )
    files = Files().read("the model", [args.model]).read("the features", rspecifier_files(args.feats_rspecifier))
    files.read("--ivectors", rspecifier_files(args.ivectors))
    files.read("--online-ivectors", rspecifier_files(args.online_ivectors))
    files.write("MATRIX_WSPECIFIER", wspecifier_files(args.matrix_wspecifier)).check(args.force)
    done, failed = compute_table(
        model.network,
        args.feats_rspecifier,
        args.matrix_wspecifier,
        options,
        priors=priors,
        ivectors=args.ivectors,
        online_ivectors=args.online_ivectors,
        online_ivector_period=args.online_ivector_period,
        allow_pipes=args.allow_pipes,
    )
    if not writes_to_stdout(args.matrix_wspecifier):
        print(f"done {done} utterances, failed for {failed}; wrote {args.matrix_wspecifier}", file=stdout)
    return 0
