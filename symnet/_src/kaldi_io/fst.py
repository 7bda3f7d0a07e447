"""Weighted FSTs as plain arrays, read from OpenFst's binary VectorFst files and from Kaldi's text form.

The chain objective needs only epsilon-free acceptors over pdf labels (Kaldi's
den.fst and the numerator supervision FSTs), so an `Fst` is a start state,
per-state final weights and arc arrays. Weights are OpenFst's tropical/log
weights: -log probabilities, `inf` for "no final" (Zero).

Readers check every count and index against the bytes present before
allocating, and raise `ChainError` naming the file and the value at fault.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..base.bounded import gather, record_offsets
from ..base.errors import ChainError
from ..base.safe_read import read_file

__all__ = ["Fst", "FST_MAGIC", "MAX_FST_BYTES", "parse_fst_binary", "parse_fst_text", "read_fst"]

#: OpenFst's FstHeader magic number.
FST_MAGIC = 2125659606
#: FstHeader flags: symbol tables present, aligned arcs.
_HAS_ISYMBOLS, _HAS_OSYMBOLS, _IS_ALIGNED = 1, 2, 4
#: A den.fst of a large recipe is a few MB; 1 GiB is far beyond any real one.
MAX_FST_BYTES = 1 << 30


@dataclass(frozen=True, eq=False)
class Fst:
    """An FST as arrays: `start`, `final` (-log weight per state, inf where not final) and arcs
    `src`, `dst`, `ilabel`, `olabel`, `weight` (-log), all numpy arrays of one length."""

    start: int
    final: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray

    @property
    def num_states(self) -> int:
        return int(self.final.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.src.shape[0])

    def __post_init__(self) -> None:
        n = self.num_states
        if not 0 <= self.start < n:
            raise ChainError(f"FST start state {self.start} is not one of its {n} states")
        for name in ("dst", "ilabel", "olabel", "weight"):
            if getattr(self, name).shape != self.src.shape:
                raise ChainError(f"FST arc array {name} has shape {getattr(self, name).shape}, src {self.src.shape}")
        for name in ("src", "dst"):
            a = getattr(self, name)
            if a.size and (a.min() < 0 or a.max() >= n):
                bad = int(a[(a < 0) | (a >= n)][0])
                raise ChainError(f"FST arc {name} state {bad} is not one of its {n} states")
        if np.isnan(self.weight).any() or np.isnan(self.final).any():
            raise ChainError("FST has a NaN weight")
        if (self.weight == -np.inf).any() or (self.final == -np.inf).any():
            raise ChainError("FST has a weight of -inf (a probability of infinity)")


class _Bytes:
    def __init__(self, data: bytes, name: str):
        self.data, self.pos, self.name = data, 0, name

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ChainError(f"{self.name}: truncated at byte {self.pos}, reading {what} ({n} bytes)")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("i", what)
        if not 0 <= n <= 64:
            raise ChainError(f"{self.name}: {what} has length {n} at byte {self.pos - 4}, not a type name")
        return self.take(n, what).decode("ascii", "replace")


def read_fst(path: str) -> Fst:
    """Read an OpenFst binary `VectorFst` with standard (tropical, float) arcs, as Kaldi writes den.fst."""
    return parse_fst_binary(read_file(path, MAX_FST_BYTES, error=ChainError, what="FST file"), name=str(path))


def parse_fst_binary(data: bytes, *, name: str = "<fst>") -> Fst:
    """Parse the bytes of an OpenFst binary VectorFst (header, then per state: final weight float32,
    arc count int64, arcs of ilabel int32, olabel int32, weight float32, nextstate int32)."""
    r = _Bytes(data, name)
    (magic,) = r.unpack("i", "magic number")
    if magic != FST_MAGIC:
        raise ChainError(f"{name}: not an OpenFst binary file (magic number {magic}, expected {FST_MAGIC})")
    fst_type = r.string("FST type")
    arc_type = r.string("arc type")
    if fst_type != "vector":
        raise ChainError(f"{name}: FST type {fst_type!r} is not supported, only 'vector'")
    if arc_type not in ("standard", "log"):
        raise ChainError(f"{name}: arc type {arc_type!r} is not supported, only 'standard' and 'log'")
    version, flags = r.unpack("ii", "version and flags")
    if version < 2:
        raise ChainError(f"{name}: VectorFst version {version} is not supported (2 or later)")
    if flags & (_HAS_ISYMBOLS | _HAS_OSYMBOLS | _IS_ALIGNED):
        raise ChainError(f"{name}: FST header flags {flags} (symbol tables or aligned arcs) are not supported")
    _properties, start, num_states, num_arcs = r.unpack("Qqqq", "properties, start, state and arc counts")
    remaining = len(data) - r.pos
    if not 0 <= num_states <= remaining // 12:
        raise ChainError(f"{name}: {num_states} states cannot fit in the {remaining} bytes left")
    if num_states == 0:
        raise ChainError(f"{name}: the FST has no states")
    if not 0 <= start < num_states:
        raise ChainError(f"{name}: start state {start} is not one of the {num_states} states")
    return _states(data, r.pos, int(start), num_states, num_arcs, name)


#: An arc as OpenFst's VectorFst writes it.
_ARC = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])


def _states(data: bytes, pos: int, start: int, num_states: int, num_arcs: int, name: str) -> Fst:
    """The states after the header (each a float32 final weight, an int64 arc count, its arcs), walked in one
    pass (`symnet._src.base.bounded.record_offsets`) and read into arrays in one copy."""

    def fail(state: int, message: str) -> ChainError:
        return ChainError(f"{name}: state {state} {message}")

    offsets = record_offsets(data, pos, num_states, head=12, field="q", at=4, item=16, items="arcs", fail=fail)
    if offsets[-1] != len(data):
        raise ChainError(f"{name}: {len(data) - int(offsets[-1])} bytes after the last state")
    starts = offsets[:-1]
    counts = (np.diff(offsets) - 12) // 16
    final = gather(data, starts, 4).view("<f4").astype(np.float32)
    arcs = gather(data, starts + 12, 16 * counts).view(_ARC)
    if num_arcs not in (0, len(arcs)):  # OpenFst writes 0 here when it did not count
        raise ChainError(f"{name}: header says {num_arcs} arcs, the states hold {len(arcs)}")
    return Fst(
        start=start,
        final=final,
        src=np.repeat(np.arange(num_states, dtype=np.int32), counts),
        dst=arcs["nextstate"].astype(np.int32),
        ilabel=arcs["ilabel"].astype(np.int32),
        olabel=arcs["olabel"].astype(np.int32),
        weight=arcs["weight"].astype(np.float32),
    )


def _number(field: str, kind: type, line_no: int, name: str) -> float:
    try:
        value = kind(field)
    except ValueError:
        raise ChainError(f"{name}:{line_no}: {field!r} is not a {kind.__name__}") from None
    if kind is int and not 0 <= value < 1 << 31:
        raise ChainError(f"{name}:{line_no}: {field!r} is out of range")
    return value


def parse_fst_text(text: str, *, name: str = "<fst text>") -> Fst:
    """Parse OpenFst's text form as Kaldi writes it in text archives: arc lines `src dst ilabel olabel
    [weight]`, final lines `state [weight]`; the first line's first state is the start state."""
    arcs: list[tuple[int, int, int, int, float]] = []
    finals: dict[int, float] = {}
    start = None
    for line_no, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) not in (1, 2, 4, 5):
            raise ChainError(f"{name}:{line_no}: {len(fields)} fields in {line.strip()!r}; expected 1, 2, 4 or 5")
        state = int(_number(fields[0], int, line_no, name))
        if start is None:
            start = state
        if len(fields) <= 2:
            w = _number(fields[1], float, line_no, name) if len(fields) == 2 else 0.0
            finals[state] = float(w)
        else:
            d, i, o = (int(_number(f, int, line_no, name)) for f in fields[1:4])
            w = _number(fields[4], float, line_no, name) if len(fields) == 5 else 0.0
            arcs.append((state, d, i, o, float(w)))
    if start is None:
        raise ChainError(f"{name}: the FST text has no lines")
    num_states = 1 + max([start, *finals, *(a[0] for a in arcs), *(a[1] for a in arcs)])
    if num_states > 2 * (len(arcs) + len(finals)) + 1:  # every state is named on some line
        raise ChainError(f"{name}: state {num_states - 1} is far beyond the {len(arcs)} arcs and {len(finals)} finals")
    final = np.full(num_states, np.inf, np.float32)
    for s, w in finals.items():
        final[s] = w
    a = np.array(arcs, dtype=np.float64).reshape(-1, 5)
    return Fst(
        start=start,
        final=final,
        src=a[:, 0].astype(np.int32),
        dst=a[:, 1].astype(np.int32),
        ilabel=a[:, 2].astype(np.int32),
        olabel=a[:, 3].astype(np.int32),
        weight=a[:, 4].astype(np.float32),
    )
