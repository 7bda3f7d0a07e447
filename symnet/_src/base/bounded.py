"""Binary data of hostile files read in linear time and bounded memory.

A count in a file is checked against the bytes left (`safe_read`), but what is
built from those bytes costs time and memory too. The helpers here keep both a
small multiple of the bytes a file holds: `record_offsets` walks
variable-length records (an FST's states, a sparse matrix's rows) in one tight
pass that keeps 8 bytes a record and no object per record; `gather` takes the
byte ranges the records hold in one vectorised copy; `tiles` splits a decode
into blocks of at most `BLOCK_VALUES` values, so a decoder's scratch arrays stay
that size whatever the matrix.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["BLOCK_VALUES", "compressed_bytes", "gather", "record_offsets", "tiles"]

#: The values one block of a blockwise decode holds (a float64 scratch array of them: 8 MiB).
BLOCK_VALUES = 1 << 20


def compressed_bytes(kind: str, rows: int, cols: int) -> int:
    """The data bytes after the 16-byte header of a Kaldi CompressedMatrix (`CM`, `CM2`, `CM3`): at least one a
    value, so a matrix's values are bounded by the bytes it needs."""
    return {"CM": 8 * cols + rows * cols, "CM2": 2 * rows * cols, "CM3": rows * cols}[kind]


def tiles(outer: int, inner: int, budget: int = BLOCK_VALUES) -> Iterator[tuple[slice, slice]]:
    """Blocks `(outer slice, inner slice)` covering an `outer` x `inner` array, each at most `budget` values:
    whole inner rows where one fits, else one outer index at a time in inner pieces."""
    if inner <= budget:
        step = max(budget // max(inner, 1), 1)
        for start in range(0, outer, step):
            yield slice(start, min(start + step, outer)), slice(0, inner)
        return
    for i in range(outer):
        for start in range(0, inner, budget):
            yield slice(i, i + 1), slice(start, min(start + budget, inner))


def record_offsets(
    data: Any,
    pos: int,
    count: int,
    *,
    head: int,
    field: str,
    at: int,
    item: int,
    items: str = "items",
    fail: Callable[[int, str], Exception],
) -> np.ndarray:
    """Where each of `count` consecutive records of `data` starts, from `pos`, and where the last one ends (int64,
    `count + 1` values). A record is a `head`-byte header whose `field` (a `struct` format, at byte `at` of the
    header) counts the `item`-byte `items` that follow it. A count that is negative or runs past the end of `data`
    is `fail(record, message)` (the message says what the record claims); the headers' other bytes are the
    caller's to check."""
    unpack = struct.Struct("<" + field).unpack_from
    offsets = array("q")
    append = offsets.append
    try:
        for _ in range(count):
            append(pos)
            pos += head + item * unpack(data, pos + at)[0]
        append(pos)
    except (struct.error, OverflowError):  # past the end (or, after a lying count, beyond an int64)
        append(len(data) + 1)
    found = np.frombuffer(offsets, np.int64) if len(offsets) else np.zeros(0, np.int64)
    sizes = np.diff(found)
    ends = found[1:]
    bad = np.flatnonzero((sizes < head) | (ends > len(data)))
    k = int(bad[0]) if len(bad) else len(found) - 1
    if k < count:
        start = int(found[k])
        left = len(data) - start
        if not 0 <= start <= len(data) - head:
            raise fail(k, f"is truncated: its {head}-byte header needs more than the {max(left, 0)} bytes left")
        n = unpack(data, start + at)[0]
        raise fail(k, f"claims {n} {items}, more than the {left - head} bytes left hold ({item} bytes each)")
    return found


def gather(data: Any, starts: np.ndarray, lengths: np.ndarray | int) -> np.ndarray:
    """The bytes of `data` in the ranges `starts[i]` to `starts[i] + lengths[i]` (increasing, not overlapping,
    within `data`), one after another, as uint8: one vectorised copy and 2 bytes of scratch a byte spanned."""
    starts = np.asarray(starts, np.int64)
    lengths = np.broadcast_to(np.asarray(lengths, np.int64), starts.shape)
    keep = lengths > 0
    starts, ends = starts[keep], starts[keep] + lengths[keep]
    if not len(starts):
        return np.zeros(0, np.uint8)
    low, high = int(starts[0]), int(ends[-1])
    edges = np.zeros(high - low + 1, np.int8)
    edges[starts - low] += 1
    edges[ends - low] -= 1
    inside = np.cumsum(edges[:-1], dtype=np.int8).view(bool)
    return np.frombuffer(data, np.uint8, high - low, low)[inside]
