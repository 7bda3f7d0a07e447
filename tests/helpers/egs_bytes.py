"""Hand-made binary nnet3 examples: for tests of the egs reader's Index vectors, and archives of whole examples."""

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


def _indexes(first_t: int, count: int) -> bytes:
    """Kaldi's compact Index vector of `count` consecutive frames from `first_t` (n = x = 0)."""
    return struct.pack("<b", first_t) + b"\x01" * (count - 1)


def _compressed(matrix: np.ndarray) -> bytes:
    """`matrix` as Kaldi's CM compressed matrix (kaldiio writes it as Kaldi does)."""
    import io

    import kaldiio

    buffer = io.BytesIO()
    kaldiio.save_ark(buffer, {"m": np.asarray(matrix, np.float32)}, compression_method=2)
    data = buffer.getvalue()
    return data[data.index(b"\0B") + 2 :]


def nnet3_eg(
    key: str,
    features: np.ndarray,
    pdfs: np.ndarray,
    *,
    left: int,
    right: int,
    num_pdfs: int,
    weights: np.ndarray | None = None,
    compress: bool = False,
) -> bytes:
    """A binary nnet3 example as nnet3-get-egs writes one: `input` of `features` [left + frames + right, dim] at
    t = -left..., `output` of one posterior (`pdfs[t]`, weight `weights[t]`, default 1) per frame at t = 0..."""
    features = np.asarray(features, np.float32)
    frames = len(pdfs)
    assert len(features) == left + frames + right
    weights = np.ones(frames, np.float32) if weights is None else np.asarray(weights, np.float32)
    rows = b"".join(
        b"SV \x04" + struct.pack("<i", num_pdfs) + b"\x04" + struct.pack("<i", 1)
        + b"\x04" + struct.pack("<i", int(p)) + b"\x04" + struct.pack("<f", float(w))
        for p, w in zip(pdfs, weights)
    )  # fmt: skip
    if compress:
        matrix = _compressed(features)
    else:
        matrix = b"FM \x04" + struct.pack("<i", features.shape[0]) + b"\x04" + struct.pack("<i", features.shape[1])
        matrix += features.astype("<f4").tobytes()
    return (
        key.encode()
        + b" \0B<Nnet3Eg> <NumIo> \x04"
        + struct.pack("<i", 2)
        + b"<NnetIo> input <I1V> \x04"
        + struct.pack("<i", len(features))
        + _indexes(-left, len(features))
        + matrix
        + b"</NnetIo> <NnetIo> output <I1V> \x04"
        + struct.pack("<i", frames)
        + _indexes(0, frames)
        + b"SM \x04"
        + struct.pack("<i", frames)
        + rows
        + b"</NnetIo> </Nnet3Eg> "
    )


def write_egs(path: object, sizes: list[int], *, dim: int = 4, num_pdfs: int = 5, left: int = 2, right: int = 2,
              compress: bool = False, seed: int = 0) -> list[bytes]:  # fmt: skip
    """An egs archive at `path` of one example per entry of `sizes` (its frames), random features and pdfs;
    returns each example's bytes."""
    rng = np.random.default_rng(seed)
    egs = []
    for i, frames in enumerate(sizes):
        features = rng.standard_normal((left + frames + right, dim)).astype(np.float32)
        pdfs = rng.integers(0, num_pdfs, frames)
        egs.append(nnet3_eg(f"eg-{i}", features, pdfs, left=left, right=right, num_pdfs=num_pdfs, compress=compress))
    with open(str(path), "wb") as f:
        f.write(b"".join(egs))
    return egs
