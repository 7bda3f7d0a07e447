"""Checkpoints: parameters, optimiser state, step and data position, in one `.npz` (no pickle).

The file holds the arrays and a JSON header: the format version, the network's
fingerprint, the position, and `run`, what defines the training run (batch
size, chunk, seed, a digest of the data, the optimiser settings the caller
names), so that a resume with other settings is refused instead of silently
mixing two runs. It is written to a temporary file in the same folder and
renamed over the old one (`symnet._src.base.atomic`), so a crash never leaves a
half-written checkpoint and never destroys the last good one.

Loading reads nothing it has not checked first (`symnet._src.base.safe_read`): every
member must be one this network and optimiser have, with their shape and dtype;
the header's fields must have the right types. `lock(path)` keeps a second
training run from writing the same checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import stat
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import jax
import numpy as np

from ..base.atomic import atomic_write, remove_stale_temporaries
from ..base.errors import CheckpointError
from ..base.safe_read import NpzArchive, as_read, as_stored, stored_dtype
from ..base.text import is_digits

__all__ = ["FORMAT", "load", "load_run", "lock", "lock_path", "Position", "READABLE", "save", "VERSION"]

FORMAT = "symnet-checkpoint"
VERSION = 2
#: Versions this symnet reads (version 1 has no `run` record, so a resume from it cannot be checked).
READABLE = (1, 2)


@attrs.frozen
class Position:
    """Where training stands: optimiser steps taken, the epoch and the minibatch within it."""

    step: int = 0
    epoch: int = 0
    batch: int = 0


def save(
    path: str,
    network: Any,
    opt_state: Any,
    position: Position,
    extra: dict | None = None,
    run: Mapping[str, Any] | None = None,
) -> None:
    """Save a checkpoint of `network`'s parameters, the optimiser state, the position and the `run` record."""
    arrays: dict[str, np.ndarray] = {}
    values = network.values  # parameters and state
    for name in network.structure.names:
        arrays[f"param/{name}"] = as_stored(np.asarray(values[name]))  # bfloat16 and the like as their bits
    leaves = jax.tree_util.tree_leaves(opt_state)
    for i, leaf in enumerate(leaves):
        arrays[f"opt/{i}"] = as_stored(np.asarray(leaf))
    header = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": network.fingerprint(),
        "position": attrs.asdict(position),
        "opt_leaves": len(leaves),
        "run": dict(run or {}),
        "extra": extra or {},
    }
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=True, **arrays)  # numpy's default, named so that mypy matches no array to it
    atomic_write(path, buffer.getvalue())


def load(path: str, network: Any, opt_state_template: Any) -> tuple[Any, Any, Position, dict]:
    """`(network with the saved parameters, optimiser state, position, extra)`.

    Refuses (CheckpointError) a checkpoint of another network or another optimiser, and
    any member or header field that is not what this network and optimiser have.
    """
    network, opt_state, position, extra, _ = load_run(path, network, opt_state_template)
    return network, opt_state, position, extra


def load_run(path: str, network: Any, opt_state_template: Any) -> tuple[Any, Any, Position, dict, dict | None]:
    """`load`, and the checkpoint's `run` record (None for a version-1 checkpoint, which has none)."""
    with NpzArchive(path, error=CheckpointError, what="checkpoint") as archive:
        if "header" not in archive:
            raise CheckpointError(f"{path}: no valid header (no 'header' member; not a symnet checkpoint)")
        header = archive.read_json("header")
        _check_header(path, header)
        if header["fingerprint"] != network.fingerprint():
            saved = {n[len("param/") :]: tuple(archive.spec(n).shape) for n in archive.names if n.startswith("param/")}
            own = {n: tuple(np.shape(v)) for n, v in network.values.items()}
            detail = (
                f"its parameters are {saved}, this network's are {own}"
                if saved != own
                else "the parameters have the same names and shapes but the expressions differ"
            )
            raise CheckpointError(f"{path} was saved from a different network ({detail}); refusing to load it")
        leaves, treedef = jax.tree_util.tree_flatten(opt_state_template)
        if header["opt_leaves"] != len(leaves):
            raise CheckpointError(
                f"{path}: the optimiser state has {header['opt_leaves']} arrays, this optimiser's "
                f"has {len(leaves)}: it was saved with another optimiser"
            )
        wanted = {"header"} | {f"param/{n}" for n in network.structure.names} | {f"opt/{i}" for i in range(len(leaves))}
        missing = sorted(wanted - set(archive.names))
        if missing:
            raise CheckpointError(f"{path}: damaged, the arrays {missing[:5]} are missing")
        unexpected = sorted(set(archive.names) - wanted)
        if unexpected:
            raise CheckpointError(
                f"{path}: members {unexpected[:5]} belong to no parameter or optimiser state of "
                "this run (a damaged or crafted checkpoint); refusing to load it"
            )
        params = {}
        values = network.values  # parameters and state
        for name in network.structure.names:
            own = values[name]
            dtype = np.asarray(own).dtype
            value = as_read(archive.read(f"param/{name}", shape=tuple(np.shape(own)), dtype=stored_dtype(dtype)), dtype)
            # Device arrays, like the ones a fresh run starts from (so the jitted step sees the same kind of input).
            params[name] = jax.numpy.asarray(value)
        state = []
        for i, leaf in enumerate(leaves):
            try:
                dtype = np.asarray(leaf).dtype
                value = as_read(archive.read(f"opt/{i}", shape=tuple(np.shape(leaf)), dtype=stored_dtype(dtype)), dtype)
            except CheckpointError as e:
                raise CheckpointError(f"{e}: the optimiser state does not match this optimiser") from None
            state.append(jax.numpy.asarray(value))
    opt_state = jax.tree_util.tree_unflatten(treedef, state)
    position = Position(**header["position"])
    run = header.get("run") if header["version"] >= 2 else None
    return network.assign(params), opt_state, position, header["extra"], run


def _check_header(path: str, header: Any) -> None:
    """Refuse a header whose fields are missing or of the wrong type (a damaged or crafted file)."""
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: no valid header (the header is a {type(header).__name__}, not an object)")
    version = header.get("version")
    if header.get("format") != FORMAT or isinstance(version, bool) or version not in READABLE:
        raise CheckpointError(
            f"{path}: format {header.get('format')!r:.40} version {header.get('version')!r:.20}, "
            f"expected {FORMAT!r} version {' or '.join(map(str, READABLE))}"
        )
    fields: dict[str, type | tuple[type, ...]] = {
        "fingerprint": str,
        "position": dict,
        "opt_leaves": int,
        "extra": dict,
    }
    if header["version"] >= 2:
        fields["run"] = dict
    for name, kind in fields.items():
        value = header.get(name)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise CheckpointError(
                f"{path}: header field {name!r} is {value!r:.60}, not a {getattr(kind, '__name__', kind)}"
            )
    if header["opt_leaves"] < 0:
        raise CheckpointError(f"{path}: header field 'opt_leaves' is {header['opt_leaves']}")
    position = header["position"]
    if set(position) != {"step", "epoch", "batch"}:
        raise CheckpointError(
            f"{path}: no valid position in the header (fields {sorted(position)!r:.80}, expected step, epoch and batch)"
        )
    for name, value in position.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
            raise CheckpointError(f"{path}: no valid position in the header ({name} is {value!r:.40})")


# ----- locking ------------------------------------------------------------------------------------------


def lock_path(path: str) -> str:
    """The lock file of checkpoint `path`: beside the file it resolves to."""
    target = os.path.realpath(path)
    return os.path.join(os.path.dirname(target), "." + os.path.basename(target) + ".lock")


@contextlib.contextmanager
def lock(path: str) -> Iterator[None]:
    """Hold checkpoint `path` for one training run: a second run on it is a CheckpointError.

    An advisory `flock` on a lock file beside it, released by the system if the
    process dies (so a run killed with -9 never blocks the next). The lock file
    is created exclusively (never through a link), given this process's id and
    removed on the way out; one that was there before (left by a run killed
    with -9, or made by anyone else) is locked as it is: never truncated,
    written or removed (delete it by hand once no run uses it). Once the lock is
    held, temporary files of this checkpoint's name that a killed run left
    (`symnet._src.base.atomic.remove_stale_temporaries`) are removed.
    """
    name = lock_path(path)
    os.makedirs(os.path.dirname(name), exist_ok=True)
    while True:
        opened = _open_lock(name, path)
        if opened is None:  # removed as we looked: look again
            continue
        fd, made = opened
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd, name)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise CheckpointError(
                f"{path} is in use by another training run ({holder}); two runs on one "
                "checkpoint would overwrite each other's progress"
            ) from None
        if _same_file(fd, name):
            break
        os.close(fd)  # the holder removed it as we opened it: take the new one
    try:
        if made:
            os.write(fd, f"{os.getpid()}\n".encode())
        remove_stale_temporaries(path)
        yield
    finally:
        if made and _same_file(fd, name):  # only the file this run made: never one planted since
            with contextlib.suppress(OSError):
                os.unlink(name)
        os.close(fd)


_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_lock(name: str, path: str) -> tuple[int, bool] | None:
    """`(fd, made)`: the lock file created exclusively (`made`), or the one already there, opened read-only
    without following a link or blocking on a FIFO; None if it went as we looked. A CheckpointError where
    something other than a regular file (a link someone planted, a device, a FIFO) has its name."""
    try:
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FLAGS, 0o600), True
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | _FLAGS)  # never written: it is not ours
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise CheckpointError(
            f"{path}: its lock file {name} is a symbolic link; symnet never writes through a link it did not "
            "make (remove it if it is yours)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{path}: its lock file {name} is not a regular file; remove it if it is yours")
    return fd, False


def _same_file(fd: int, name: str) -> bool:
    """Whether `name` is still the file open as `fd` (not removed, replaced or turned into a link since)."""
    try:
        st = os.stat(name, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(fd: int, name: str) -> str:
    """Who holds lock file `name` (open as `fd`), as far as the file says."""
    try:
        pid = os.pread(fd, 20, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"process {pid} holds {name}" if is_digits(pid) else f"{name} is locked"
