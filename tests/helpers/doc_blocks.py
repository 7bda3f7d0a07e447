"""The ```python blocks of a Markdown page, and running one as written in a fresh namespace."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

from helpers import REPO


def python_blocks(page: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def run_block(page: pathlib.Path, k: int, folder: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Block `k` of `page` run in `folder` (with a link to the repository's examples/); its namespace."""
    (folder / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(folder)
    namespace: dict[str, Any] = {"__name__": "__doc_block__"}
    exec(compile(python_blocks(page)[k], f"{page.relative_to(REPO)} (block {k + 1})", "exec"), namespace)
    return namespace
