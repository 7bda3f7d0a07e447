"""What defines a training run, recorded in its checkpoints, so that a resume with other settings is refused.

A checkpoint's position (epoch, minibatch) means something only for the run
that wrote it: with another batch size the same minibatch number is another
place in the data, with another seed another order, with other data other
examples. `record` lists a run's defining settings (batch size, chunk, seed,
objective, input and output names, a digest of the training and validation
data, and whatever the caller adds, such as the optimiser and learning rate);
`check` compares a checkpoint's record with this run's and raises a
CheckpointError naming every field that differs, unless the caller allows it
(`fit(..., allow_changes=("lr",))`, `symnet train --allow-changes lr`). A change
of batch size, chunk, seed or data is refused even then in the middle of an
epoch, where the rest of the epoch depends on them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .checkpoint import CheckpointError, Position
from .examples import Chunks
from .streams import Corpus

__all__ = ["check", "check_extra", "digest", "EPOCH_FIELDS", "HISTORY_FIELDS", "record"]

#: The fields the rest of an epoch depends on: they may change only at an epoch boundary.
EPOCH_FIELDS = ("batch_size", "chunk", "seed", "data", "drop_partial")


def digest(data: Any) -> str | None:
    """A digest of training data: the sequences of a Dataset, KaldiData or `(features, targets)` pair (so it
    does not depend on the chunk size), the examples of `Chunks`, or a `Corpus`'s own (`Corpus.digest`)."""
    if data is None:
        return None
    if isinstance(data, Corpus):
        return data.digest()
    h = hashlib.blake2b(digest_size=16)
    if isinstance(data, Chunks):
        h.update(repr((data.left, data.right)).encode())
        arrays: Iterable[Any] = (data.features, data.targets, data.weights)
    else:
        features, targets = (data.features, data.labels) if hasattr(data, "labels") else data
        arrays = (a for pair in zip(features, targets, strict=True) for a in pair)
    for array in arrays:
        array = np.ascontiguousarray(array)
        h.update(repr((array.dtype.str, array.shape)).encode())
        h.update(array.data.cast("B"))
    return h.hexdigest()


def record(
    *,
    train: Chunks,
    valid: Chunks | None,
    batch_size: int,
    chunk: int | list[int],
    seed: int,
    objective: str,
    input: str,
    output: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The defining settings of a run, as JSON values (`train`, `valid`: the data as given to `fit`; `extra`:
    the caller's own settings, e.g. optimiser and lr)."""
    out: dict[str, Any] = {
        "batch_size": int(batch_size),
        "chunk": [int(w) for w in chunk] if isinstance(chunk, list) else int(chunk),
        "seed": int(seed),
        "objective": objective,
        "input": input,
        "output": output,
        "data": digest(train),
        "valid_data": digest(valid),
    }
    for name, value in (extra or {}).items():
        if name in out:
            raise CheckpointError(f"run field {name!r} is one fit records itself; name yours differently")
        if not isinstance(name, str) or not _plain(value):
            raise CheckpointError(
                f"run field {name!r}: {value!r:.60} is not a plain JSON value (str, number, bool, None)"
            )
        out[name] = value
    return out


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int, bool))


def check(
    path: str,
    saved: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    position: Position,
    allow_changes: Iterable[str] = (),
) -> None:
    """Refuse (CheckpointError) to resume `path`, saved by run `saved`, with settings `current` that differ."""
    if saved is None:
        return  # a version-1 checkpoint: nothing recorded to compare (fit warns)
    allowed = set(allow_changes)
    unknown = allowed - set(current) - set(saved)
    if unknown:
        raise CheckpointError(
            f"allow_changes names {sorted(unknown)}, which are not fields of this run ({sorted(current)})"
        )
    differ = [name for name in sorted(set(saved) | set(current)) if saved.get(name) != current.get(name)]
    refused = [name for name in differ if name not in allowed]
    if refused:
        shown = "; ".join(
            f"{name}: saved {_show(name, saved.get(name))}, now {_show(name, current.get(name))}" for name in refused
        )
        raise CheckpointError(
            f"{path} was saved by a run with other settings ({shown}). Resume with the same settings, start a "
            f"new checkpoint, or allow the change explicitly (allow_changes={tuple(refused)!r}; symnet train "
            f"--allow-changes {','.join(refused)})"
        )
    mid_epoch = [name for name in differ if name in EPOCH_FIELDS]
    if mid_epoch and position.batch:
        raise CheckpointError(
            f"{path} was saved in the middle of epoch {position.epoch} (after minibatch {position.batch}), and the "
            f"rest of that epoch depends on {', '.join(mid_epoch)}: these can change only at an epoch boundary"
        )


def _show(name: str, value: Any) -> str:
    if name in ("data", "valid_data") and isinstance(value, str):
        return f"digest {value[:12]}"
    return f"{value!r:.40}"


#: The fields of one epoch's statistics in a checkpoint's history (`symnet.train.EpochStats`), by type.
HISTORY_FIELDS = {
    "epoch": int,
    "step": int,
    "train_loss": float,
    "train_accuracy": float,
    "valid_loss": float,
    "valid_accuracy": float,
    "frames_per_second": float,
}


def check_extra(path: str, extra: Mapping[str, Any], position: Position, batches: int) -> tuple[list[dict], Any]:
    """The checkpoint's history (a list of per-epoch statistics) and mid-epoch sums, checked."""
    if position.batch > batches:
        raise CheckpointError(
            f"{path}: its position is minibatch {position.batch} of epoch {position.epoch}, but "
            f"an epoch of this run has {batches} minibatches"
        )
    history = extra.get("history", [])
    if not isinstance(history, list):
        raise CheckpointError(f"{path}: the header's history is not a list of epoch statistics")
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or set(entry) != set(HISTORY_FIELDS):
            raise CheckpointError(
                f"{path}: entry {i} of the header's history is not an epoch's statistics ({entry!r:.60})"
            )
        for name, kind in HISTORY_FIELDS.items():
            value = entry[name]
            ok = (
                isinstance(value, int)
                if kind is int
                else (value is None and name.startswith("valid")) or isinstance(value, (int, float))
            )
            if isinstance(value, bool) or not ok:
                raise CheckpointError(f"{path}: entry {i} of the header's history has {name}={value!r:.40}")
    sums = extra.get("sums") if position.batch else None
    if sums is not None and (
        not isinstance(sums, list)
        or len(sums) not in (3, 4)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sums)
    ):
        raise CheckpointError(f"{path}: the header's sums are {sums!r:.60}, not three (or four) numbers")
    return history, sums
