"""Shared test helpers, importable from every test module as `helpers` (pytest puts tests/ on the path).

from helpers import EXAMPLES, REPO                 # the repository and its examples/ folder
from helpers.reference import Reference            # the reference evaluator over Indexes
from helpers.kaldi_models import NNET_TEXT         # small Kaldi model files written by hand
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root folder (README.md, docs/, examples/, benchmarks/, notebooks/).
REPO = Path(__file__).resolve().parents[2]
#: The example Kaldi configs that ship with the repository.
EXAMPLES = REPO / "examples"
