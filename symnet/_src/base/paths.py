"""Path arguments of the public functions: what they take, and the error that says so."""

from __future__ import annotations

import os
from typing import Any

from .errors import ArgumentTypeError

__all__ = ["as_path"]


def as_path(value: Any, where: str) -> str:
    """`value` (a str, an `os.PathLike` or bytes) as a str path; an ArgumentTypeError naming `where` otherwise.

    `symnet.load(5)` or `load(None)` used to fail deep inside with Python's own TypeError."""
    if isinstance(value, (str, bytes, os.PathLike)):
        path = os.fsdecode(value)
        if not isinstance(path, str) or not path:
            raise ArgumentTypeError(f"{where}: the path is empty")
        return path
    raise ArgumentTypeError(f"{where} takes a file path (a str or os.PathLike), not {type(value).__name__}")
