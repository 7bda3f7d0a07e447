"""The real-Kaldi conformance corpus (kaldi-oracle-dev.tar.xz), unpacked once into a cache.

The development half of the corpus ships with the repository as
`tests/data/kaldi-oracle-dev.tar.xz` (measurements of a real Kaldi build; its
README.md explains the files of every case), so a fresh clone runs every parity
test with nothing beside it. Where a `shared/kaldi-oracle-dev.tar.xz` lies beside
the repository or above it (the development machines' `../shared`), that one is
used instead; `SYMNET_KALDI_CORPUS=path/to/corpus.tar.xz` names another. The
tarball is unpacked, once per size and modification time, into the temporary
directory.
"""

from __future__ import annotations

import csv
import os
import pathlib
import shutil
import tarfile
import tempfile

TARBALL = "kaldi-oracle-dev.tar.xz"
ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository
#: The copy that ships with the repository.
SHIPPED = ROOT / "tests" / "data" / TARBALL


def tarball() -> pathlib.Path:
    """The corpus tarball: `$SYMNET_KALDI_CORPUS`, else the nearest ancestor's `shared/`, else the shipped copy."""
    named = os.environ.get("SYMNET_KALDI_CORPUS")
    if named:
        return pathlib.Path(named)
    for folder in ROOT.parents:
        candidate = folder / "shared" / TARBALL
        if candidate.is_file():
            return candidate
    return SHIPPED


def corpus_dir(path: pathlib.Path | None = None) -> pathlib.Path:
    """The unpacked corpus (its `kaldi_oracle_dev` folder) of the tarball at `path` (default `tarball()`)."""
    path = path or tarball()
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
    """The cases of index.tsv with this source (hand, xconfig or kaldi-gen)."""
    with open(corpus_dir() / "index.tsv", newline="") as f:
        return [row["case"] for row in csv.DictReader(f, delimiter="\t") if row["source"] == source]
