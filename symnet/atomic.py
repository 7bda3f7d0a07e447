"""Files written so that a failure never leaves a half-written one.

The data goes to a temporary file beside the target, is flushed to disk, and
the temporary file is renamed over the target: readers see the old file or the
new one, never a mix, and a failed write leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import IO


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """A file to write `path`'s new contents into; it replaces `path` only if the block succeeds."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 -> what a plain open() would give
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
