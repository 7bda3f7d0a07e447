"""The real-Kaldi conformance corpus (shared/kaldi-oracle-dev.tar.xz), unpacked once into a cache.

The tarball lives in the `shared/` folder next to the repository (CI puts it
in `../shared`; a git worktree one level deeper finds the same folder one
level up: the nearest ancestor's `shared/` is used). It is unpacked, once per
tarball size and modification time, into the temporary directory; tests that
need it skip, with the reason, when it is absent. Its README.md explains the
files of every case.
"""

from __future__ import annotations

import csv
import os
import pathlib
import shutil
import tarfile
import tempfile

import pytest

TARBALL = "kaldi-oracle-dev.tar.xz"
ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository


def tarball() -> pathlib.Path | None:
    """The corpus tarball in the nearest ancestor's shared/ folder, or None."""
    for folder in (ROOT, *ROOT.parents):
        candidate = folder / "shared" / TARBALL
        if candidate.is_file():
            return candidate
    return None


def corpus_dir() -> pathlib.Path:
    """The unpacked corpus (its `kaldi_oracle_dev` folder); skips the test when the tarball is absent."""
    path = tarball()
    if path is None:
        pytest.skip(f"the Kaldi corpus is absent: no shared/{TARBALL} beside the repository or above it")
    stat = path.stat()
    cache = pathlib.Path(tempfile.gettempdir()) / "symnet-kaldi-oracle" / f"{stat.st_size}-{stat.st_mtime_ns}"
    done = cache / "kaldi_oracle_dev"
    if not done.is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix="unpack-", dir=cache.parent))
        with tarfile.open(path, "r:xz") as tar:
            tar.extractall(staging, filter="data")
        try:
            os.replace(staging, cache)  # atomic: a concurrent unpacker either wins or finds it done
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return done


def case_names(source: str) -> list[str]:
    """The cases of index.tsv with this source (hand, xconfig or kaldi-gen), or [] without the corpus."""
    if tarball() is None:
        return []
    with open(corpus_dir() / "index.tsv", newline="") as f:
        return [row["case"] for row in csv.DictReader(f, delimiter="\t") if row["source"] == source]
