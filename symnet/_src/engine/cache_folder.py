"""The compile cache's folder, checked from `/` down and held open for the run (as ssh checks `~/.ssh`).

`open_folder(path)` walks `path` one folder at a time, each opened relative to
the one before (`openat` with `O_NOFOLLOW`, so nothing is looked up twice by
name), makes missing folders 0700, and refuses, naming the folder at fault:

- a folder on the way that group or others may write without the sticky bit
  (they could rename what it holds and put their own there; a sticky folder
  such as `/tmp` is fine, since its entries on the way must be root's or ours);
- a folder on the way, or a symbolic link, that belongs to neither root nor
  this user (a link is followed, and its target walked the same way);
- a last folder that is not this user's, or that group or others may write.

It returns the folder open. symnet hands JAX `/proc/self/fd/N` for it where
that names the same folder, so every entry is read from the folder that was
checked, whatever is renamed later; `Folder.changed` says whether the path
still names it, and whether its owner and mode still pass.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

__all__ = ["Folder", "open_folder"]

#: The most symbolic links one walk follows (Linux's own limit).
MAX_LINKS = 40


class _Link(NamedTuple):
    """A symbolic link met on the way: its target."""

    target: str


class Folder(NamedTuple):
    """A checked cache folder: the path it was found by, its open descriptor, and its identity then."""

    path: str
    fd: int
    dev: int
    ino: int

    @property
    def proc_path(self) -> str | None:
        """`/proc/self/fd/N` where it names this folder (Linux), else None."""
        path = f"/proc/self/fd/{self.fd}"
        try:
            st = os.stat(path)
        except OSError:
            return None
        return path if (st.st_dev, st.st_ino) == (self.dev, self.ino) else None

    def changed(self) -> str | None:
        """None while `path` still names this folder and its owner and mode still pass; else what changed."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            return f"{self.path} cannot be looked up any more ({e.strerror or e})"
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            return f"{self.path} is no longer the folder symnet checked (renamed or replaced since)"
        return _last_problem(self.path, os.fstat(self.fd))


def _uid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else 0


def _owner_problem(shown: str, st: os.stat_result, what: str) -> str | None:
    if st.st_uid not in (0, _uid()):
        return f"{what} {shown} belongs to user id {st.st_uid}, neither root nor this user ({_uid()})"
    return None


def _parent_problem(shown: str, st: os.stat_result) -> str | None:
    """Why folder `shown` on the way to the cache lets others swap what it holds (None if it does not)."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{shown} is a file, not a folder"
    problem = _owner_problem(shown, st, "the folder")
    if problem is None and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        problem = (
            f"the folder {shown} on the way to it may be written by others without the sticky bit (mode "
            f"{stat.S_IMODE(st.st_mode):o}): they could put their own folder in its place"
        )
    return problem


def _last_problem(shown: str, st: os.stat_result) -> str | None:
    """Why the cache folder itself is not trusted (None if it is this user's and no one else may write it)."""
    if not stat.S_ISDIR(st.st_mode):
        return "it is a file, not a folder"
    if st.st_uid != _uid():
        return f"it belongs to user id {st.st_uid}, not to this user ({_uid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(st.st_mode):o}; chmod go-w {shown} to use it)"
    return None


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def open_folder(path: str) -> Folder | str:
    """The checked cache folder `path` (made 0700 where missing, with its missing parents), open; or why not."""
    path = os.path.join(os.getcwd(), os.path.expanduser(path))
    todo = [part for part in path.split("/") if part][::-1]  # a stack, next component last
    fd = os.open("/", _DIR_FLAGS)
    shown, links = "/", 0
    try:
        problem = _parent_problem(shown, os.fstat(fd))
        while problem is None and todo:
            name = todo.pop()
            if name == ".":
                continue
            step = _step(fd, name, shown, last=not todo)
            if isinstance(step, str):
                return step
            if isinstance(step, _Link):  # its target's parts, walked from here (or from / if absolute)
                links += 1
                if links > MAX_LINKS:
                    return f"more than {MAX_LINKS} symbolic links on the way"
                if step.target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    shown = "/"
                todo.extend([part for part in step.target.split("/") if part][::-1])
                continue
            os.close(fd)
            fd, st = step
            shown = os.path.join(shown, name)
            problem = _last_problem(path, st) if not todo else _parent_problem(shown, st)
        if problem is not None:
            return problem
        st = os.fstat(fd)
        folder, fd = Folder(path, fd, st.st_dev, st.st_ino), -1
        return folder
    except OSError as e:
        return e.strerror or str(e)
    finally:
        if fd >= 0:
            os.close(fd)


def _step(fd: int, name: str, shown: str, last: bool) -> tuple[int, os.stat_result] | _Link | str:
    """Open `name` in folder `fd` (made 0700 if missing): `(fd, stat)`, the link it is, or why not."""
    for _ in range(2):
        try:
            child = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            return child, os.fstat(child)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass  # made by someone else meanwhile: open it and check it like any other
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            where = os.path.join(shown, name)
            if not stat.S_ISLNK(st.st_mode):
                return "it is a file, not a folder" if last else f"{where} is a file, not a folder"
            problem = _owner_problem(where, st, "the symbolic link")
            if problem is not None:
                return problem
            return _Link(os.readlink(name, dir_fd=fd))
    return f"{os.path.join(shown, name)} could not be made"
