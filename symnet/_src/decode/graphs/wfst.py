"""A growable weighted FST for the graph-building algorithms, and the semirings they work in.

`symnet.chain.Fst` holds an FST as flat arrays, which suits decoding; building a graph adds states and arcs
one at a time, so the algorithms here work on `Wfst`: per-state lists of arcs `(ilabel, olabel, weight,
next state)`, weights -log (float64), `inf` meaning "not final". Label 0 is epsilon.

Semirings: "tropical" (a path set's weight is its best path's, as a Viterbi decoder sees it) and "log" (the sum
of its paths' probabilities, as Kaldi determinizes graphs).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import numpy as np

from ...kaldi_io.fst import Fst
from ..decoder import DecodeError

__all__ = ["Arc", "GraphBuildError", "Semiring", "Wfst", "plus"]

Semiring = Literal["tropical", "log"]
#: (ilabel, olabel, weight, next state)
Arc = tuple[int, int, float, int]


class GraphBuildError(DecodeError):
    """A lexicon, grammar, language model or FST that a decoding graph cannot be built from."""


def plus(a: float, b: float, semiring: Semiring) -> float:
    """The semiring sum of two -log weights: the better one (tropical) or -log(e^-a + e^-b) (log)."""
    if semiring == "tropical":
        return min(a, b)
    if a == math.inf:
        return b
    if b == math.inf:
        return a
    return min(a, b) - math.log1p(math.exp(-abs(a - b)))


class Wfst:
    """A weighted FST under construction: `start`, `final[s]` and `arcs[s]` (a list of `Arc`)."""

    def __init__(self) -> None:
        self.start = 0
        self.final: list[float] = []
        self.arcs: list[list[Arc]] = []

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def num_arcs(self) -> int:
        return sum(len(a) for a in self.arcs)

    def add_state(self, final: float = math.inf) -> int:
        self.final.append(final)
        self.arcs.append([])
        return len(self.final) - 1

    def add_arc(self, src: int, ilabel: int, olabel: int, weight: float, dst: int) -> None:
        self.arcs[src].append((ilabel, olabel, weight, dst))

    def all_arcs(self) -> Iterator[tuple[int, Arc]]:
        for s, arcs in enumerate(self.arcs):
            for arc in arcs:
                yield s, arc

    @classmethod
    def of(cls, fst: Fst) -> Wfst:
        """The same FST, growable."""
        out = cls()
        for w in fst.final.tolist():
            out.add_state(float(w))
        out.start = fst.start
        for s, d, i, o, w in zip(*(a.tolist() for a in (fst.src, fst.dst, fst.ilabel, fst.olabel, fst.weight))):
            out.add_arc(s, i, o, float(w), d)
        return out

    def to_fst(self) -> Fst:
        """As `symnet.chain.Fst` arrays (float32 weights, arcs in state order)."""
        if not self.num_states:
            raise GraphBuildError("the FST is empty: no path of the grammar goes through the lexicon and model")
        rows = [(s, *arc) for s, arc in self.all_arcs()]
        a = np.array(rows, dtype=np.float64).reshape(-1, 5)
        return Fst(
            start=self.start,
            final=np.array(self.final, dtype=np.float32),
            src=a[:, 0].astype(np.int32),
            dst=a[:, 4].astype(np.int32),
            ilabel=a[:, 1].astype(np.int32),
            olabel=a[:, 2].astype(np.int32),
            weight=a[:, 3].astype(np.float32),
        )

    def map_labels(self, *, ilabels: dict[int, int] | None = None, olabels: dict[int, int] | None = None) -> Wfst:
        """A copy with input and output labels replaced where the maps name them (as Kaldi's `fstrmsymbols`
        does, mapping disambiguation symbols to 0)."""
        out = Wfst()
        out.start, out.final = self.start, list(self.final)
        ilabels, olabels = ilabels or {}, olabels or {}
        out.arcs = [[(ilabels.get(i, i), olabels.get(o, o), w, d) for i, o, w, d in arcs] for arcs in self.arcs]
        return out

    def connect(self) -> Wfst:
        """Only the states on some path from the start to a final state (OpenFst's Connect), renumbered in
        order of discovery from the start."""
        if not self.num_states:
            return Wfst()
        reach, stack = {self.start}, [self.start]
        while stack:
            for _, _, _, d in self.arcs[stack.pop()]:
                if d not in reach:
                    reach.add(d)
                    stack.append(d)
        incoming: list[list[int]] = [[] for _ in self.final]
        for s, (_, _, _, d) in self.all_arcs():
            incoming[d].append(s)
        useful = {s for s in reach if self.final[s] < math.inf}
        stack = list(useful)
        while stack:
            for s in incoming[stack.pop()]:
                if s in reach and s not in useful:
                    useful.add(s)
                    stack.append(s)
        out = Wfst()
        if self.start not in useful:
            return out
        order, new = [self.start], {self.start: 0}
        for s in order:
            for _, _, _, d in self.arcs[s]:
                if d in useful and d not in new:
                    new[d] = len(order)
                    order.append(d)
        for s in order:
            out.add_state(self.final[s])
        for s in order:
            out.arcs[new[s]] = [(i, o, w, new[d]) for i, o, w, d in self.arcs[s] if d in useful]
        return out
