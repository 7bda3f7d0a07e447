"""Hand-made binary nnet3 examples, for tests of the egs reader's Index vectors."""

from __future__ import annotations

import struct

import numpy as np


def binary_eg(indexes: bytes, count: int, rows: int | None = None) -> bytes:
    """Example `k1`: one input of `rows` (default `count`) x 1 FM holding 0, 1, ..., whose Index vector of
    `count` entries is `indexes` (Kaldi's WriteIndexVector bytes)."""
    rows = count if rows is None else rows
    matrix = b"FM \x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", 1)
    matrix += np.arange(rows, dtype="<f4").tobytes()
    return (
        b"k1 \0B<Nnet3Eg> <NumIo> \x04"
        + struct.pack("<i", 1)
        + b"<NnetIo> input <I1V> \x04"
        + struct.pack("<i", count)
        + indexes
        + matrix
        + b"</NnetIo> </Nnet3Eg> "
    )
