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
only programs that took a second or more). JAX keys each entry by the
program, the XLA flags, the device and the jax/jaxlib versions, so an entry
is used only where it is the same executable. A folder that cannot be
created or written to is a warning, never an error: the run goes on
compiling as it would without the cache.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import jax

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


def _writable(folder: Path) -> str | None:
    """None if `folder` exists (made if need be) and a file can be written in it; else why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def enable_compile_cache(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Turn JAX's persistent compilation cache on in `cache_dir(path)` for every later compilation
    of this process; the folder, or None where the cache is off or the folder is unusable (a warning
    says why). Only the first folder a process compiles with counts (JAX opens its cache once)."""
    folder = cache_dir(path)
    if folder is None:
        return None
    problem = _writable(folder)
    if problem is not None:
        warnings.warn(f"compile cache {folder} is not usable ({problem}); compiling without it", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder
