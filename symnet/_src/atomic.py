"""Output files written without destroying what their path names, and never left half written.

How `atomic_open(path)` (and `AtomicFile`, `atomic_write`) writes, by what `path` is:

- a new path or a regular file: the data goes to a temporary file beside it,
  is flushed to disk, and the temporary file is renamed over it, so readers see
  the old file or the new one, never a mix. The new file keeps the old one's
  permission bits and owner (a 0600 file stays 0600); a new file gets what a
  plain `open()` gives (0666 less the umask).
- a symbolic link: it is resolved first and the file it points to is written
  as above, so `final.mdl -> 40.mdl` updates 40.mdl and keeps the link.
- a regular file with other hard links, or one whose owner this user cannot
  give a new file, or one in a folder where no temporary file can be made: the
  new contents are written out completely first (a full disk shows before the
  file is touched), then copied over the file in place, so every link and the
  owner stay. This is not atomic: a failure while copying leaves it partial.
- a character device, FIFO or socket (`/dev/null`, `/dev/stdout`, a named
  pipe): written through, as Kaldi does. Nothing there is replaced.
- a folder: an error.

Every failure is an `OutputError` (a SymnetError and an OSError) that names the
user's path, never the temporary file, and no temporary file is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from typing import IO, Any

from .errors import OutputError, SymnetError

__all__ = [
    "atomic_open",
    "atomic_write",
    "atomic_write_all",
    "AtomicFile",
    "check_writable",
    "remove_stale_temporaries",
    "resolve_output",
    "temporary_pattern",
]

_REPLACE, _IN_PLACE, _THROUGH = "replace", "in place", "through"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _error(path: str, error: BaseException) -> OutputError:
    if isinstance(error, OutputError):
        return error
    number = getattr(error, "errno", None)
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return OutputError(number, text, path)


def _can_keep_owner(st: os.stat_result) -> bool:
    """Whether this process may give a new file `st`'s owner and group."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def resolve_output(path: str | os.PathLike[str]) -> tuple[str, str, os.stat_result | None]:
    """`(target, how, stat)`: the file a write to `path` goes to (symlinks resolved), how it is written
    (`"replace"`, `"in place"` or `"through"`) and its stat (None for a new file); OutputError for a
    folder or a path that cannot be looked at."""
    user = os.fspath(path)
    if not user:
        raise OutputError(errno.ENOENT, "an empty path", user)
    target = os.path.realpath(user)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, _REPLACE, None
    except OSError as e:  # a symlink loop, a path through a file, no permission to look
        raise _error(user, e) from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(errno.EISDIR, "it is a folder", user)
    if not stat.S_ISREG(st.st_mode):
        return target, _THROUGH, st
    if st.st_nlink > 1 or not _can_keep_owner(st):
        return target, _IN_PLACE, st
    return target, _REPLACE, st


class AtomicFile:
    """An output file being written: write to `file`, then `commit()` (or `abort()` to leave `path` as it was).

    See the module doc for what each kind of path gets. `abort` after `commit`
    does nothing, so `try: ...; f.commit() finally: f.abort()` is the pattern.
    """

    def __init__(self, path: str | os.PathLike[str], mode: str = "wb"):
        if mode not in ("wb", "w"):
            raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
        self.path = os.fspath(path)
        self.target, self.how, self._stat = resolve_output(self.path)
        self._tmp: str | None = None
        self._done = False
        try:
            if self.how == _THROUGH:
                raw: IO[Any] = open(self.target, "wb")
            else:
                raw = self._temporary()
            self.file: IO[Any] = raw if mode == "wb" else _text(raw)
        except BaseException as e:
            self._cleanup()
            if isinstance(e, Exception):
                raise _error(self.path, e) from None
            raise

    def _temporary(self) -> IO[Any]:
        directory = os.path.dirname(self.target)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=_prefix(self.target), suffix=".tmp", dir=directory)
        except PermissionError:
            if self._stat is None or not os.access(self.target, os.W_OK):
                raise
            self.how = _IN_PLACE  # a writable file in a folder we may not create files in
            fd, self._tmp = tempfile.mkstemp(prefix=".symnet-", suffix=".tmp")
        return os.fdopen(fd, "wb")

    def prepare(self) -> None:
        """Flush the written data to disk beside `path` (where a full disk shows), leaving `path` untouched until
        `commit` (OutputError naming `path` if that fails)."""
        try:
            self.file.flush()
            if self.how != _THROUGH:
                os.fsync(self.file.fileno())
        except BaseException as e:
            self.abort()
            if isinstance(e, Exception):
                raise _error(self.path, e) from None
            raise

    def commit(self) -> None:
        """Make the written data `path`'s contents (OutputError naming `path` if that fails)."""
        if self._done:
            return
        try:
            self.file.flush()
            if self.how == _THROUGH:
                self.file.close()
            else:
                os.fsync(self.file.fileno())
                self.file.close()
                if self.how == _REPLACE:
                    self._replace()
                else:
                    self._copy_in_place()
        except BaseException as e:
            self.abort()
            if isinstance(e, Exception):
                raise _error(self.path, e) from None
            raise
        self._done = True
        self._cleanup()

    def _replace(self) -> None:
        assert self._tmp is not None
        st = self._stat
        if st is None:
            os.chmod(self._tmp, 0o666 & ~_umask())
        else:
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.chown(self._tmp, st.st_uid, st.st_gid)
            os.chmod(self._tmp, stat.S_IMODE(st.st_mode))
        os.replace(self._tmp, self.target)
        self._tmp = None
        with contextlib.suppress(OSError):  # the rename itself made durable (where folders can be opened)
            fd = os.open(os.path.dirname(self.target), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _copy_in_place(self) -> None:
        assert self._tmp is not None
        with open(self._tmp, "rb") as src, open(self.target, "r+b") as dst:
            size = os.fstat(src.fileno()).st_size
            old = os.fstat(dst.fileno()).st_size
            if size > old:  # reserve the space first where the file system can: a full disk fails here
                try:
                    os.posix_fallocate(dst.fileno(), 0, size)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                        with contextlib.suppress(OSError):
                            os.truncate(dst.fileno(), old)
                        raise
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.truncate(size)
            dst.flush()
            os.fsync(dst.fileno())

    def abort(self) -> None:
        """Leave `path` as it was (for a device or FIFO: stop writing) and remove the temporary file."""
        if self._done:
            return
        self._done = True
        self._cleanup()

    def _cleanup(self) -> None:
        file = getattr(self, "file", None)
        if file is not None and not file.closed:
            with contextlib.suppress(Exception):  # closing flushes: on a full disk that fails again
                file.close()
        if file is not None and not file.closed:  # a failed flush leaves it open: close the descriptor
            with contextlib.suppress(Exception):
                os.close(file.fileno())
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None


def _prefix(target: str) -> str:
    return "." + os.path.basename(target) + "."


def temporary_pattern(target: str) -> re.Pattern[str]:
    """The names of the temporary files written beside `target` (`.NAME.XXXXXXXX.tmp`, `tempfile`'s 8 letters)."""
    return re.compile(re.escape(_prefix(target)) + r"[a-z0-9_]{8}\.tmp\Z")


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files a killed writer of `path` left beside it (the names `temporary_pattern` gives;
    regular files of this user only, never a link); the ones removed. Call it only while holding what keeps
    other writers of `path` out (a checkpoint's lock): a live writer's temporary file has the same name."""
    target = os.path.realpath(os.fspath(path))
    folder, pattern = os.path.dirname(target), temporary_pattern(target)
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(folder) if pattern.match(n)]
    except OSError:
        return removed
    for name in names:
        full = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(full)
                removed.append(full)
    return removed


def _text(raw: IO[Any]) -> IO[Any]:
    return io.TextIOWrapper(raw, encoding="utf-8")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """A file to write `path`'s new contents into; they become `path`'s only if the block succeeds."""
    out = AtomicFile(path, mode)
    try:
        try:
            yield out.file
        except OSError as e:  # writing failed (a full disk): the error names the user's path
            if isinstance(e, SymnetError):
                raise
            raise _error(out.path, e) from None
        out.commit()
    finally:
        out.abort()


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` (see the module doc)."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_all(files: Mapping[str, bytes]) -> None:
    """Write a set of files as a whole: each is written and flushed to disk beside its path first, and only when
    every one is do they replace their paths, so a failure (a full disk) leaves every path as it was, with an
    OutputError naming the path that failed. (The renames themselves do not fail on a full disk.)"""
    outs: list[AtomicFile] = []
    try:
        for path, data in files.items():
            out = AtomicFile(path, "wb")
            outs.append(out)
            try:
                out.file.write(data)
            except OSError as e:
                raise _error(out.path, e) from None
            out.prepare()
        for out in outs:
            out.commit()
    finally:
        for out in outs:
            out.abort()


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse (OutputError) a path that a later write would fail on: a folder, a path through a file, a
    folder this user cannot create files in. Made before long work (training) whose result goes there.

    Nothing is left behind: a probe file is created and removed.
    """
    user = os.fspath(path)
    target, how, st = resolve_output(user)
    if how == _THROUGH:
        return
    if st is not None and not os.access(target, os.W_OK) and not os.access(os.path.dirname(target), os.W_OK):
        raise OutputError(errno.EACCES, "Permission denied", user)
    folder = os.path.dirname(target)
    while not os.path.exists(folder):  # the folders a write would create: the first one that exists decides
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if not os.path.isdir(folder):
        raise OutputError(errno.ENOTDIR, f"{folder} is not a folder", user)
    if how == _IN_PLACE:
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=_prefix(target), suffix=".tmp", dir=folder)
    except OSError as e:
        if st is not None and os.access(target, os.W_OK):
            return  # written in place
        raise _error(user, e) from None
    os.close(fd)
    os.unlink(probe)
