"""An on-disk cache of compiled XLA programs (JAX's persistent compilation cache), so a new process
that runs a program compiled before loads it instead of compiling it again.

`symnet compute` turns it on (its `--compile-cache` option); a program of
your own can with `enable_compile_cache()`. Where the cache lives, first
match wins:

1. the `path` given (`--compile-cache=DIR`);
2. the environment variable `SYMNET_COMPILE_CACHE` (a folder, or `off`);
3. `$XDG_CACHE_HOME/symnet/xla`, or `~/.cache/symnet/xla` without it.

`off` (also `none`, `0`, `false` or empty) turns the cache off. Every
program is cached, however small or quick to compile (JAX's defaults keep
only programs that took a second or more). A folder that cannot be
created or written to is a warning, never an error: the run goes on
compiling as it would without the cache.

What the cache trusts. Its entries are native code that runs when loaded, so
whoever can write the folder chooses what runs. symnet uses a folder only if
it belongs to this user and no one else may write to it (not group or world
writable; it is made 0700), and only if no one else can put another folder in
its place: every folder above it belongs to root or this user and is not
writable by others (unless sticky, as `/tmp`), and every symbolic link on
the way belongs to root or this user (`symnet._src.engine.cache_folder`);
else it warns and compiles without the cache. The folder is then held open:
JAX is given `/proc/self/fd/N` (Linux), so every entry is read from the
folder that was checked, and a path renamed or replaced later is a warning
(where there is no `/proc`, the folder is checked again before each use and
the cache turned off, with a warning, once it changed).
JAX names each entry by a key of the program, the XLA flags, the device and
the jax/jaxlib versions; symnet stores that key, symnet's version and a
SHA-256 digest inside each entry and uses an entry only if all three match,
so an entry copied over another's name, one from another symnet, or a
damaged one is ignored (with a warning) and replaced by a fresh compilation.
The digest is not a signature: it guards against mix-ups and damage, while
the folder's ownership and mode keep others out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import warnings
from pathlib import Path
from typing import Any

import jax

from ..base.version import __version__
from .cache_folder import Folder, open_folder

__all__ = [
    "cache_dir",
    "CheckedCache",
    "default_cache_dir",
    "enable_compile_cache",
    "ENV",
    "unwrap_entry",
    "wrap_entry",
]

#: The environment variable naming the cache folder (or `off`).
ENV = "SYMNET_COMPILE_CACHE"
_OFF = {"off", "none", "0", "false", "no", ""}


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/symnet/xla` (`~/.cache/symnet/xla` where XDG_CACHE_HOME is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "symnet" / "xla"


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder the cache would use for `path` (see the module doc), or None where it is off."""
    if path is None:
        path = os.environ.get(ENV)
        if path is None:
            return default_cache_dir()
    text = os.fspath(path)
    if text.strip().lower() in _OFF:
        return None
    return Path(text).expanduser()


#: The folders `enable_compile_cache` checked, by the path JAX was given for each.
_FOLDERS: dict[str, Folder] = {}


def _open_checked(folder: Path) -> tuple[Folder, str] | str:
    """`(the checked folder, the path to give JAX)` for `folder`, or why it is not usable."""
    opened = open_folder(str(folder))
    if isinstance(opened, str):
        return opened
    probe = f".probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=opened.fd))
        os.unlink(probe, dir_fd=opened.fd)
    except OSError as e:
        os.close(opened.fd)
        return e.strerror or str(e)
    path = opened.proc_path or opened.path
    _FOLDERS[path] = opened
    return opened, path


#: The first bytes of an entry symnet wrote: then a JSON line (key, symnet version, digest), then JAX's bytes.
_MAGIC = b"symnet-xla-cache 1\n"


class CheckedCache:
    """JAX's file cache with each entry bound to its key, symnet's version and a digest (see the module doc)."""

    def __init__(self, base: Any, folder: Folder | None = None):
        self._base = base
        self._folder = folder
        self._off = False

    def _usable(self) -> bool:
        """Whether the folder is still the one checked (see the module doc); warns once when it is not."""
        if self._folder is None or self._off:
            return not self._off
        change = self._folder.changed()
        if change is None:
            return True
        if self._folder.proc_path is not None:  # JAX reads the opened folder: go on with it
            warnings.warn(f"compile cache: {change}; symnet goes on with the folder it checked", stacklevel=3)
            self._folder = None
            return True
        warnings.warn(f"compile cache: {change}; compiling without it from now on", stacklevel=3)
        self._off = True
        return False

    @property
    def _path(self) -> Any:
        return self._base._path

    @_path.setter
    def _path(self, value: Any) -> None:
        self._base._path = value

    def get(self, key: str) -> bytes | None:
        if not self._usable():
            return None
        stored = self._base.get(key)
        if stored is None:
            return None
        value = unwrap_entry(key, stored)
        if value is None:
            self._forget(key)
            warnings.warn(
                f"compile cache entry {key} in {self._path} is not the one symnet stored for it (another "
                "program's, another symnet's, or damaged): compiling afresh and replacing it",
                stacklevel=2,
            )
        return value

    def _forget(self, key: str) -> None:
        """Remove the entry stored under `key`: JAX's cache never overwrites an entry, so the fresh one could
        not replace it otherwise."""
        from jax._src import lru_cache

        suffix = getattr(lru_cache, "_CACHE_SUFFIX", "-cache")
        folder = getattr(self._base, "path", None)
        if folder is not None:
            with contextlib.suppress(OSError):
                (Path(str(folder)) / f"{key}{suffix}").unlink()

    def put(self, key: str, value: bytes) -> None:
        if self._usable():
            self._base.put(key, wrap_entry(key, value))

    def __getattr__(self, name: str) -> Any:  # anything else JAX asks of its cache
        return getattr(self._base, name)


def wrap_entry(key: str, value: bytes) -> bytes:
    """The bytes symnet stores for JAX's entry `value` under `key`."""
    record = {"key": key, "symnet": __version__, "sha256": hashlib.sha256(value).hexdigest()}
    return _MAGIC + json.dumps(record).encode() + b"\n" + value


def unwrap_entry(key: str, stored: bytes) -> bytes | None:
    """JAX's bytes of an entry symnet stored under `key` with this symnet, or None if it is not that."""
    if not stored.startswith(_MAGIC):
        return None
    line, sep, value = stored[len(_MAGIC) :].partition(b"\n")
    try:
        record = json.loads(line) if sep else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    ok = (
        record.get("key") == key
        and record.get("symnet") == __version__
        and record.get("sha256") == hashlib.sha256(value).hexdigest()
    )
    return value if ok else None


def _check_entries() -> str | None:
    """Make JAX's cache check symnet's entries (None), or say why this jax cannot."""
    try:
        from jax._src import compilation_cache
    except ImportError:
        return "this jax has no jax._src.compilation_cache"
    make = getattr(compilation_cache, "get_file_cache", None)
    if make is None:
        return "this jax's compilation cache has no get_file_cache"
    if getattr(make, "symnet_checked", False):
        return None

    def get_file_cache(path: str) -> Any:
        made = make(path)
        return None if made is None else (CheckedCache(made[0], _FOLDERS.get(path)), made[1])

    get_file_cache.symnet_checked = True  # type: ignore[attr-defined]
    compilation_cache.get_file_cache = get_file_cache
    return None


def enable_compile_cache(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Turn JAX's persistent compilation cache on in `cache_dir(path)` for every later compilation
    of this process; the folder, or None where the cache is off or the folder is unusable (a warning
    says why). Only the first folder a process compiles with counts (JAX opens its cache once)."""
    folder = cache_dir(path)
    if folder is None:
        return None
    opened = _check_entries() or _open_checked(folder)
    if isinstance(opened, str):
        warnings.warn(f"compile cache {folder} is not usable ({opened}); compiling without it", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", opened[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder
