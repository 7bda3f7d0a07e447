"""Shared test helpers, importable from every test module as `helpers` (pytest puts tests/ on the path).

from helpers import EXAMPLES, REPO                 # the repository and its examples/ folder
from helpers.reference import Reference            # the reference evaluator over Indexes
from helpers.kaldi_models import NNET_TEXT         # small Kaldi model files written by hand
from helpers import fixture_script                 # a fixture folder's make.py, imported
from helpers import unpack_corpus_samples          # the shipped corpus samples, unpacked
"""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path
from types import ModuleType

#: The repository's root folder (README.md, docs/, examples/, benchmarks/, notebooks/).
REPO = Path(__file__).resolve().parents[2]
#: The example Kaldi configs that ship with the repository.
EXAMPLES = REPO / "examples"


def fixture_script(folder: Path) -> ModuleType:
    """A fixture folder's `make.py`, imported (its option tables say what the fixture's files are)."""
    spec = importlib.util.spec_from_file_location(f"make_{folder.name.replace('-', '_')}", folder / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unpack_corpus_samples(folder: Path) -> Path:
    """The shipped corpus samples (tests/data/corpus-samples/samples.tar.xz: digits/ and commands/, made with
    flite and espeak-ng) unpacked into `folder`; returns it."""
    with tarfile.open(REPO / "tests" / "data" / "corpus-samples" / "samples.tar.xz") as tar:
        tar.extractall(folder, filter="data")
    return folder
