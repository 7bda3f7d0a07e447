"""Brute force for the FST algorithm tests: tiny random FSTs and their weighted relations by path enumeration."""

from __future__ import annotations

import math

import numpy as np

from symnet._src.decode.graphs.wfst import Semiring, Wfst, plus


def random_fst(
    rng: np.random.Generator, *, states: int = 5, arcs: int = 9, labels: int = 3, loops: bool = True,
    acceptor: bool = False,
) -> Wfst:  # fmt: skip
    """Arcs go to later states (any labels, epsilons included) or are self-loops with both labels nonzero, so
    every cycle reads and writes a label and bounded strings have finitely many paths."""
    fst = Wfst()
    for s in range(states):
        fst.add_state(float(rng.uniform(0, 2)) if rng.random() < 0.4 or s == states - 1 else math.inf)
    for _ in range(arcs):
        s = int(rng.integers(0, states))
        if loops and rng.random() < 0.2:
            i = int(rng.integers(1, labels + 1))
            fst.add_arc(s, i, i if acceptor else int(rng.integers(1, labels + 1)), float(rng.uniform(0, 2)), s)
        elif s < states - 1:
            i = int(rng.integers(0, labels + 1))
            o = i if acceptor else int(rng.integers(0, labels + 1))
            fst.add_arc(s, i, o, float(rng.uniform(0, 2)), int(rng.integers(s + 1, states)))
    return fst


def relation(fst: Wfst, max_in: int, max_out: int, semiring: Semiring) -> dict[tuple[tuple, tuple], float]:
    """(input string, output string) -> weight of all its paths, for strings no longer than the bounds."""
    out: dict[tuple[tuple, tuple], float] = {}
    stack = [(fst.start, (), (), 0.0)] if fst.num_states else []
    while stack:
        s, x, y, w = stack.pop()
        if fst.final[s] < math.inf:
            out[(x, y)] = plus(out.get((x, y), math.inf), w + fst.final[s], semiring)
        for i, o, aw, d in fst.arcs[s]:
            nx, ny = (x + (i,) if i else x), (y + (o,) if o else y)
            if len(nx) <= max_in and len(ny) <= max_out:
                stack.append((d, nx, ny, w + aw))
    return out


def same_relation(a: dict, b: dict, tol: float = 1e-6) -> None:
    keys = set(a) | set(b)
    bad = [(k, a.get(k), b.get(k)) for k in keys if not abs(a.get(k, math.inf) - b.get(k, math.inf)) <= tol]
    same = [k for k in keys if a.get(k) == b.get(k) == math.inf]
    assert not [x for x in bad if x[0] not in same], bad[:5]
