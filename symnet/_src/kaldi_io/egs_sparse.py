"""Kaldi's SparseMatrix in egs (sparse-matrix.cc: posterior targets), kept sparse.

A sparse matrix costs a file 13 bytes a row and 10 an element, but its dense form `rows x dim` floats: a 14 KB
file can say 1,000 rows of 268,435 columns. So it is read and used as its pairs (`SparseRows`; what
`egs_chunks` takes from it, `argmax_and_sum`, is computed from them), and made dense only where asked
(`SparseRows.toarray`, `NnetIo.matrix`), up to `MAX_DENSE_VALUES`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ..base.bounded import gather, record_offsets
from ..base.errors import KaldiDataError

__all__ = ["MAX_DENSE_VALUES", "PairRows", "SparseRows", "make_sparse", "read_sparse_binary"]

#: The most values a matrix of an example may have once dense (features, or sparse targets made dense).
MAX_DENSE_VALUES = 1 << 28

_PAIR = np.dtype([("s1", "u1"), ("col", "<i4"), ("s2", "u1"), ("value", "<f4")])
_ROW_HEAD = np.frombuffer(b"SV ", np.uint8)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@attrs.frozen(eq=False)
class SparseRows:
    """A Kaldi SparseMatrix as read: row r's (column, value) pairs are `cols[offsets[r]:offsets[r + 1]]` and
    `values[...]`; `dim` columns."""

    dim: int
    offsets: np.ndarray  # int64 [rows + 1]
    cols: np.ndarray  # int32
    values: np.ndarray  # float32

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    def toarray(self) -> np.ndarray:
        """The dense [rows, dim] float32 matrix (a pair repeated in a row: the last one, as Kaldi's CopyToMat);
        KaldiDataError if it would have more than `MAX_DENSE_VALUES` values."""
        if self.num_rows * self.dim > MAX_DENSE_VALUES:
            raise KaldiDataError(
                f"a sparse {self.num_rows} x {self.dim} matrix ({len(self.cols)} elements) is more than "
                f"{MAX_DENSE_VALUES} values dense; use its pairs (SparseRows)"
            )
        out = np.zeros((self.num_rows, self.dim), np.float32)
        out[self.rows(), self.cols] = self.values
        return out

    def rows(self) -> np.ndarray:
        """The row of each pair."""
        return np.repeat(np.arange(self.num_rows), np.diff(self.offsets))

    def argmax_and_sum(self) -> tuple[np.ndarray, np.ndarray]:
        """What `np.argmax(toarray(), 1)` and `toarray().sum(1)` give (int32, float32 [rows]), from the pairs
        alone: the first column of the largest value (a NaN first), absent columns counting as 0; the sum is
        taken in float64."""
        rows, count = self.rows(), self.num_rows
        order = np.lexsort((np.arange(len(rows)), self.cols, rows))  # by row, column, then file order
        r, c, v = rows[order], self.cols[order], self.values[order]
        last = np.ones(len(r), bool)  # the pair a dense row keeps: the last of its (row, column)
        last[:-1] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
        r, c, v = r[last], c[last], v[last]
        sums = np.bincount(r, weights=v, minlength=count).astype(np.float32)
        # a row's best pair: NaN first, then the largest value, then the smallest column
        best = np.lexsort((c, -np.nan_to_num(v, nan=0.0, posinf=np.inf, neginf=-np.inf), ~np.isnan(v), r))
        first = np.ones(len(r), bool)
        first[1:] = r[best][1:] != r[best][:-1]
        top_row, top_col, top_value = r[best][first], c[best][first], v[best][first]
        # the first absent column (a 0 in the dense row): a row's sorted columns are 0, 1, ... up to it
        rank = np.arange(len(r)) - np.repeat(np.searchsorted(r, np.arange(count)), np.bincount(r, minlength=count))
        gap = np.bincount(r[c == rank], minlength=count)
        argmax = np.zeros(count, np.int64)  # rows with no pairs: all 0, column 0
        has_gap = gap < self.dim
        argmax[has_gap] = gap[has_gap]
        wins = np.isnan(top_value) | (top_value > 0) | ((top_value == 0) & (top_col < gap[top_row]))
        wins |= ~has_gap[top_row]
        argmax[top_row[wins]] = top_col[wins]
        return argmax.astype(np.int32), sums


class PairRows:
    """Rows of (column, value) pairs added one row at a time (text archives), kept in flat arrays: no object a
    row or a pair."""

    def __init__(self, rows: int):
        self.counts = np.zeros(rows, np.int64)
        self.cols, self.values = array("q"), array("d")

    def add(self, row: int, cols: list[int], values: list[float]) -> None:
        self.cols.extend(cols)
        self.values.extend(values)
        self.counts[row] = len(cols)

    def sparse(self, dim: int, fail: Callable[[str], Exception]) -> SparseRows:
        return make_sparse(dim, self.counts, np.array(self.cols, np.int64), np.array(self.values), fail)


def make_sparse(
    dim: int, counts: np.ndarray, cols: np.ndarray, values: np.ndarray, fail: Callable[[str], Exception]
) -> SparseRows:
    """SparseRows of rows of `counts` pairs, each column checked against `dim`."""
    if len(cols) and (cols.min() < 0 or cols.max() >= dim):
        bad = int(cols.max() if cols.max() >= dim else cols.min())
        raise fail(f"a sparse element in column {bad} of a matrix of {dim} columns")
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return SparseRows(dim, _frozen(offsets), _frozen(cols.astype(np.int32)), _frozen(values.astype(np.float32)))


def read_sparse_binary(data: Any, pos: int, rows: int, fail: Callable[[str], Exception]) -> tuple[SparseRows, int]:
    """`rows` binary sparse rows (`SV `, dim, count, then (column, value) pairs, each number with its size byte
    4, as Kaldi writes them) from byte `pos` of `data`: the SparseRows and the position after them."""

    def row_fail(row: int, message: str) -> Exception:
        return fail(f"sparse row {row} {message}")

    offsets = record_offsets(data, pos, rows, head=13, field="i", at=9, item=10, items="elements", fail=row_fail)
    starts = offsets[:-1]
    heads = gather(data, starts, 13).reshape(-1, 13)
    dims = np.ascontiguousarray(heads[:, 4:8]).view("<i4")[:, 0].astype(np.int64)
    counts = (np.diff(offsets) - 13) // 10
    for bad, problem in (
        (~(heads[:, :3] == _ROW_HEAD).all(1), lambda k: "does not start with 'SV ' (as Kaldi writes it)"),
        ((heads[:, 3] != 4) | (heads[:, 8] != 4), lambda k: "has a dim or count without its size byte 4"),
        ((dims < 0) | (counts > dims), lambda k: f"has {counts[k]} elements in a dim of {dims[k]}"),
        (dims != dims[:1], lambda k: f"has dim {dims[k]}, row 0 dim {dims[0]}"),
    ):
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise fail(f"sparse row {row} {problem(row)}")
    pairs = gather(data, starts + 13, 10 * counts).view(_PAIR)
    bad = np.flatnonzero((pairs["s1"] != 4) | (pairs["s2"] != 4))
    if len(bad):
        row = int(np.searchsorted(np.cumsum(counts), bad[0], "right"))
        raise fail(f"sparse row {row}: an element without its size bytes 4")
    return make_sparse(int(dims[0]) if rows else 0, counts, pairs["col"], pairs["value"], fail), int(offsets[-1])
