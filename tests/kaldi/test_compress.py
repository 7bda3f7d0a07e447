"""Kaldi's CompressedMatrix made by symnet (`symnet._src.kaldi_io.compress`) against the bytes Kaldi's own
`copy-feats --compress=true` wrote for the same float32 matrices (tests/data/kaldi-compress, made by its make.sh
with Kaldi 5.5.1181): one byte a value above 8 rows, two bytes at 8 rows and fewer, constant matrices and
columns, ties, a wide range."""

from __future__ import annotations

import struct
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from symnet._src.kaldi_io.compress import compressed, kaldi_compressed
from symnet._src.kaldi_io.tables import iter_table
from symnet.errors import KaldiDataError

DATA = Path(__file__).parent.parent / "data" / "kaldi-compress"


def kaldi_records() -> dict[str, tuple[str, float, float, int, int, bytes]]:
    """Each record of compressed.ark as Kaldi wrote it: kind, min, range, rows, cols and the data after the header."""
    raw, out, at = (DATA / "compressed.ark").read_bytes(), {}, 0
    while at < len(raw):
        space = raw.index(b" ", at)
        key = raw[at:space].decode()
        assert raw[space + 1 : space + 3] == b"\0B"
        token_end = raw.index(b" ", space + 3)
        kind = raw[space + 3 : token_end].decode()
        lo, span, rows, cols = struct.unpack_from("<ffii", raw, token_end + 1)
        start = token_end + 17
        size = 8 * cols + rows * cols if kind == "CM" else 2 * rows * cols
        out[key] = (kind, lo, span, rows, cols, raw[start : start + size])
        at = start + size
    return out


MATRICES = dict(iter_table(f"ark,t:{DATA / 'matrices.txt'}"))
RECORDS = kaldi_records()


def test_the_fixtures_cover_both_formats_and_the_edge_cases() -> None:
    assert set(MATRICES) == set(RECORDS)
    assert {kind for kind, *_ in RECORDS.values()} == {"CM", "CM2"}
    assert RECORDS["nine"][0] == "CM" and RECORDS["eight"][0] == "CM2"


@pytest.mark.parametrize("key", sorted(MATRICES))
def test_a_matrix_compresses_to_kaldis_bytes(key: str) -> None:
    kind, lo, span, rows, cols, data = RECORDS[key]
    x = np.asarray(MATRICES[key], np.float32)
    assert x.shape == (rows, cols)
    ours = compressed(x)
    assert ours[0] == kind
    assert np.float32(ours[1]) == np.float32(lo) and np.float32(ours[2]) == np.float32(span)
    assert ours[3] == data


@pytest.mark.parametrize("key", sorted(MATRICES))
def test_the_values_read_back_are_kaldis(key: str) -> None:
    """What `kaldi_compressed` gives (Kaldi's bytes, as the egs reader decodes them with Kaldi's CopyToMat
    arithmetic) equals kaldiio's reading of Kaldi's file (an independent decoder, whose float arithmetic is not
    Kaldi's) to within a tenth of a 16-bit step of the range."""
    x = np.asarray(MATRICES[key], np.float32)
    ours = kaldi_compressed(x)
    theirs = dict(kaldiio.load_ark(str(DATA / "compressed.ark")))[key]
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=0.1 * RECORDS[key][2] / 65535)
    assert np.abs(ours - x).max() <= (x.max() - x.min() + 1.0) / 60  # lossy: a byte (or two) a value


def test_matrices_kaldi_cannot_compress_are_errors() -> None:
    for bad in (np.zeros((0, 3), np.float32), np.array([[1.0, np.nan]], np.float32), np.array([np.inf], np.float32)):
        with pytest.raises(KaldiDataError, match="compress"):
            compressed(bad)
