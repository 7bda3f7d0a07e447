"""`symnet train`: a network (a file, or a Python module's attribute) trained with `symnet.train.fit` on the
built-in task or Kaldi tables, written to --out; per-step metrics as JSON lines."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import attrs

from ...base.errors import SymnetError
from .options import (
    ALLOW_PIPES_HELP,
    COMPILE_CACHE_HELP,
    FORCE_HELP,
    UsageError,
    count,
    fraction,
    non_negative_float,
    positive_float,
    widths,
)
from .train_inputs import network_files, network_source, training_data

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The `train` subparser."""
    train = commands.add_parser(
        "train",
        help="train a network (a Kaldi config, a model, or a Python module)",
        description="Train with symnet.train.fit: chunks with the network's context, "
        "one jitted step per minibatch, the output node's objective. The "
        "model is written atomically to --out.",
    )
    train.add_argument(
        "network",
        metavar="CONFIG_OR_MODULE",
        help="a Kaldi config, a symnet model, or module:attribute / file.py:attribute",
    )
    train.add_argument("--data", help="builtin:hmm[:SEQUENCES], the built-in task (default 500 sequences)")
    train.add_argument("--feats", help="features rspecifier, e.g. scp:feats.scp")
    train.add_argument("--targets", help="targets rspecifier (alignments), e.g. ark:ali.ark")
    train.add_argument("--out", required=True, help="the trained model file")
    train.add_argument("--epochs", type=count(0), default=3)
    train.add_argument("--batch-size", type=count(1), default=32)
    train.add_argument(
        "--drop-partial",
        action="store_true",
        help="leave each chunk width's last, short minibatch of an epoch out, as nnet3-merge-egs "
        "--minibatch-size=N discards the egs that do not fill one (default: filled with weight-0 repeats)",
    )
    train.add_argument(
        "--chunk",
        type=widths,
        help="output frames per example (default 20; Kaldi's egs: their frames per eg; with --num-frames: those "
        "sizes); several (300,200,100): a sequence's last chunk is cut to the smallest that holds it",
    )
    train.add_argument(
        "--objective",
        choices=("linear", "xent", "quadratic", "ctc", "chain"),
        help="the training objective (default: the output node's, linear unless the config says quadratic): "
        "linear/xent, cross-entropy of log-softmax outputs and frame labels; quadratic; ctc, CTC with blank 0 "
        "on each chunk's labels with repeats collapsed (with --data builtin:hmm the labels are phones 1..P); "
        "chain, Kaldi's LF-MMI objective: with --topology on phone alignments as Kaldi's recipes train it "
        "(chain-get-supervision's numerators, the phone-LM denominator), else on pdf alignments with symnet's "
        "own graphs (docs/chain.md); the denominator of --den-fst when given",
    )
    train.add_argument(
        "--topology",
        metavar="FILE",
        help="with --objective chain: a Kaldi <Topology> file; the targets are then phone alignments (phone ids "
        ">= 1 per frame, e.g. ali-to-phones --per-frame; with --data builtin:hmm the task's phones 1..P), the "
        "output has a pdf per phone and pdf-class (gmm-init-mono's numbering), the numerators are Kaldi's with "
        "tolerance 5/5 and the default denominator is the phone LM of the training data through the topology",
    )
    train.add_argument(
        "--xent-output",
        metavar="NAME",
        help="with --objective chain: the cross-entropy output trained beside it (Kaldi's output-xent); needs "
        "--xent-regularize",
    )
    train.add_argument(
        "--xent-regularize",
        type=positive_float,
        help="with --objective chain and --xent-output: Kaldi's --chain.xent-regularize (recipes: 0.1)",
    )
    train.add_argument(
        "--leaky-hmm-coefficient",
        type=positive_float,
        help="with --objective chain: Kaldi's --chain.leaky-hmm-coefficient (default 1e-5; recipes: 0.1)",
    )
    train.add_argument(
        "--den-fst",
        metavar="FILE",
        help="with --objective chain: Kaldi's den.fst (chain-make-den-fst) as the denominator graph; default: "
        "symnet's pdf-bigram graph estimated from the training alignments (not Kaldi's phone-LM den.fst)",
    )
    train.add_argument(
        "--frame-subsampling-factor",
        type=count(1),
        default=1,
        help="train the outputs at every k-th frame of each chunk (Kaldi's frame-subsampling-factor; --chunk "
        "must be a multiple of it); alignments of ceil(frames / k) labels are accepted",
    )
    train.add_argument(
        "--precision",
        choices=("float32", "bfloat16", "float16"),
        help="a mixed-precision policy (docs/precision.md): bfloat16 or float16 compute with float32 parameters; "
        "float16 trains with dynamic loss scaling (default: the network's own dtypes)",
    )
    train.add_argument(
        "--lowering",
        choices=("auto", "fused", "plain"),
        default="auto",
        help="how recurrences and spliced products run (symnet.compile's lowering; default auto: fused scans where "
        "every member has a vjp, evenly spaced splices as convolutions)",
    )
    train.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="adam")
    train.add_argument("--lr", type=positive_float, default=2e-3, help="the (initial) learning rate")
    train.add_argument(
        "--schedule",
        choices=("constant", "exponential", "cosine"),
        default="constant",
        help="the learning rate over the run: constant; exponential, Kaldi's decay from --lr to --final-lr "
        "(default lr/10); cosine, a half cosine to --final-lr (default 0)",
    )
    train.add_argument("--final-lr", type=non_negative_float, help="the learning rate at the end of the run")
    train.add_argument("--warmup", type=count(0), default=0, help="steps of linear warm-up to --lr")
    train.add_argument("--clip", type=positive_float, help="clip the gradient's global norm to this")
    train.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=0.0,
        help="decoupled weight decay (adamw's, or before sgd/adam)",
    )
    train.add_argument(
        "--max-param-change",
        type=positive_float,
        help="Kaldi's max-param-change (nnet3-train's, default 2.0): the update's norm over all parameters is at "
        "most this, with Kaldi's training rules (applied when the network's components carry Kaldi options)",
    )
    train.add_argument("--output", default="output", help="the output node to train (default output)")
    train.add_argument(
        "--window-frames",
        type=count(1),
        help="features from an scp are read as training goes, these many frames (default 262144) read and "
        "shuffled together (docs/training.md, 'Corpora larger than memory'); other rspecifiers are read first",
    )
    train.add_argument(
        "--num-frames",
        help="Kaldi's nnet3-get-egs --num-frames (e.g. 150,110,100, the principal size first): cut the utterances of "
        "an scp corpus into chunks as nnet3-get-egs does, on the fly (then --chunk is these sizes)",
    )
    train.add_argument(
        "--num-frames-overlap",
        type=count(0),
        default=0,
        help="Kaldi's --num-frames-overlap, with --num-frames",
    )
    train.add_argument(
        "--on-bad-data",
        choices=("stop", "skip"),
        default="stop",
        help="an utterance of an scp corpus that cannot be read or does not match its targets: stop with an error "
        "naming it (default), or skip it with a warning",
    )
    train.add_argument("--valid-feats", help="validation features rspecifier (with --valid-targets)")
    train.add_argument("--valid-targets", help="validation targets rspecifier (alignments)")
    train.add_argument(
        "--valid-fraction",
        type=fraction,
        help="hold out this fraction of the --feats utterances (the last ones by utterance id) for validation",
    )
    train.add_argument(
        "--metrics",
        metavar="FILE",
        help="append per-step metrics to FILE as JSON lines (step, epoch, loss, accuracy, lr, gradient norm, "
        "frames/s), and "
        "one line per epoch with the validation figures",
    )
    train.add_argument("--seed", type=count(0), default=0)
    train.add_argument(
        "--checkpoint",
        help="checkpoint file: saved every epoch, resumed from if present (only "
        "with the settings it was saved with; locked while training)",
    )
    train.add_argument(
        "--allow-changes",
        metavar="FIELD[,FIELD]",
        help="resume --checkpoint although these settings differ from the run that saved it "
        "(e.g. lr,optimizer; batch_size, chunk, seed, data and drop_partial only at an epoch boundary)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--allow-pipes", action="store_true", help=ALLOW_PIPES_HELP)
    train.add_argument("--force", action="store_true", help=FORCE_HELP)
    train.add_argument("--compile-cache", metavar="DIR|off", default=None, help=COMPILE_CACHE_HELP)
    train.set_defaults(run=run)


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Train the network as the options say and write it to --out."""
    from symnet.train import fit, kaldi_rules, steps_per_epoch

    from ...base.atomic import check_writable
    from ...engine.compile_cache import enable_compile_cache
    from ...saving.files import save
    from ...train.optimizers import OptimizerSettings, make_optimizer
    from .files import Files, rspecifier_files

    chain_only = [
        flag
        for flag, value in (
            ("--den-fst", args.den_fst),
            ("--topology", args.topology),
            ("--xent-output", args.xent_output),
            ("--xent-regularize", args.xent_regularize),
            ("--leaky-hmm-coefficient", args.leaky_hmm_coefficient),
        )
        if value is not None
    ]
    if chain_only and args.objective != "chain":
        raise UsageError(f"{', '.join(chain_only)}: options of the chain objective; they need --objective chain")
    files = Files().read("the network", network_files(args.network))
    for option in ("feats", "targets", "valid_feats", "valid_targets"):
        files.read("--" + option.replace("_", "-"), rspecifier_files(getattr(args, option)))
    files.read("--den-fst", [args.den_fst]).read("--topology", [args.topology])
    files.write("--out", [args.out]).write("--checkpoint", [args.checkpoint]).write("--metrics", [args.metrics])
    files.check(args.force)
    check_writable(args.out)  # a typo in --out or --checkpoint found now, not after the run
    if args.checkpoint:
        check_writable(args.checkpoint)
    enable_compile_cache(args.compile_cache)  # before the first compilation (the network's initialisers)
    source = network_source(args.network, args.seed)
    configured = source.objectives.get("output", "linear")
    objective = configured if args.objective is None else args.objective
    if configured == "quadratic" and objective != "quadratic":
        raise SymnetError(
            f"--objective {objective}: the network's output node has objective=quadratic (target vectors); "
            "give --objective quadratic or change the config"
        )
    train, valid = training_data(args)
    if objective == "chain":  # Kaldi's den.fst, or (None) the phone LM's / symnet's pdf bigram of the alignments
        from symnet.train import Chain

        from ...base.errors import ChainError
        from ...base.safe_read import read_file
        from ...chain import ChainOptions, Topology, read_fst

        options: dict[str, float] = {}
        if args.xent_regularize is not None:
            options["xent_regularize"] = args.xent_regularize
        if args.leaky_hmm_coefficient is not None:
            options["leaky_hmm_coefficient"] = args.leaky_hmm_coefficient
        topology = None
        if args.topology:
            text = read_file(args.topology, 1 << 20, error=ChainError, what="topology file")
            topology = Topology.parse(text.decode("utf-8", "replace"), name=args.topology)
        objective = Chain(
            den=read_fst(args.den_fst) if args.den_fst else None,
            options=ChainOptions(**options),
            xent_output=args.xent_output,
            topology=topology,
        )
    settings = OptimizerSettings(
        args.optimizer, args.lr, args.schedule, args.final_lr, args.warmup, args.clip, args.weight_decay
    )
    total = max(
        args.epochs
        * steps_per_epoch(
            source,
            train,
            batch_size=args.batch_size,
            chunk=args.chunk,
            output=args.output,
            seed=args.seed,
            frame_subsampling_factor=args.frame_subsampling_factor,
            drop_partial=args.drop_partial,
        ),
        1,
    )
    optimizer, learning_rate = make_optimizer(settings, total)
    rules: Any = None
    run: dict[str, Any] = settings.record()
    if args.max_param_change is not None:
        rules = kaldi_rules(source, optimizer=optimizer, max_param_change=args.max_param_change)
        run["max_param_change"] = args.max_param_change
    changes = [c.strip() for c in args.allow_changes.split(",") if c.strip()] if args.allow_changes else []
    with metrics_log(args.metrics, learning_rate) as (on_step, on_epoch):
        result = fit(
            source,
            train,
            optimizer,
            valid=valid,
            epochs=args.epochs,
            batch_size=args.batch_size,
            drop_partial=args.drop_partial,
            chunk=args.chunk,
            objective=objective,
            seed=args.seed,
            checkpoint=args.checkpoint,
            progress=not args.quiet,
            output=args.output,
            on_step=on_step,
            on_epoch=on_epoch,
            run=run,
            allow_changes=changes,
            rules=rules,
            frame_subsampling_factor=args.frame_subsampling_factor,
            precision=args.precision,
            lowering=args.lowering,
        )
    save(args.out, result.network.replace(objectives=source.objectives))
    last = result.history[-1] if result.history else None
    if last is not None:
        summary = f"train loss {last.train_loss:.4f} accuracy {last.train_accuracy:.4f}"
        if last.valid_accuracy is not None:
            summary += f", valid loss {last.valid_loss:.4f} accuracy {last.valid_accuracy:.4f}"
        print(f"epoch {last.epoch}: {summary}", file=stdout)
    print(f"wrote {args.out}", file=stdout)
    return 0


@contextlib.contextmanager
def metrics_log(path: str | None, learning_rate: Callable[[int], float]) -> Iterator[tuple[Any, Any]]:
    """`fit`'s (on_step, on_epoch) appending JSON lines to `path` (None, None without a path)."""
    if path is None:
        yield None, None
        return
    import json

    with open(path, "a", encoding="utf-8") as f:

        def write(record: dict[str, Any]) -> None:
            f.write(json.dumps(record) + "\n")
            f.flush()

        def on_step(s: Any) -> None:
            write(
                {
                    "kind": "step",
                    "step": s.step,
                    "epoch": s.epoch,
                    "loss": s.loss,
                    "accuracy": s.accuracy,
                    "lr": learning_rate(s.step - 1),
                    "grad_norm": s.grad_norm,
                    "frames_per_second": s.frames / max(s.seconds, 1e-9),
                }
            )

        def on_epoch(e: Any) -> None:
            write({"kind": "epoch", **{k: v for k, v in attrs.asdict(e).items()}})

        yield on_step, on_epoch
