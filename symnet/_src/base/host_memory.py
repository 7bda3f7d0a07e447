"""Keep freed host memory in the process, so XLA's CPU buffers are not faulted in afresh on every call.

XLA on CPU allocates each call's outputs and temporaries with `malloc`. glibc
serves a block above its mmap threshold (128 KiB, growing to at most 32 MiB)
with a fresh `mmap` and unmaps it when it is freed, and XLA's worker threads
allocate from per-thread arenas that are trimmed back to the kernel the same
way. Every call then touches its large buffers page by page: on the 2-core
machine of docs/performance.md, a jitted program writing a fresh 26 MB array
took 13.8 ms a call with 6,401 page faults, and 3.1 ms with 640 once freed
memory is kept (`python benchmarks/host_memory.py`).

`keep_freed_memory()` has glibc serve every block from the main heap
(`M_ARENA_MAX` 1, `M_MMAP_THRESHOLD` 1 GiB) and keep what is freed there
(`M_TRIM_THRESHOLD` 2 GiB), so a training loop or a long `compute` reuses the
same pages. The cost: the process's resident memory stays at its peak instead
of shrinking between calls.

`import symnet` leaves malloc as it is: the allocator belongs to the process,
which may embed symnet beside other work. `tune_host_memory()` (also
`symnet.tune_host_memory`) is the opt-in: `symnet`'s command line calls it on
start and `symnet.train.fit` before it trains (training steps are where it was
measured to pay: docs/performance.md), and a long-running program of your own
(a training loop, a server calling `compute`) can call it first thing. It
tunes only on Linux with glibc, unless `SYMNET_HOST_MEMORY` is `system` or the
process already tunes malloc itself (any of `MALLOC_ARENA_MAX`,
`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, or a `glibc.malloc`
tunable in `GLIBC_TUNABLES`). It covers XLA's threads only if it runs before
they start (the process's first computation); later, it still covers the main
thread.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["ENV", "keep_freed_memory", "mode", "tune_host_memory"]

#: The environment variable: `system` leaves glibc's malloc as it is.
ENV = "SYMNET_HOST_MEMORY"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_USER_SETTINGS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

#: What `tune_host_memory()` did: `kept` (freed memory is kept), `system` (turned off by SYMNET_HOST_MEMORY),
#: `user` (the process tunes malloc itself), `unsupported` (not glibc) or `unset` (not called: malloc as it was).
mode = "unset"


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from the main heap and keep freed ones; False where not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, 1 << 30), (_M_TRIM_THRESHOLD, (1 << 31) - 1))
    return all(mallopt(option, value) == 1 for option, value in settings)


def tune_host_memory() -> str:
    """Have glibc's malloc keep freed memory, so XLA's large CPU buffers are reused, not page-faulted in afresh.

    Unless the environment says otherwise (see the module docstring); returns `mode`. Call it before the
    process's first computation to cover XLA's threads too; resident memory then stays at its peak.
    """
    global mode
    if os.environ.get(ENV, "").strip().lower() == "system":
        mode = "system"
    elif any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        mode = "user"
    else:
        mode = "kept" if keep_freed_memory() else "unsupported"
    return mode
