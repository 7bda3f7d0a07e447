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
acoustic model, see `symnet._src.kaldi.model_reader`), a symnet network file
(`symnet init`'s and `symnet train`'s output, see `symnet.save`), a Kaldi nnet3
config file or a Kaldi xconfig file (told apart by its first line, see
`symnet._src.kaldi.xconfig`); so is CONFIG. OUT is written atomically: on any error it is left as it was
(or absent). Kaldi's boolean options take `--name=true|false`; a bare
`--name` means true. A command refuses an output that is one of its input files (the same
file through any link), unless --force, and two outputs that are one file.

Errors in the user's input print one line, the symnet error text, to stderr
and exit with status 1; usage errors exit with status 2 (argparse's rule).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import struct
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TextIO

import attrs
import numpy as np

from .core.index import INDEX_LIMIT
from .errors import SymnetError
from .host_memory import tune_host_memory
from .text import is_digits

__all__ = ["main", "PROG", "warn_non_finite", "XCONFIG_BYTES"]

PROG = "symnet"


def _load_model(path: str, seed: int = 0) -> Any:
    """A KaldiModel from a Kaldi model file (text or binary, raw or acoustic), a symnet network file or a config."""
    from .kaldi.model import KaldiModel
    from .kaldi.model_reader import is_kaldi_model, read_model
    from .safe_read import regular_file

    regular_file(path, SymnetError, "model or config")  # a device or FIFO would be read until memory runs out
    if is_kaldi_model(path):
        return read_model(path)
    if zipfile.is_zipfile(path):
        from .network import Network
        from .saving.files import load  # only here: `symnet compute` on a Kaldi model never needs it

        saved = load(path)
        if not isinstance(saved, Network):
            raise SymnetError(f"{path} is a symnet file of a {type(saved).__name__}, not of one network")
        return KaldiModel(saved)
    return KaldiModel(_read_config(path, seed))


def _read_config(path: str, seed: int = 0, base: Any = None) -> Any:
    """The Network of a Kaldi nnet3 config or xconfig file (an xconfig may refer to `base`'s nodes)."""
    from .kaldi.build import read_network
    from .kaldi.xconfig import is_xconfig, read_xconfig
    from .kaldi.xconfig.layers import node_dims
    from .safe_read import regular_file

    regular_file(path, SymnetError, "config")
    if is_xconfig(path):
        existing = node_dims(base) if base is not None else {}
        return read_xconfig(path, existing=existing).network(seed=seed, base=base)
    return read_network(path, seed=seed, base=base)


def _load(path: str, seed: int = 0) -> Any:
    """A Network from a Kaldi model file, a symnet network file or a config file."""
    return _load_model(path, seed).network


def _structure(path: str) -> tuple[Any, Mapping[str, str]]:
    """The structure and objectives of what `_load` reads, without a Network (no parameter drawn, no jax)."""
    from .kaldi.build import read_structure
    from .kaldi.model_reader import is_kaldi_model, read_model_structure
    from .kaldi.xconfig import is_xconfig, read_xconfig
    from .safe_read import regular_file
    from .saving.network_structure import read_network_structure

    regular_file(path, SymnetError, "model or config")
    if is_kaldi_model(path):
        return read_model_structure(path)
    if zipfile.is_zipfile(path):
        return read_network_structure(path)  # a symnet file
    if is_xconfig(path):
        return read_xconfig(path).structure()
    return read_structure(path)  # a config, or the config reader's error naming the line at fault


def _info(args: argparse.Namespace, stdout: TextIO) -> int:
    from .errors import ConfigWriteError
    from .kaldi.info import info_lines

    structure, objectives = _structure(args.model)
    try:
        lines = info_lines(structure, objectives)
    except ConfigWriteError:  # a network from Python that Kaldi's config cannot say: symnet's own summary
        from .engine.summary import summarize

        lines = str(summarize(dict(structure.outputs))).splitlines()
    for line in lines:
        print(line, file=stdout)
    return 0


def _init(args: argparse.Namespace, stdout: TextIO) -> int:
    from .cli_files import Files, config_files
    from .saving.files import save

    paths = args.paths
    if len(paths) not in (2, 3):
        raise _UsageError("init takes [EXISTING] CONFIG OUT")
    config, out = paths[-2], paths[-1]
    files = Files().read("EXISTING", paths[:-2]).read("CONFIG", [config])
    files.read("a file CONFIG names", config_files(config))
    files.write("OUT", [out]).check(args.force)
    base = _load(paths[0]) if len(paths) == 3 else None
    network = _read_config(config, seed=args.seed, base=base)
    save(out, network)
    values = network.values
    count = sum(int(np.prod(np.shape(v))) for v in values.values())
    print(f"wrote {out}: {len(values)} parameter arrays, {count} values", file=stdout)
    return 0


def _network_files(spec: str) -> list[str]:
    """The files `_network_source` reads for `spec`: the model, or the config and the files it names, or the
    `file.py` of `file.py:attr`."""
    from .cli_files import config_files

    if ":" not in spec or os.path.exists(spec):
        return [spec, *config_files(spec)]
    module = spec.rsplit(":", 1)[0]
    return [module] if module.endswith(".py") else []


def _network_source(spec: str, seed: int) -> Any:
    """A Network from a model or config file, or from `module:attribute` / `file.py:attribute`.

    The attribute is a Network, or a function of no arguments returning one.
    """
    import importlib
    import importlib.util
    import os

    from .network import Network

    if ":" not in spec or os.path.exists(spec):
        return _load(spec, seed)
    module_name, attribute = spec.rsplit(":", 1)
    if module_name.endswith(".py"):  # imported as its file name says, the module name its layer classes are saved by
        stem = os.path.splitext(os.path.basename(module_name))[0]
        loader = importlib.util.spec_from_file_location(stem, module_name)
        if loader is None or loader.loader is None or not os.path.exists(module_name):
            raise SymnetError(f"no such file: {module_name}")
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise SymnetError(f"cannot import module {module_name!r} (from {spec!r}): {e}") from None
    value = getattr(module, attribute, None)
    if value is None:
        raise SymnetError(f"{module_name} has no attribute {attribute!r}")
    if callable(value) and not isinstance(value, Network):
        value = value()
    if not isinstance(value, Network):
        raise SymnetError(f"{spec} is a {type(value).__name__}, not a Network")
    return value


def _training_data(args: argparse.Namespace) -> tuple[Any, Any]:
    """(train, valid) from `--data builtin:hmm[:SEQUENCES]` or Kaldi archives."""
    if args.data:
        parts = args.data.split(":")
        if parts[:2] != ["builtin", "hmm"] or len(parts) > 3 or (len(parts) == 3 and not is_digits(parts[2])):
            raise SymnetError(f"unknown --data {args.data!r}; the built-in task is builtin:hmm[:SEQUENCES]")
        from .datasets import HmmTask

        given = [o for o in ("valid_feats", "valid_targets", "valid_fraction") if getattr(args, o, None)]
        if given:  # the built-in task makes its own validation data: these would be ignored
            options = ", ".join("--" + o.replace("_", "-") for o in given)
            raise _UsageError(f"{options}: validation data for --feats; --data builtin:hmm makes its own")
        sequences = int(parts[2]) if len(parts) == 3 else 500
        task = HmmTask.create(seed=args.seed)
        train = task.sample(sequences, seed=args.seed + 1)
        valid = task.sample(max(sequences // 5, 1), seed=args.seed + 2)
        phones = getattr(args, "objective", None) == "ctc" or getattr(args, "topology", None)
        if phones:  # phone labels 1..P per frame (0 is CTC's blank; a chain topology's phones start at 1)
            return task.phone_dataset(train), task.phone_dataset(valid)
        return train, valid
    if not (args.feats and args.targets):
        raise _UsageError("give --data builtin:hmm, or --feats and --targets")
    from .train.kaldi_data import read_kaldi_data
    from .train.streams import stream_kaldi_data

    factor = getattr(args, "frame_subsampling_factor", 1)
    on_bad_data = getattr(args, "on_bad_data", "stop")
    window = getattr(args, "window_frames", None)
    num_frames, overlap = getattr(args, "num_frames", None), getattr(args, "num_frames_overlap", 0)

    def read(feats: str, targets: str) -> Any:
        if feats.startswith("scp:") or feats.startswith("scp,"):  # read as training goes: memory bounded by a window
            extra = {"window_frames": window} if window else {}
            return stream_kaldi_data(
                feats,
                targets,
                allow_pipes=args.allow_pipes,
                frame_subsampling_factor=factor,
                on_error=on_bad_data,
                num_frames=num_frames,
                num_frames_overlap=overlap,
                **extra,
            )
        streaming = (
            ("--window-frames", window),
            ("--on-bad-data", on_bad_data != "stop"),
            ("--num-frames", num_frames),
            ("--num-frames-overlap", overlap),
        )
        given = [flag for flag, on in streaming if on]
        if given:
            raise _UsageError(f"{given[0]}: for features read as training goes, from an scp (--feats scp:feats.scp)")
        return read_kaldi_data(feats, targets, allow_pipes=args.allow_pipes, frame_subsampling_factor=factor)

    data = read(args.feats, args.targets)
    valid_feats, valid_targets = getattr(args, "valid_feats", None), getattr(args, "valid_targets", None)
    fraction = getattr(args, "valid_fraction", None)
    if bool(valid_feats) != bool(valid_targets):
        raise _UsageError("give --valid-feats and --valid-targets together")
    if valid_feats and fraction:
        raise _UsageError("give --valid-feats/--valid-targets or --valid-fraction, not both")
    if valid_feats and valid_targets:
        return data, read(valid_feats, valid_targets)
    if fraction:
        return data.split(fraction)
    return data, None


@contextlib.contextmanager
def _metrics_log(path: str | None, learning_rate: Callable[[int], float]) -> Iterator[tuple[Any, Any]]:
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


def _train(args: argparse.Namespace, stdout: TextIO) -> int:
    from symnet.train import fit, kaldi_rules, steps_per_epoch

    from .atomic import check_writable
    from .cli_files import Files, rspecifier_files
    from .saving.files import save
    from .train.optimizers import OptimizerSettings, make_optimizer

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
        raise _UsageError(f"{', '.join(chain_only)}: options of the chain objective; they need --objective chain")
    files = Files().read("the network", _network_files(args.network))
    for option in ("feats", "targets", "valid_feats", "valid_targets"):
        files.read("--" + option.replace("_", "-"), rspecifier_files(getattr(args, option)))
    files.read("--den-fst", [args.den_fst]).read("--topology", [args.topology])
    files.write("--out", [args.out]).write("--checkpoint", [args.checkpoint]).write("--metrics", [args.metrics])
    files.check(args.force)
    check_writable(args.out)  # a typo in --out or --checkpoint found now, not after the run
    if args.checkpoint:
        check_writable(args.checkpoint)
    source = _network_source(args.network, args.seed)
    configured = source.objectives.get("output", "linear")
    objective = configured if args.objective is None else args.objective
    if configured == "quadratic" and objective != "quadratic":
        raise SymnetError(
            f"--objective {objective}: the network's output node has objective=quadratic (target vectors); "
            "give --objective quadratic or change the config"
        )
    train, valid = _training_data(args)
    if objective == "chain":  # Kaldi's den.fst, or (None) the phone LM's / symnet's pdf bigram of the alignments
        from symnet.train import Chain

        from .chain import ChainOptions, Topology, read_fst
        from .errors import ChainError
        from .safe_read import read_file

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
    with _metrics_log(args.metrics, learning_rate) as (on_step, on_epoch):
        result = fit(
            source,
            train,
            optimizer,
            valid=valid,
            epochs=args.epochs,
            batch_size=args.batch_size,
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


# ----- copy and compute (nnet3-copy, nnet3-compute) ---------------------------------------------

_KALDI_FLAGS = ("--binary", "--raw", "--apply-exp", "--use-priors", "--remove-offset")


def _kaldi_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "t", "1", "yes"):
        return True
    if value in ("false", "f", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _kaldi_flags(argv: Sequence[str]) -> list[str]:
    """Kaldi's bare boolean flags (`--apply-exp`) as `--apply-exp=true`, so they never take the next word."""
    return [f"{arg}=true" if arg in _KALDI_FLAGS else arg for arg in argv]


def _copy(args: argparse.Namespace, stdout: TextIO) -> int:
    from .cli_files import Files
    from .kaldi.model import format_model, write_model

    Files().read("IN", [args.input]).write("OUT", [args.output]).check(args.force)
    model = _load_model(args.input)
    raw = args.raw or not model.is_am
    if args.output == "-":
        sys.stdout.buffer.write(format_model(model, binary=args.binary, raw=raw))
        sys.stdout.buffer.flush()
        return 0
    write_model(args.output, model, binary=args.binary, raw=raw)
    kind = "raw nnet3" if raw else "acoustic model"
    print(f"wrote {args.output} ({kind}, {'binary' if args.binary else 'text'})", file=stdout)
    return 0


class _ArchiveWriter:
    """A Kaldi wspecifier (`ark:`, `ark,t:`, `ark,scp:A,S`) written as `symnet._src.atomic` writes files: to
    temporary files beside the targets, moved over them by `commit`, removed by `abort` (written through to
    a device or FIFO such as `ark:/dev/null`; `ark:-` streams to stdout)."""

    def __init__(self, spec: str):
        from kaldiio.utils import parse_specifier

        from .atomic import AtomicFile

        try:
            parsed = parse_specifier(spec)
        except ValueError as e:
            raise SymnetError(f"bad wspecifier {spec!r}: {e}") from None
        if parsed["ark"] is None:
            raise SymnetError(f"bad wspecifier {spec!r}: an archive is needed (ark:FILE or ark,scp:FILE,SCP)")
        self.text = bool(parsed["t"])
        self.ark, self.scp = parsed["ark"], parsed["scp"]
        self.stream = self.ark == "-"
        self.written = 0  # bytes of the archive so far: the offsets the scp names
        if self.ark.startswith("|") or self.ark.endswith("|") or (self.scp and self.scp in ("-",)):
            raise SymnetError(f"wspecifier {spec!r}: pipes are not supported; write to a file (or ark:-)")
        self.files: list[AtomicFile] = []
        if self.stream:
            self.fark: Any = sys.stdout.buffer
            self.fscp: Any = None
            return
        try:
            self.files.append(AtomicFile(self.ark, "wb"))
            if self.scp is not None:
                self.files.append(AtomicFile(self.scp, "w"))
        except BaseException:
            self.abort()
            raise
        self.fark = self.files[0].file
        self.fscp = self.files[1].file if self.scp is not None else None

    def write(self, key: str, matrix: np.ndarray) -> None:
        import kaldiio

        value = np.asarray(matrix, dtype=np.float32)
        parts: list[bytes | memoryview]
        if self.text or value.ndim != 2:
            buffer = io.BytesIO()
            kaldiio.save_ark(buffer, {key: value}, text=self.text)
            parts = [buffer.getvalue()]
        else:  # kaldiio's bytes, with the matrix written from its own memory (no copy of a large output)
            rows, cols = value.shape
            header = f"{key} ".encode() + b"\0BFM \x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols)
            parts = [header, np.ascontiguousarray(value, dtype="<f4").data.cast("B")]
        for part in parts:
            self.fark.write(part)
        if self.fscp is not None:
            self.fscp.write(f"{key} {self.ark}:{self.written + len((key + ' ').encode('utf-8'))}\n")
        self.written += sum(len(part) for part in parts)

    def commit(self) -> None:
        if self.stream:
            self.fark.flush()
            return
        for f in self.files:
            f.commit()

    def abort(self) -> None:
        for f in self.files:
            f.abort()


def warn_non_finite(utt: str, what: str, matrix: Any) -> None:
    """Warn (naming the utterance) if `matrix` has NaN or Inf entries: they propagate through the network
    as in Kaldi's arithmetic, so the output is not to be trusted."""
    values = np.asarray(matrix)
    if not np.issubdtype(values.dtype, np.floating):
        return
    with np.errstate(over="ignore", invalid="ignore"):  # a sum that overflows only means: look closer
        if np.isfinite(values.sum()):  # a NaN or Inf anywhere makes the sum non-finite: one pass, no temporary
            return
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        warnings.warn(
            f"utterance {utt}: the {what} have {int(bad.sum())} non-finite values (first {values[row, col]} "
            f"at frame {row}, dim {col})",
            stacklevel=2,
        )


def _compute(args: argparse.Namespace, stdout: TextIO) -> int:
    from .cli_files import Files, rspecifier_files, wspecifier_files
    from .engine.compile_cache import enable_compile_cache
    from .kaldi.model import output_dims
    from .kaldi.nnet3_compute import ComputeOptions, Nnet3Computer
    from .kaldi_io.tables import iter_table, read_table

    enable_compile_cache(args.compile_cache)  # before the first compilation (the model's initialisers)
    if args.use_gpu != "no":
        warnings.warn(f"--use-gpu={args.use_gpu} is ignored: symnet runs on JAX's default device", stacklevel=2)
    model = _load_model(args.model)
    network = model.network
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
    if args.ivectors and args.online_ivectors:
        raise SymnetError("give --ivectors or --online-ivectors, not both")
    if args.online_ivectors and args.online_ivector_period <= 0:
        raise SymnetError("--online-ivectors needs --online-ivector-period > 0")
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
    computer = Nnet3Computer(network, options, priors=priors)
    if priors is not None:
        dim = output_dims(network).get("output")
        if dim is not None and dim != len(priors):
            raise SymnetError(f"the priors of {args.model} have dim {len(priors)}, but the output has dim {dim}")
    input_dim = computer.graph.input_dims.get("input")
    ivectors = read_table(args.ivectors, "i-vectors", allow_pipes=args.allow_pipes) if args.ivectors else None
    online = (
        read_table(args.online_ivectors, "online i-vectors", allow_pipes=args.allow_pipes)
        if args.online_ivectors
        else None
    )
    files = Files().read("the model", [args.model]).read("the features", rspecifier_files(args.feats_rspecifier))
    files.read("--ivectors", rspecifier_files(args.ivectors))
    files.read("--online-ivectors", rspecifier_files(args.online_ivectors))
    files.write("MATRIX_WSPECIFIER", wspecifier_files(args.matrix_wspecifier)).check(args.force)
    writer = _ArchiveWriter(args.matrix_wspecifier)
    job = computer.job(args.online_ivector_period)
    done = failed = 0

    def write(outputs: list[tuple[Any, np.ndarray]]) -> None:
        nonlocal done
        for utt, out in outputs:
            warn_non_finite(utt, "output", out)
            writer.write(utt, out)
            done += 1

    try:
        for utt, feats in iter_table(args.feats_rspecifier, "features", allow_pipes=args.allow_pipes):
            feats = np.asarray(feats)
            if feats.ndim != 2:
                raise SymnetError(f"utterance {utt}: the features are not a matrix (shape {feats.shape})")
            if len(feats) == 0:
                warnings.warn(f"zero-length utterance {utt}: skipped", stacklevel=2)
                failed += 1
                continue
            if input_dim is not None and feats.shape[1] != input_dim:
                raise SymnetError(
                    f"utterance {utt}: the features have dim {feats.shape[1]}, but the network's "
                    f"input has dim {input_dim}"
                )
            extra: dict[str, Any] = {}
            if ivectors is not None:
                if utt not in ivectors:
                    warnings.warn(f"no i-vector for utterance {utt} in {args.ivectors}: skipped", stacklevel=2)
                    failed += 1
                    continue
                extra["ivector"] = np.asarray(ivectors[utt]).reshape(-1)
            if online is not None:
                if utt not in online:
                    warnings.warn(
                        f"no online i-vectors for utterance {utt} in {args.online_ivectors}: skipped", stacklevel=2
                    )
                    failed += 1
                    continue
                extra["online_ivectors"] = np.asarray(online[utt])
            warn_non_finite(utt, "input features", feats)
            write(job.add(utt, feats, **extra))
        write(job.finish())
        if done == 0:
            raise SymnetError(f"no utterance was computed (failed for {failed}); nothing written")
        writer.commit()
    finally:
        writer.abort()
    if not writer.stream:
        print(f"done {done} utterances, failed for {failed}; wrote {args.matrix_wspecifier}", file=stdout)
    return 0


#: The largest xconfig file `symnet xconfig` reads (Kaldi's recipes write a few kilobytes).
XCONFIG_BYTES = 1 << 24


def _export(args: argparse.Namespace, stdout: TextIO) -> int:
    from .cli_files import Files
    from .exporting import export

    batch = int(args.batch) if is_digits(args.batch) else args.batch  # '²' is a name export refuses, not int('²')
    frames = int(args.frames) if is_digits(args.frames) else args.frames
    chunk = {} if args.chunk is None else {"chunk": args.chunk}
    files = Files().read("MODEL", [args.model]).write("OUT", [args.out])
    files.write("OUT.json", [args.out + ".json"]).check(args.force)
    network = _load(args.model)
    export(network, args.out, frames=frames, batch=batch, mode=args.mode, output=args.output, **chunk)
    print(f"wrote {args.out} and {args.out}.json", file=stdout)
    return 0


def _xconfig(args: argparse.Namespace, stdout: TextIO) -> int:
    from .atomic import atomic_write_all
    from .cli_files import Files
    from .kaldi.xconfig import read_xconfig
    from .kaldi.xconfig.layers import node_dims
    from .safe_read import read_file

    if args.output and args.config_dir:
        raise _UsageError("give -o or --config-dir, not both")
    files = Files().read("XCONFIG", [args.xconfig]).read("--existing-model", [args.existing_model])
    base = _load(args.existing_model) if args.existing_model else None
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


#: Options of Kaldi's LDA programs that `symnet lda` refuses, and why.
_LDA_UNSUPPORTED = {
    "--write-cholesky": "symnet lda writes the transform (and --write-stats), not the within-class Cholesky factor",
    "--write-within-covar": "symnet lda writes the transform (and --write-stats), not the within-class covariance",
    "--frame-subsampling-factor": "symnet lda takes every frame of the features, as nnet3-get-egs's egs without "
    "subsampling hold them; for chain recipes' nnet3-chain-acc-lda-stats give --chain-egs (the egs hold their "
    "subsampled frames)",
}
#: `symnet lda` options that apply to features and targets, not to --chain-egs.
_LDA_FEATURES_ONLY = (
    "--posteriors",
    "--alignments",
    "--ivectors",
    "--online-ivectors",
    "--online-ivector-period",
    "--frames-per-chunk",
    "--targets-length-tolerance",
    "--length-tolerance",
)


def _lda_network(path: str) -> Any:
    """The network whose `output` is the LDA's input: an xconfig's init.config, or a config or model file."""
    from .kaldi.xconfig import is_xconfig, read_xconfig
    from .safe_read import read_file, regular_file

    regular_file(path, SymnetError, "network")
    if not is_xconfig(path):
        return _load(path)
    text = read_file(path, XCONFIG_BYTES, error=SymnetError, what="xconfig").decode("utf-8", errors="replace")
    xconfig = read_xconfig(io.StringIO(text), file=path)
    if not xconfig.has("init"):
        raise SymnetError(
            f"{path} has no LDA-like layer, so no init.config (the network a fixed-affine-layer's "
            "affine-transform-file is estimated on)"
        )
    return xconfig.network(which="init")


def _lda(args: argparse.Namespace, stdout: TextIO) -> int:
    from .atomic import check_writable
    from .cli_files import Files, rspecifier_files
    from .kaldi.lda import LdaOptions, accumulate_lda_stats
    from .kaldi_io.tables import iter_table, read_posteriors, read_table

    for option in _LDA_UNSUPPORTED:
        if getattr(args, option[2:].replace("-", "_")) is not None:
            raise _UsageError(f"{option} is not supported: {_LDA_UNSUPPORTED[option]}")
    if args.chain_egs:
        given = [o for o in _LDA_FEATURES_ONLY if getattr(args, o[2:].replace("-", "_")) not in (None, False)]
        if given:
            raise _UsageError(
                f"{', '.join(given)}: with --chain-egs the egs hold the inputs (i-vectors included) and the "
                "supervision that gives the classes"
            )
    elif (args.posteriors is None) == (args.alignments is None):
        raise _UsageError("give the targets: --posteriors RSPECIFIER or --alignments RSPECIFIER (one of them)")
    if args.ivectors and args.online_ivectors:
        raise _UsageError("give --ivectors or --online-ivectors, not both")
    if args.online_ivectors and args.online_ivector_period <= 0:
        raise _UsageError("--online-ivectors needs --online-ivector-period > 0")
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
        from .kaldi.chain_lda import accumulate_chain_lda_stats
        from .kaldi_io.egs import read_cegs

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
    from .atomic import atomic_write_all
    from .kaldi_io.binary import Writer

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


class _UsageError(Exception):
    pass


def _count(least: int, most: int | None = None) -> Any:
    """An argparse type: an integer >= `least` (and <= `most`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < least or (most is not None and value > most):
            bound = f"in [{least}, {most}]" if most is not None else f">= {least}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def _widths(text: str) -> int | tuple[int, ...]:
    """An argparse type: one count >= 1, or several separated by commas (Kaldi's `--frames-per-eg=150,110,100`)."""
    parse = _count(1)
    widths = tuple(parse(part.strip()) for part in text.split(","))
    return widths[0] if len(widths) == 1 else widths


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _positive_float(text)


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


_ALLOW_PIPES_HELP = (
    "run the shell commands that scp entries name (`utt cmd |`), as Kaldi does; without it such "
    "an entry is an error (a command typed in the rspecifier itself, `ark:cmd |`, always runs)"
)


_FORCE_HELP = (
    "write an output even where it is one of the input files (refused by default: it would replace the input; "
    "two outputs that are one file are always refused)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="symnet: symbolic networks with Kaldi nnet3's engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info = commands.add_parser(
        "info",
        help="print a model's or config's dims, context, nodes and components",
        description="Print what nnet3-info prints: dims, left/right context, the number of "
        "parameters, every node with its dims, every component with its "
        "parameter shapes.",
    )
    info.add_argument("model", metavar="MODEL_OR_CONFIG", help="a symnet model file or a Kaldi nnet3 config")
    info.set_defaults(run=_info)
    init = commands.add_parser(
        "init",
        help="initialise a model from a Kaldi config (nnet3-init)",
        description="Build the network of a Kaldi nnet3 config, initialise its parameters "
        "as Kaldi does, and write a symnet model file (atomically). With "
        "EXISTING (a model or config), the config adds to or overrides it.",
    )
    init.add_argument("--seed", type=int, default=0, help="random seed of the initialisation (default 0)")
    init.add_argument("--force", action="store_true", help=_FORCE_HELP)
    init.add_argument("paths", nargs="+", metavar="[EXISTING] CONFIG OUT")
    init.set_defaults(run=_init)
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
    train.add_argument("--epochs", type=_count(0), default=3)
    train.add_argument("--batch-size", type=_count(1), default=32)
    train.add_argument(
        "--chunk",
        type=_widths,
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
        type=_positive_float,
        help="with --objective chain and --xent-output: Kaldi's --chain.xent-regularize (recipes: 0.1)",
    )
    train.add_argument(
        "--leaky-hmm-coefficient",
        type=_positive_float,
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
        type=_count(1),
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
    train.add_argument("--lr", type=_positive_float, default=2e-3, help="the (initial) learning rate")
    train.add_argument(
        "--schedule",
        choices=("constant", "exponential", "cosine"),
        default="constant",
        help="the learning rate over the run: constant; exponential, Kaldi's decay from --lr to --final-lr "
        "(default lr/10); cosine, a half cosine to --final-lr (default 0)",
    )
    train.add_argument("--final-lr", type=_non_negative_float, help="the learning rate at the end of the run")
    train.add_argument("--warmup", type=_count(0), default=0, help="steps of linear warm-up to --lr")
    train.add_argument("--clip", type=_positive_float, help="clip the gradient's global norm to this")
    train.add_argument(
        "--weight-decay",
        type=_non_negative_float,
        default=0.0,
        help="decoupled weight decay (adamw's, or before sgd/adam)",
    )
    train.add_argument(
        "--max-param-change",
        type=_positive_float,
        help="Kaldi's max-param-change (nnet3-train's, default 2.0): the update's norm over all parameters is at "
        "most this, with Kaldi's training rules (applied when the network's components carry Kaldi options)",
    )
    train.add_argument("--output", default="output", help="the output node to train (default output)")
    train.add_argument(
        "--window-frames",
        type=_count(1),
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
        type=_count(0),
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
        type=_fraction,
        help="hold out this fraction of the --feats utterances (the last ones by utterance id) for validation",
    )
    train.add_argument(
        "--metrics",
        metavar="FILE",
        help="append per-step metrics to FILE as JSON lines (step, epoch, loss, accuracy, lr, gradient norm, "
        "frames/s), and "
        "one line per epoch with the validation figures",
    )
    train.add_argument("--seed", type=_count(0), default=0)
    train.add_argument(
        "--checkpoint",
        help="checkpoint file: saved every epoch, resumed from if present (only "
        "with the settings it was saved with; locked while training)",
    )
    train.add_argument(
        "--allow-changes",
        metavar="FIELD[,FIELD]",
        help="resume --checkpoint although these settings differ from the run that saved it "
        "(e.g. lr,optimizer; batch_size, chunk, seed and data only at an epoch boundary)",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--allow-pipes", action="store_true", help=_ALLOW_PIPES_HELP)
    train.add_argument("--force", action="store_true", help=_FORCE_HELP)
    train.set_defaults(run=_train)
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
        "--binary", type=_kaldi_bool, default=True, metavar="true|false", help="write in binary mode (default true)"
    )
    copy.add_argument(
        "--raw",
        type=_kaldi_bool,
        default=False,
        metavar="true|false",
        help="write only the nnet of an acoustic model (default false)",
    )
    copy.add_argument("--force", action="store_true", help=_FORCE_HELP)
    copy.add_argument("input", metavar="IN")
    copy.add_argument("output", metavar="OUT")
    copy.set_defaults(run=_copy)
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
    frames = INDEX_LIMIT - 1  # the frames an Index can name: more context than that cannot be planned
    compute.add_argument("--frames-per-chunk", type=_count(1, frames), default=50)
    compute.add_argument("--extra-left-context", type=_count(0, frames), default=0)
    compute.add_argument("--extra-right-context", type=_count(0, frames), default=0)
    compute.add_argument("--extra-left-context-initial", type=_count(-1, frames), default=-1)
    compute.add_argument("--extra-right-context-final", type=_count(-1, frames), default=-1)
    compute.add_argument("--frame-subsampling-factor", type=_count(1, frames), default=1)
    compute.add_argument("--acoustic-scale", type=float, default=1.0)
    compute.add_argument("--apply-exp", type=_kaldi_bool, default=False, metavar="true|false")
    compute.add_argument(
        "--use-priors",
        type=_kaldi_bool,
        default=False,
        metavar="true|false",
        help="subtract the log-priors of an acoustic model",
    )
    compute.add_argument("--ivectors", metavar="RSPECIFIER", help="one i-vector per utterance")
    compute.add_argument("--online-ivectors", metavar="RSPECIFIER", help="i-vectors every --online-ivector-period")
    compute.add_argument("--online-ivector-period", type=_count(0, frames), default=0)
    compute.add_argument(
        "--use-gpu",
        default="no",
        metavar="yes|no|optional|wait",
        help="accepted for Kaldi compatibility and ignored (JAX picks the device)",
    )
    compute.add_argument("--allow-pipes", action="store_true", help=_ALLOW_PIPES_HELP)
    compute.add_argument("--force", action="store_true", help=_FORCE_HELP)
    compute.add_argument(
        "--compile-cache",
        metavar="DIR|off",
        default=None,
        help="keep compiled programs in DIR for later runs (default: $SYMNET_COMPILE_CACHE, else "
        "$XDG_CACHE_HOME/symnet/xla; see symnet.engine.enable_compile_cache); off: compile every run",
    )
    compute.add_argument("model", metavar="MODEL")
    compute.add_argument("feats_rspecifier", metavar="FEATS_RSPECIFIER")
    compute.add_argument("matrix_wspecifier", metavar="MATRIX_WSPECIFIER")
    compute.set_defaults(run=_compute)
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
        type=_count(1, frames),
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
    exported.add_argument("--force", action="store_true", help=_FORCE_HELP)
    exported.add_argument("model", metavar="MODEL")
    exported.add_argument("out", metavar="OUT")
    exported.set_defaults(run=_export)
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
    xconfig.add_argument("--force", action="store_true", help=_FORCE_HELP)
    xconfig.add_argument("xconfig", metavar="XCONFIG")
    xconfig.set_defaults(run=_xconfig)
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
        "--online-ivector-period", type=_count(0, frames), default=0, help="frames between rows of --online-ivectors"
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
        type=_kaldi_bool,
        default=True,
        metavar="true|false",
        help="add the column that makes the output's mean zero (default true)",
    )
    lda.add_argument(
        "--binary", type=_kaldi_bool, default=True, metavar="true|false", help="write in binary mode (default true)"
    )
    lda.add_argument(
        "--write-stats",
        metavar="FILE",
        help="also write the statistics as nnet3-acc-lda-stats writes them (for sum-lda-accs, "
        "nnet-get-feature-transform)",
    )
    lda.add_argument(
        "--targets-length-tolerance",
        type=_count(0),
        default=None,
        help="frames by which the targets may be shorter or longer than the features (nnet3-get-egs's; default 2)",
    )
    lda.add_argument(
        "--length-tolerance",
        type=_count(0),
        default=None,
        help="frames by which the online i-vectors may fall short or run over (nnet3-get-egs's; default 100)",
    )
    lda.add_argument(
        "--frames-per-chunk",
        type=_count(1, frames),
        default=None,
        help="frames computed together, as in `symnet compute` (default 50); online i-vectors are taken per chunk",
    )
    lda.add_argument("--allow-pipes", action="store_true", help=_ALLOW_PIPES_HELP)
    lda.add_argument("--force", action="store_true", help=_FORCE_HELP)
    for option in _LDA_UNSUPPORTED:
        lda.add_argument(option, help=argparse.SUPPRESS)
    lda.add_argument("network", metavar="NETWORK")
    lda.add_argument("feats_rspecifier", metavar="FEATS_RSPECIFIER")
    lda.add_argument("lda_mat", metavar="LDA_MAT")
    lda.set_defaults(run=_lda)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (0, or 1 after printing an error).

    It first keeps freed host memory (`symnet.tune_host_memory`), as a process of its own may.
    """
    tune_host_memory()
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = _parser()
    args = parser.parse_args(_kaldi_flags(sys.argv[1:] if argv is None else argv))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = args.run(args, stdout)
        for warning in caught:
            print(f"{PROG} {args.command}: warning: {str(warning.message).splitlines()[0]}", file=stderr)
        return status
    except _UsageError as e:
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
