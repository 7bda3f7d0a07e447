"""A full disk under every writer: the old file stays as it was, no temporary file is left, and the error
is a symnet error that names the user's path.

The disk is made full two ways: a file-size limit (`RLIMIT_FSIZE`, in a child
process: writes past it fail with EFBIG, as they fail with ENOSPC on a full
disk) for every writer, and, where this user may mount one, a real 64 KiB
tmpfs that runs out (ENOSPC).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.writers import WRITERS

#: A campaign: `make test-all` runs it, `make test` leaves it out.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]


def run_writer(name: str, path: Path, folder: Path, limit: int | None = None) -> dict:
    args = [sys.executable, "-m", "helpers.writers", name, str(folder), str(path)]
    if limit is not None:
        args.append(str(limit))
    env = {**os.environ, "PYTHONPATH": str(TESTS), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", WRITERS)
def test_a_full_disk_leaves_the_old_file_and_no_temporary_file(name, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    target = out / "model.out"
    target.write_bytes(b"the last good one")
    outcome = run_writer(name, target, tmp_path / "inputs", limit=40)
    assert outcome["error"] is not None and outcome["symnet"], outcome
    assert str(target) in outcome["error"] and ".tmp" not in outcome["error"], outcome
    assert "File too large" in outcome["error"], outcome
    assert target.read_bytes() == b"the last good one"
    assert os.listdir(out) == ["model.out"]


@pytest.mark.parametrize("name", WRITERS)
def test_the_same_writer_succeeds_without_the_limit(name, tmp_path):
    """The control for the test above: the limit, not something else, made it fail."""
    target = tmp_path / "model.out"
    target.write_bytes(b"old")
    assert run_writer(name, target, tmp_path / "inputs")["error"] is None
    assert target.read_bytes() != b"old" and sorted(os.listdir(tmp_path)) == ["inputs", "model.out"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (needs root and permission to mount; skipped otherwise, the file-size tests stand in)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode()[-200:]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("name", ["symnet.save", "symnet compute ark:", "checkpoint.save", "atomic_write"])
def test_a_real_full_disk(name, tiny_disk, tmp_path):
    target = tiny_disk / "model.out"
    target.write_bytes(b"the last good one")
    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # fill the disk up to its last bytes
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    outcome = run_writer(name, target, tmp_path / "inputs")
    assert outcome["error"] is not None and outcome["symnet"], outcome
    assert str(target) in outcome["error"] and "No space left on device" in outcome["error"], outcome
    assert target.read_bytes() == b"the last good one"
    assert sorted(os.listdir(tiny_disk)) == ["filler", "model.out"]
