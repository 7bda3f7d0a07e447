"""Indexes `(n, t, x)` and ordered sets of them, as in Kaldi nnet3 (`nnet-common.h`).

`n` is the sequence in the minibatch, `t` the frame, `x` a spare index. Kaldi's
code orders Indexes by `t`, then `n`, then `x`; so does symnet. With that
order a regular minibatch (every sequence with the same frames) is a `[T, N]`
grid of rows, and an offset in time is a contiguous block of rows.

Inside the planner an Index is an int64 key whose numeric order is Kaldi's
order, so sets are sorted numpy arrays and set algebra is vectorised.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ..base.errors import PlanError

__all__ = ["decode", "encode", "format_indexes", "Index", "INDEX_LIMIT", "IndexSet", "MAX_INDEXES", "shift"]

_BITS = 21
_OFF = 1 << (_BITS - 1)
_MASK = (1 << _BITS) - 1

#: Every Index has `0 <= n < INDEX_LIMIT` and `|t|, |x| < INDEX_LIMIT` (each is packed in 21 bits of a key).
INDEX_LIMIT = _OFF
#: The most Indexes one IndexSet may hold (its keys alone are 8 bytes each): far beyond any request.
MAX_INDEXES = 1 << 26


class Index(NamedTuple):
    """One row label: sequence `n`, frame `t`, spare `x`."""

    n: int = 0
    t: int = 0
    x: int = 0

    def __repr__(self) -> str:
        return f"({self.n}, {self.t}, {self.x})" if self.x else f"({self.n}, {self.t})"


def _range_error() -> PlanError:
    return PlanError(f"Index out of range: need 0 <= n < {_OFF} and |t|, |x| < {_OFF}")


def encode(n: np.ndarray, t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Int64 keys whose numeric order is Kaldi's order (t, then n, then x); PlanError outside INDEX_LIMIT."""
    try:
        n, t, x = (np.asarray(a, dtype=np.int64) for a in (n, t, x))
    except OverflowError:
        raise _range_error() from None
    if n.size and (
        n.min() < 0 or n.max() >= _OFF or t.min() <= -_OFF or t.max() >= _OFF or x.min() <= -_OFF or x.max() >= _OFF
    ):
        raise _range_error()
    return ((t + _OFF) << (2 * _BITS)) | (n << _BITS) | (x + _OFF)


def decode(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `(n, t, x)` arrays of `keys`."""
    keys = np.asarray(keys, dtype=np.int64)
    t = (keys >> (2 * _BITS)) - _OFF
    n = (keys >> _BITS) & _MASK
    x = (keys & _MASK) - _OFF
    return n, t, x


def shift(keys: np.ndarray, t: int = 0, x: int = 0) -> np.ndarray:
    """Keys with `t` and `x` moved by the given offsets; PlanError if a moved Index leaves INDEX_LIMIT
    (the packed fields would otherwise wrap around into each other)."""
    t, x = int(t), int(x)
    if keys.size and (t or x):
        if abs(t) >= 2 * _OFF or abs(x) >= 2 * _OFF:
            raise PlanError(f"an offset of ({t}, {x}) in (t, x) moves every Index out of range (|t|, |x| < {_OFF})")
        tt = keys >> (2 * _BITS)
        xx = keys & _MASK
        low_t, high_t = int(tt.min()) - _OFF + t, int(tt.max()) - _OFF + t
        low_x, high_x = int(xx.min()) - _OFF + x, int(xx.max()) - _OFF + x
        if low_t <= -_OFF or high_t >= _OFF or low_x <= -_OFF or high_x >= _OFF:
            frame = high_t if high_t >= _OFF else low_t
            raise PlanError(
                f"an offset of ({t}, {x}) in (t, x) reaches t={frame}, x={high_x if high_x >= _OFF else low_x}: "
                f"out of the Index range (|t|, |x| < {_OFF})"
            )
    return keys + (np.int64(t) << (2 * _BITS)) + np.int64(x)


class IndexSet:
    """An ordered list of distinct Indexes: the row labels of a matrix.

    Build with `IndexSet.range(n, t, x)` for the compact product of a range of
    sequences and a range of frames (rows in Kaldi's order), `IndexSet.of(list)`
    for explicit lists, and `a | b` for unions (sorted in Kaldi's order).
    """

    __slots__ = ("keys", "_hash", "_grid")

    def __init__(self, keys: np.ndarray, *, _grid: tuple[range, range, int] | None = None):
        if not (isinstance(keys, np.ndarray) and keys.dtype == np.int64 and keys.ndim == 1):
            keys = _as_keys(keys)
        keys = np.ascontiguousarray(keys)
        keys.setflags(write=False)
        self.keys = keys
        self._hash: int | None = None
        self._grid = _grid

    @classmethod
    def range(cls, n: Any = 1, t: Any = 1, x: int = 0) -> IndexSet:
        """The product of sequences `n` and frames `t` (ints mean `range(k)`), in Kaldi's order."""
        ns = _as_range(n, "n")
        ts = _as_range(t, "t")
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise PlanError(f"x must be an int, got {x!r}")
        if len(ns) and (_low(ns) < 0 or _high(ns) >= _OFF):
            raise PlanError(f"n={_text(n)}: sequences must be in [0, {_OFF})")
        if len(ts) and (_low(ts) <= -_OFF or _high(ts) >= _OFF):
            raise PlanError(f"t={_text(t)}: frames must be in ({-_OFF}, {_OFF})")
        if not -_OFF < x < _OFF:
            raise PlanError(f"x={x}: must be in ({-_OFF}, {_OFF})")
        if len(ns) * len(ts) > MAX_INDEXES:
            raise PlanError(f"{len(ns)} sequences x {len(ts)} frames are more than {MAX_INDEXES} Indexes")
        tt, nn = np.meshgrid(np.asarray(ts, np.int64), np.asarray(ns, np.int64), indexing="ij")
        keys = encode(nn.ravel(), tt.ravel(), np.full(tt.size, x))
        grid = (ns, ts, x) if ns.step == 1 and ts.step == 1 else None
        return cls(keys, _grid=grid)

    @classmethod
    def of(cls, indexes: Iterable[Any]) -> IndexSet:
        """An explicit list of `Index` (or `(n, t)` / `(n, t, x)` tuples), in the given order."""
        if isinstance(indexes, IndexSet):
            return indexes
        try:
            rows = [tuple(i) for i in indexes]
        except TypeError:
            raise PlanError(f"IndexSet.of takes Indexes or (n, t) / (n, t, x) tuples, got {indexes!r:.80}") from None
        if any(len(r) not in (2, 3) for r in rows):
            raise PlanError("each Index must be (n, t) or (n, t, x)")
        for r in rows:
            if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in r):
                raise PlanError(f"Index {r}: n, t and x must be integers")
        try:
            arr = np.array([r + (0,) * (3 - len(r)) for r in rows], dtype=np.int64).reshape(-1, 3)
        except OverflowError:
            raise _range_error() from None
        keys = encode(arr[:, 0], arr[:, 1], arr[:, 2])
        if len(np.unique(keys)) != len(keys):
            raise PlanError("an index list names the same Index twice")
        return cls(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Index]:
        n, t, x = decode(self.keys)
        return (Index(int(a), int(b), int(c)) for a, b, c in zip(n, t, x, strict=True))

    def __getitem__(self, i: int) -> Index:
        n, t, x = decode(self.keys[i : i + 1])
        return Index(int(n[0]), int(t[0]), int(x[0]))

    def __or__(self, other: IndexSet) -> IndexSet:
        return IndexSet(np.union1d(self.keys, other.keys))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexSet) and np.array_equal(self.keys, other.keys)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.keys.tobytes())
        return self._hash

    @property
    def n(self) -> np.ndarray:
        return decode(self.keys)[0]

    @property
    def t(self) -> np.ndarray:
        return decode(self.keys)[1]

    @property
    def x(self) -> np.ndarray:
        return decode(self.keys)[2]

    def grid(self) -> tuple[int, np.ndarray] | None:
        """`(N, keys_of_sequence_0)` if this is every sequence 0..N-1 times one (t, x) list.

        Rows must be in the order `[row][n]` (Kaldi's order when x is fixed per t):
        then the matrix reshapes to `[rows, N, dim]` and planning can ignore n.
        """
        if self._grid is not None:
            ns, ts, grid_x = self._grid
            if ns.start == 0:
                return len(ns), encode(np.zeros(len(ts)), np.asarray(ts), np.full(len(ts), grid_x))
            return None
        n, t, x = decode(self.keys)
        if not len(n):
            return None
        num = int(n.max()) + 1
        if len(n) % num:
            return None
        n2 = n.reshape(-1, num)
        if not (n2 == np.arange(num)).all():
            return None
        t2, x2 = t.reshape(-1, num), x.reshape(-1, num)
        if not ((t2 == t2[:, :1]).all() and (x2 == x2[:, :1]).all()):
            return None
        base = encode(np.zeros(len(t2)), t2[:, 0], x2[:, 0])
        if len(np.unique(base)) != len(base):
            return None
        return num, base

    def __repr__(self) -> str:
        return f"IndexSet({format_indexes(self.keys)})"


def _as_keys(keys: Any) -> np.ndarray:
    """Keys from another integer array-like; PlanError for anything else (a list of Indexes, floats)."""
    hint = "IndexSet(keys) takes int64 keys (symnet.extend.encode); build one from Indexes with IndexSet.of"
    try:
        array = np.asarray(keys)
    except (TypeError, ValueError, OverflowError):
        raise PlanError(f"{hint}, got {keys!r:.80}") from None
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu" or (array.dtype.kind == "u" and array.max() >= 1 << 63):
        raise PlanError(f"{hint}, got {keys!r:.80}")
    return array.astype(np.int64)


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PlanError(f"{name} must be an int, a range or a (start, stop) pair of ints, got {value!r}")
    return int(value)


def _as_range(value: Any, name: str) -> range:
    if isinstance(value, range):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return range(_as_int(value[0], name), _as_int(value[1], name))
    return range(_as_int(value, name))


def _low(r: range) -> int:
    return r[0] if r.step > 0 else r[-1]


def _high(r: range) -> int:
    return r[-1] if r.step > 0 else r[0]


def _text(value: Any) -> str:
    return f"{value!r:.60}"


def format_indexes(keys: np.ndarray, limit: int = 40) -> str:
    """Kaldi-style compact text, e.g. `[ (0, -1:1) (1, -1:1) ]`: runs of frames per (n, x)."""
    n, t, x = decode(np.asarray(keys))
    order = np.lexsort((t, x, n))
    n, t, x = n[order], t[order], x[order]
    parts: list[str] = []
    i = 0
    while i < len(t) and len(parts) < limit:
        j = i
        while j + 1 < len(t) and n[j + 1] == n[i] and x[j + 1] == x[i] and t[j + 1] == t[j] + 1:
            j += 1
        tt = f"{t[i]}:{t[j]}" if j > i else f"{t[i]}"
        parts.append(f"({n[i]}, {tt}, {x[i]})" if x[i] else f"({n[i]}, {tt})")
        i = j + 1
    more = " …" if i < len(t) else ""
    return "[ " + " ".join(parts) + more + " ]"
