"""symnet._src.base.host_memory: `import symnet` leaves malloc alone; `tune_host_memory()` has glibc keep freed
blocks, so a program's big outputs stop page-faulting on every call; the command line and `fit` call it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from symnet._src.base import host_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

_WHERE = """
import ctypes, json, sys, threading
import symnet, symnet._src.base.host_memory

if sys.argv[1:] == ["tune"]:
    symnet.tune_host_memory()

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]


def in_heap(pointer):
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            return low <= pointer < high
    return False


blocks = {"main": libc.malloc(64 << 20)}
worker = threading.Thread(target=lambda: blocks.setdefault("thread", libc.malloc(64 << 20)))
worker.start()
worker.join()
print(json.dumps({"mode": symnet._src.base.host_memory.mode, **{k: in_heap(p) for k, p in blocks.items()}}))
"""


def where_blocks_go(*args: str, **env: str) -> dict:
    """In a fresh process, after `import symnet` (and `tune_host_memory()` with `"tune"`): whether 64 MB blocks
    from the main thread and from a new thread are in the heap."""
    clean = {k: v for k, v in os.environ.items() if k != host_memory.ENV and not k.startswith("MALLOC_")}
    clean.pop("GLIBC_TUNABLES", None)
    run = subprocess.run(
        [sys.executable, "-c", _WHERE, *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_import_leaves_malloc_alone():
    """glibc's default maps a 64 MB block afresh (and unmaps it when freed): so it stays after `import symnet`."""
    assert where_blocks_go() == {"mode": "unset", "main": False, "thread": False}


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_after_tuning_big_blocks_of_every_thread_come_from_the_main_heap():
    """`tune_host_memory()` serves a 64 MB block, from any thread, from the main heap, which keeps freed pages
    for the next call (benchmarks/host_memory.py: the page faults and step times this saves)."""
    assert where_blocks_go("tune") == {"mode": "kept", "main": True, "thread": True}
    assert where_blocks_go("tune", SYMNET_HOST_MEMORY="system") == {"mode": "system", "main": False, "thread": False}


def test_the_command_line_and_fit_tune_it_first(monkeypatch):
    """Both call `tune_host_memory()` before anything else (a usage error or bad data comes after it)."""
    from symnet._src.app import cli
    from symnet._src.train import loop

    class Tuned(Exception):
        pass

    def tune() -> str:
        raise Tuned

    monkeypatch.setattr(cli, "tune_host_memory", tune)
    monkeypatch.setattr(loop, "tune_host_memory", tune)
    with pytest.raises(Tuned):
        cli.main(["info", "no-such-model"])
    with pytest.raises(Tuned):
        loop.fit(None, None, None)


@pytest.fixture(autouse=True)
def _restore_mode(monkeypatch):
    monkeypatch.setattr(host_memory, "mode", host_memory.mode)  # tune_host_memory() below sets it; put it back after


@pytest.mark.parametrize("value", ["system", "SYSTEM", " system "])
def test_environment_turns_it_off(monkeypatch, value):
    monkeypatch.setenv(host_memory.ENV, value)
    monkeypatch.setattr(host_memory, "keep_freed_memory", lambda: pytest.fail("must not tune malloc"))
    assert host_memory.tune_host_memory() == "system" == host_memory.mode


@pytest.mark.parametrize(
    "name, value",
    [("MALLOC_ARENA_MAX", "4"), ("MALLOC_TRIM_THRESHOLD_", "0"), ("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")],
)
def test_a_process_that_tunes_malloc_itself_is_left_alone(monkeypatch, name, value):
    monkeypatch.delenv(host_memory.ENV, raising=False)
    monkeypatch.setenv(name, value)
    monkeypatch.setattr(host_memory, "keep_freed_memory", lambda: pytest.fail("must not tune malloc"))
    assert host_memory.tune_host_memory() == "user"


def test_elsewhere_it_is_unsupported_not_an_error(monkeypatch):
    for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(host_memory.ENV, raising=False)
    monkeypatch.setattr(host_memory.platform, "system", lambda: "Darwin")
    assert host_memory.keep_freed_memory() is False
    assert host_memory.tune_host_memory() == "unsupported"
