"""Kaldi's binary Index vectors (nnet-common.cc, WriteIndexVector), decoded vectorised.

Each Index is a byte: -124..124 is the step of t from the Index before (n and x kept; for the first one, t
itself with n = x = 0), and 127 is followed by n, t and x in full (an int32 each, with its size byte 4).
Only the full Indexes are walked one at a time (`bytes.find` jumps to each: they take 16 bytes of the file
each); everything else is numpy, in blocks, so the cost is a few passes over the bytes and the int32 [size, 3]
result.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base.bounded import BLOCK_VALUES, gather

__all__ = ["read_index_vector"]

_FULL = 127
_INT32 = (-(2**31), 2**31 - 1)


def read_index_vector(data: Any, pos: int, size: int, fail: Callable[[str], Exception]) -> tuple[np.ndarray, int]:
    """`size` Indexes from byte `pos` of `data`: int32 [size, 3] (n, t, x), and the position after them."""
    fulls = array("q")
    end, k = len(data), 0  # k: Indexes before `pos`
    while k < size:
        q = data.find(b"\x7f", pos, pos + (size - k))
        if q < 0:
            pos, k = pos + (size - k), size
            break
        fulls.append(q)
        k += q - pos + 1
        pos = q + 16
    if pos > end:
        raise fail(f"the file ends inside the {size} indexes")
    full = np.frombuffer(fulls, np.int64) if len(fulls) else np.zeros(0, np.int64)
    first = pos - (size + 15 * len(full))  # where the vector starts
    starts = np.concatenate([[first], full + 16])
    codes = gather(data, starts, np.concatenate([full + 1, [pos]]) - starts).view(np.int8)
    payload = gather(data, full + 1, 15).reshape(-1, 15)
    if len(payload) and (payload[:, [0, 5, 10]] != 4).any():
        k = int(np.flatnonzero(codes == _FULL)[np.flatnonzero((payload[:, [0, 5, 10]] != 4).any(1))[0]])
        raise fail(f"index {k}: n, t and x are not int32s with their size byte 4")
    values = np.ascontiguousarray(payload[:, [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14]]).view("<i4")
    return _decode(codes, values.reshape(-1, 3).astype(np.int64), fail), pos


def _decode(codes: np.ndarray, full: np.ndarray, fail: Callable[[str], Exception]) -> np.ndarray:
    """The Indexes of `codes` (one byte each, 127 where `full` gives n, t, x), block by block."""
    bad = np.flatnonzero((np.abs(codes.astype(np.int16)) > 124) & (codes != _FULL))
    if len(bad):
        raise fail(f"index {int(bad[0])}: unexpected byte {int(codes[bad[0]])} (Kaldi's use -124..124 and 127)")
    out = np.empty((len(codes), 3), np.int32)
    last = np.zeros(3, np.int64)  # n, t, x of the Index before the block
    used = 0  # full Indexes before the block
    for start in range(0, len(codes), BLOCK_VALUES):
        block = codes[start : start + BLOCK_VALUES]
        is_full = block == _FULL
        group = np.cumsum(is_full)  # 0: after the Index before the block; g: after the block's g-th full one
        count = int(group[-1])
        steps = np.where(is_full, 0, block).astype(np.int64)
        t = np.cumsum(steps)
        here = full[used : used + count]
        base = np.concatenate([[last[1]], here[:, 1] - t[is_full]])
        t += base[group]
        if len(t) and (t.min() < _INT32[0] or t.max() > _INT32[1]):
            k = start + int(np.flatnonzero((t < _INT32[0]) | (t > _INT32[1]))[0])
            raise fail(f"index {k}: t leaves the int32 range")
        out[start : start + len(block), 1] = t
        for column in (0, 2):
            out[start : start + len(block), column] = np.concatenate([[last[column]], here[:, column]])[group]
        last = out[start + len(block) - 1].astype(np.int64)
        used += count
    return out
