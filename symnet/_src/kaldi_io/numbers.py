"""Kaldi's numbers as its text streams hold them: the words its readers take, the int32 range, and floats printed
as ``os << value`` prints them.

Shared by the readers (`binary`) and the writer (`writer`), so that neither imports the other.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["INT32_MAX", "INT32_MIN", "NUMBER_RE", "format_real", "parse_real"]


_WS = b" \t\n\v\f\r"
_WS_STR = " \t\n\v\f\r"
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
# A number as Kaldi's readers take it (decimal, or inf/infinity/nan in any case); written so that each
# string matches in one way only, and matched possessively, so that a bad word costs linear time.
_NUM = (
    r"(?:[+-]?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+"
    r"|[+-]?+(?:[iI][nN][fF](?:[iI][nN][iI][tT][yY])?+|[nN][aA][nN]))"
)
#: A whole word that is a number as Kaldi's readers take it.
NUMBER_RE = re.compile(_NUM + r"\Z")
_NUMS_RE = re.compile(r"(?:[ \t\n\v\f\r]*+" + _NUM + r"(?=[ \t\n\v\f\r]|\Z))*+[ \t\n\v\f\r]*+\Z")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def format_real(value: float | np.floating[Any]) -> str:
    """A float or double as Kaldi's text streams print it (``os << value`` with precision 7)."""
    value = float(value)
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    return f"{value:.7g}"


def _format_reals(values: list[float]) -> str:
    """``"v1 v2 ... "`` as Kaldi prints them (one formatting call; per value only to sign NaNs)."""
    text = ("%.7g " * len(values)) % tuple(values)
    return "".join(format_real(v) + " " for v in values) if "nan" in text else text


def parse_real(word: str, double: bool) -> np.float32 | np.float64:
    """A number word as float32 (or float64 with `double`); overflow gives inf, as in Kaldi's readers."""
    with np.errstate(over="ignore"):
        return np.float64(float(word)) if double else np.float32(float(word))


def _reals(words: Iterable[str | bytes], double: bool, count: int = -1) -> np.ndarray:
    """Number words (each one a number: checked before) as float32, or float64 with `double`."""
    with np.errstate(over="ignore"):
        values = np.fromiter(map(float, words), dtype=np.float64, count=count)
        return values.astype(np.float64 if double else np.float32)


#: The bytes of plain decimal numbers and the whitespace between them.
_DECIMAL_BYTES = b"0123456789+-.eE" + _WS


def _decimal_words(content: str) -> bytes | None:
    """`content` as bytes where it holds only decimal digits, signs, points, exponents and whitespace,
    else None. For the words of such text Python's `float` takes exactly the words `NUMBER_RE` takes
    (inf and nan need other letters, and there are no underscores), so parsing checks them: the bulk
    path for large matrices, with no regular expression run over the text."""
    if not content.isascii():
        return None
    data = content.encode("ascii")
    return None if data.translate(None, _DECIMAL_BYTES) else data
