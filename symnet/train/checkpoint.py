"""Checkpoints: parameters, optimiser state, step and data position, in one `.npz` (no pickle).

The file holds the arrays and a JSON header (format version, the network's
fingerprint, the position). It is written to a temporary file in the same
folder and renamed over the old one, so a crash never leaves a half-written
checkpoint and never destroys the last good one.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import attrs
import jax
import numpy as np

from ..atomic import atomic_write
from ..errors import SymnetError

FORMAT = "symnet-checkpoint"
VERSION = 1


class CheckpointError(SymnetError, ValueError):
    """A checkpoint that cannot be used: wrong format, other network, damaged file."""


@attrs.frozen
class Position:
    """Where training stands: optimiser steps taken, the epoch and the minibatch within it."""

    step: int = 0
    epoch: int = 0
    batch: int = 0


def save(path: str, network: Any, opt_state: Any, position: Position, extra: dict | None = None) -> None:
    """Save a checkpoint of `network`'s parameters, the optimiser state and the position."""
    arrays: dict[str, np.ndarray] = {}
    values = network.values  # parameters and state
    for name in network.structure.names:
        arrays[f"param/{name}"] = np.asarray(values[name])
    leaves = jax.tree_util.tree_leaves(opt_state)
    for i, leaf in enumerate(leaves):
        arrays[f"opt/{i}"] = np.asarray(leaf)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": network.fingerprint(),
        "position": attrs.asdict(position),
        "opt_leaves": len(leaves),
        "extra": extra or {},
    }
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=True, **arrays)  # numpy's default, named so that mypy matches no array to it
    atomic_write(path, buffer.getvalue())


def load(path: str, network: Any, opt_state_template: Any) -> tuple[Any, Any, Position, dict]:
    """`(network with the saved parameters, optimiser state, position, extra)`.

    Refuses (CheckpointError) a checkpoint of another network or another optimiser.
    """
    try:
        with open(path, "rb") as f:  # our own handle: closed even when numpy fails on a damaged file
            loaded = np.load(f, allow_pickle=False)  # never unpickle: a checkpoint is data, not code
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            with loaded as data:
                arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: {e})") from None
    try:
        header = json.loads(arrays.pop("header").tobytes().decode())
        if not isinstance(header, dict):
            raise ValueError(f"the header is a {type(header).__name__}, not an object")
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"{path}: no valid header ({e})") from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise CheckpointError(f"{path}: format {header.get('format')!r} version {header.get('version')!r}, "
                              f"expected {FORMAT!r} version {VERSION}")
    if header.get("fingerprint") != network.fingerprint():
        saved_shapes = {k[len("param/"):]: tuple(v.shape) for k, v in arrays.items() if k.startswith("param/")}
        own_shapes = {n: tuple(np.shape(v)) for n, v in network.values.items()}
        detail = (f"its parameters are {saved_shapes}, this network's are {own_shapes}" if saved_shapes != own_shapes
                  else "the parameters have the same names and shapes but the expressions differ")
        raise CheckpointError(
            f"{path} was saved from a different network ({detail}); refusing to load it"
        )
    leaves, treedef = jax.tree_util.tree_flatten(opt_state_template)
    if header.get("opt_leaves") != len(leaves):
        raise CheckpointError(f"{path}: the optimiser state has {header.get('opt_leaves')} arrays, this optimiser's "
                              f"has {len(leaves)}: it was saved with another optimiser")
    missing = [f"param/{name}" for name in network.structure.names if f"param/{name}" not in arrays]
    missing += [f"opt/{i}" for i in range(len(leaves)) if f"opt/{i}" not in arrays]
    if missing:
        raise CheckpointError(f"{path}: damaged, the arrays {missing[:5]} are missing")
    # Device arrays, like the ones a fresh run starts from (so the jitted step sees the same kind of input).
    params = {name: jax.numpy.asarray(arrays[f"param/{name}"]) for name in network.structure.names}
    saved = [arrays[f"opt/{i}"] for i in range(len(leaves))]
    for old, new in zip(leaves, saved):
        if np.shape(old) != np.shape(new):
            raise CheckpointError(f"{path}: the optimiser state does not match this optimiser")
    opt_state = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in saved])
    try:
        position = Position(**header["position"])
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: no valid position in the header ({e})") from None
    return network.assign(params), opt_state, position, header.get("extra", {})
