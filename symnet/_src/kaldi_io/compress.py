"""Kaldi's CompressedMatrix made from a float matrix (`CompressedMatrix::CopyFromMat`, matrix/compressed-matrix.cc),
with the default `kAutomaticMethod`: what `nnet3-get-egs` and `nnet3-chain-get-egs` do to every eg's input rows
unless told `--compress=false`, so that egs cut on the fly hold the values Kaldi's trainers read.

More than 8 rows: `CM`, one byte a value between its column's 0th, 25th, 75th and 100th percentiles (themselves
16-bit fractions of the matrix's range); else `CM2`, two bytes a value across the range. `compressed` gives the
format, header and data as Kaldi writes them; `kaldi_compressed` the float32 values Kaldi reads back (its
CopyToMat, `egs_parse.decode_compressed`). Float arithmetic is Kaldi's: float32 throughout, rounding by
truncation after adding a double 0.5 (0.499 for the 16-bit values).
"""

from __future__ import annotations

import numpy as np

from ..base.errors import KaldiDataError
from .egs_parse import decode_compressed

__all__ = ["compressed", "kaldi_compressed"]

_F = np.float32
#: Kaldi's 1/65535 as the float32 constant of Uint16ToFloat.
_STEP = _F(1.52590218966964e-05)


def compressed(x: np.ndarray) -> tuple[str, float, float, bytes]:
    """`(kind, min_value, range, data)` of float matrix `x` [rows, cols] compressed as Kaldi compresses it by default
    (`kind` "CM" or "CM2"; `data` the bytes after the 16-byte header). KaldiDataError for an empty matrix or
    values that are not finite (Kaldi asserts)."""
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or not x.size:
        raise KaldiDataError(f"a compressed matrix needs rows and columns, got shape {x.shape}")
    lo, hi = _F(x.min()), _F(x.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise KaldiDataError("cannot compress a matrix with NaN or infinite values (Kaldi's CompressedMatrix)")
    if hi == lo:  # a constant matrix: the range is made positive
        hi = _F(np.float64(lo) + (1.0 + abs(np.float64(lo))))
    span = _F(hi - lo)
    rows, cols = x.shape
    if rows <= 8:
        return "CM2", float(lo), float(span), _to_uint16(x, lo, span).astype("<u2").tobytes()
    heads = _column_headers(x, lo, span)  # [cols, 4] uint16
    p = lo + (span * _STEP) * heads.astype(np.float32)  # Uint16ToFloat, [cols, 4]
    q = _to_char(x.T, *(p[:, i : i + 1] for i in range(4)))  # [cols, rows], stored column by column
    return "CM", float(lo), float(span), heads.astype("<u2").tobytes() + q.astype(np.uint8).tobytes()


def kaldi_compressed(x: np.ndarray) -> np.ndarray:
    """The float32 values Kaldi reads back from `x` compressed (`compressed`, then its CopyToMat)."""
    kind, lo, span, data = compressed(x)
    rows, cols = np.shape(x)
    return decode_compressed(kind, lo, span, rows, cols, data)


def _to_uint16(x: np.ndarray, lo: np.float32, span: np.float32) -> np.ndarray:
    """Kaldi's FloatToUint16: the fraction of the range, clipped to [0, 1], times 65535 rounded (+ 0.499)."""
    f = np.clip((x - lo) / span, _F(0.0), _F(1.0))
    return ((f * _F(65535)).astype(np.float64) + 0.499).astype(np.int64)


def _column_headers(x: np.ndarray, lo: np.float32, span: np.float32) -> np.ndarray:
    """Kaldi's ComputeColHeader for every column: the 16-bit values of its 0th, 25th, 75th and 100th percentiles
    (sorted positions 0, n/4, 3(n/4) and n - 1), each at least one above the one before, [cols, 4]."""
    rows = len(x)
    quarter = rows // 4
    s = np.sort(x, axis=0)
    picked = _to_uint16(s[[0, quarter, 3 * quarter, rows - 1]], lo, span).T  # [cols, 4]
    p0 = np.minimum(picked[:, 0], 65532)
    p25 = np.minimum(np.maximum(picked[:, 1], p0 + 1), 65533)
    p75 = np.minimum(np.maximum(picked[:, 2], p25 + 1), 65534)
    p100 = np.maximum(picked[:, 3], p75 + 1)
    return np.stack([p0, p25, p75, p100], axis=1).astype(np.uint16)


def _to_char(v: np.ndarray, p0: np.ndarray, p25: np.ndarray, p75: np.ndarray, p100: np.ndarray) -> np.ndarray:
    """Kaldi's FloatToChar of values `v` [cols, rows] between their columns' percentiles (each [cols, 1]): 0-64
    below the 25th, 64-192 below the 75th, 192-255 above, each rounded (truncation after + 0.5) and clipped."""

    def level(lower: np.ndarray, upper: np.ndarray, steps: int, base: int) -> np.ndarray:
        f = (v - lower) / (upper - lower)
        return base + np.trunc((f * _F(steps)).astype(np.float64) + 0.5).astype(np.int64)

    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.clip(level(p0, p25, 64, 0), 0, 64)
        mid = np.clip(level(p25, p75, 128, 64), 64, 192)
        high = np.clip(level(p75, p100, 63, 192), 192, 255)
    return np.where(v < p25, low, np.where(v < p75, mid, high))
