"""What `symnet train` reads: the network (a file, or a Python module's attribute) and the training data
(`--data builtin:hmm` or Kaldi tables, read whole or as training goes)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ...base.errors import SymnetError
from ...base.text import is_digits
from .options import UsageError

__all__ = ["network_files", "network_source", "training_data"]


def network_files(spec: str) -> list[str]:
    """The files `network_source` reads for `spec`: the model, or the config and the files it names, or the
    `file.py` of `file.py:attr`."""
    from .files import config_files

    if ":" not in spec or os.path.exists(spec):
        return [spec, *config_files(spec)]
    module = spec.rsplit(":", 1)[0]
    return [module] if module.endswith(".py") else []


def network_source(spec: str, seed: int) -> Any:
    """A Network from a model or config file, or from `module:attribute` / `file.py:attribute`.

    The attribute is a Network, or a function of no arguments returning one.
    """
    import importlib
    import importlib.util

    from ...loading import load_network
    from ...network import Network

    if ":" not in spec or os.path.exists(spec):
        return load_network(spec, seed=seed)
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


def training_data(args: argparse.Namespace) -> tuple[Any, Any]:
    """(train, valid) from `--data builtin:hmm[:SEQUENCES]` or Kaldi archives."""
    if args.data:
        parts = args.data.split(":")
        if parts[:2] != ["builtin", "hmm"] or len(parts) > 3 or (len(parts) == 3 and not is_digits(parts[2])):
            raise SymnetError(f"unknown --data {args.data!r}; the built-in task is builtin:hmm[:SEQUENCES]")
        from ...datasets import HmmTask

        given = [o for o in ("valid_feats", "valid_targets", "valid_fraction") if getattr(args, o, None)]
        if given:  # the built-in task makes its own validation data: these would be ignored
            options = ", ".join("--" + o.replace("_", "-") for o in given)
            raise UsageError(f"{options}: validation data for --feats; --data builtin:hmm makes its own")
        sequences = int(parts[2]) if len(parts) == 3 else 500
        task = HmmTask.create(seed=args.seed)
        train = task.sample(sequences, seed=args.seed + 1)
        valid = task.sample(max(sequences // 5, 1), seed=args.seed + 2)
        phones = getattr(args, "objective", None) == "ctc" or getattr(args, "topology", None)
        if phones:  # phone labels 1..P per frame (0 is CTC's blank; a chain topology's phones start at 1)
            return task.phone_dataset(train), task.phone_dataset(valid)
        return train, valid
    if not (args.feats and args.targets):
        raise UsageError("give --data builtin:hmm, or --feats and --targets")
    from ...train.kaldi_data import read_kaldi_data
    from ...train.streams import stream_kaldi_data

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
            raise UsageError(f"{given[0]}: for features read as training goes, from an scp (--feats scp:feats.scp)")
        return read_kaldi_data(feats, targets, allow_pipes=args.allow_pipes, frame_subsampling_factor=factor)

    data = read(args.feats, args.targets)
    valid_feats, valid_targets = getattr(args, "valid_feats", None), getattr(args, "valid_targets", None)
    fraction = getattr(args, "valid_fraction", None)
    if bool(valid_feats) != bool(valid_targets):
        raise UsageError("give --valid-feats and --valid-targets together")
    if valid_feats and fraction:
        raise UsageError("give --valid-feats/--valid-targets or --valid-fraction, not both")
    if valid_feats and valid_targets:
        return data, read(valid_feats, valid_targets)
    if fraction:
        return data.split(fraction)
    return data, None
