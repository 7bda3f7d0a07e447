"""Kaldi's primitives written, text or binary, as its own code writes them (the format rules: `binary`'s docstring).

Apart from the readers: a module that only writes Kaldi data loads no reader.
"""

from __future__ import annotations

import builtins
import struct
from typing import Any

import numpy as np

from ..base.errors import ModelWriteError
from .numbers import _WS_STR, INT32_MAX, INT32_MIN, _format_reals, format_real

__all__ = ["Writer"]


class Writer:
    """Writes Kaldi primitives in text or binary form into a buffer; `getvalue()` gives the bytes."""

    def __init__(self, binary: bool):
        self.binary = binary
        self.parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self.parts)

    def raw(self, data: bytes | str) -> None:
        self.parts.append(data.encode("utf-8") if isinstance(data, str) else data)

    def newline(self) -> None:
        """A newline in text mode only (Kaldi's ``if (!binary) os << std::endl``)."""
        if not self.binary:
            self.parts.append(b"\n")

    def token(self, token: str) -> None:
        if not token or any(c in _WS_STR for c in token):
            raise ModelWriteError(f"a Kaldi token must be non-empty and without whitespace, got {token!r}")
        self.parts.append(token.encode("utf-8") + b" ")

    def int(self, value: int) -> None:
        value = int(value)
        if not INT32_MIN <= value <= INT32_MAX:
            raise ModelWriteError(f"{value} does not fit in an int32")
        self.parts.append(b"\x04" + struct.pack("<i", value) if self.binary else f"{value} ".encode())

    def real(self, value: Any, double: bool) -> None:
        if self.binary:
            self.parts.append(
                b"\x08" + struct.pack("<d", float(value))
                if double
                else b"\x04" + np.float32(value).astype("<f4").tobytes()
            )
        else:
            self.parts.append((format_real(np.float64(value) if double else np.float32(value)) + " ").encode())

    def bool(self, value: bool) -> None:
        self.parts.append(b"T" if value else b"F")
        if not self.binary:
            self.parts.append(b" ")

    def vector(self, array: np.ndarray) -> None:
        array = np.asarray(array)
        double = array.dtype == np.float64
        if self.binary:
            self.token("DV" if double else "FV")
            self.int(array.shape[0])
            self.parts.append(array.astype("<f8" if double else "<f4").tobytes())
        else:
            self.parts.append(b" [ " + _format_reals(array.tolist()).encode() + b"]\n")

    def matrix(self, array: np.ndarray) -> None:
        array = np.asarray(array)
        double = array.dtype == np.float64
        rows, cols = array.shape
        if self.binary:
            self.token("DM" if double else "FM")
            self.int(rows)
            self.int(cols)
            self.parts.append(np.ascontiguousarray(array).astype("<f8" if double else "<f4").tobytes())
        elif rows == 0 or cols == 0:
            self.parts.append(b" [ ]\n")
        else:
            body = "".join("\n  " + _format_reals(row) for row in array.tolist())
            self.parts.append(b" [" + body.encode() + b"]\n")

    def packed(self, array: np.ndarray) -> None:
        """A symmetric matrix as Kaldi's packed matrices are written: its lower triangle, row by row."""
        array = np.asarray(array)
        double = array.dtype == np.float64
        size = array.shape[0]
        lower = array[np.tril_indices(size)]
        if self.binary:
            self.token("DP" if double else "FP")
            self.int(size)
            self.parts.append(lower.astype("<f8" if double else "<f4").tobytes())
        elif size == 0:
            self.parts.append(b"[ ]\n")
        else:
            rows = (_format_reals(array[i, : i + 1].tolist()) for i in range(size))
            self.parts.append(("[\n" + "\n".join(rows) + "]\n").encode())

    def int_vector(self, array: np.ndarray, pairs: builtins.bool = False) -> None:
        array = np.asarray(array, dtype=np.int64)
        if self.binary:
            count = array.shape[0]
            self.parts.append(b"\x04" + struct.pack("<i", count) + array.astype("<i4").tobytes())
        elif pairs:
            self.parts.append(("[ " + "".join(f"{a},{b} " for a, b in array.tolist()) + "]\n").encode())
        else:
            self.parts.append(("[ " + "".join(f"{v} " for v in array.tolist()) + "]\n").encode())
