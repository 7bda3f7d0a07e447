"""Every ```python block of README.md and docs/ runs as written, on its own (a fresh namespace per block).

Blocks run in a temporary folder holding a link to the repository's `examples/`, so the files they name
are found and the files they write go nowhere. docs/worked-examples.md has its own test
(tests/docs/test_worked_examples.py), which also checks what it trains.
"""

from __future__ import annotations

import pathlib

import pytest

from helpers import REPO
from helpers.doc_blocks import python_blocks, run_block

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
OWN_TEST = {REPO / "docs" / "worked-examples.md"}


BLOCKS = [(page, k) for page in PAGES if page not in OWN_TEST for k in range(len(python_blocks(page)))]


def test_the_pages_have_blocks() -> None:
    assert len(BLOCKS) >= 15
    assert {page.name for page, _ in BLOCKS} >= {"README.md", "training.md", "kaldi.md", "recurrence.md"}


@pytest.mark.slow
@pytest.mark.parametrize(("page", "k"), BLOCKS, ids=[f"{p.relative_to(REPO)}-{k + 1}" for p, k in BLOCKS])
def test_every_python_block_runs_as_written(
    page: pathlib.Path, k: int, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_block(page, k, tmp_path, monkeypatch)
