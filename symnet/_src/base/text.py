"""Words from files and command lines: numbers as Kaldi writes them, and text quoted in errors.

`str.isdigit` and `int()` take any Unicode digit (`'²'.isdigit()` is True, and
`int('²')` then fails), so a number a file gives is checked with `is_digits`
(ASCII 0-9 only) or read with `ascii_int`. `clip` shortens what an error
quotes, so that a 400 KB line is not echoed whole.
"""

from __future__ import annotations

import re

__all__ = ["QUOTE_LIMIT", "ascii_int", "clip", "is_digits"]

#: The characters of a file's text an error message quotes at most.
QUOTE_LIMIT = 200

_DIGITS = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")


def is_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits (nothing else: no sign, no space, no '²')."""
    return _DIGITS.fullmatch(text) is not None


def ascii_int(text: str) -> int | None:
    """`text` (an optional sign and ASCII digits, spaces around allowed) as an int; None for anything else."""
    word = text.strip()
    return int(word) if _INT.fullmatch(word) else None


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text`, or its first `limit` characters and '…' (with the length) where it is longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"
