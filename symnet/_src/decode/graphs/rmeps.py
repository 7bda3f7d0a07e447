"""Epsilon removal: arcs with epsilon on both sides are replaced by the arcs and final weights they lead to.

For each state, the states reachable through epsilon arcs and the semiring sum of those paths' weights (the
closure) are found in a topological order of the epsilon arcs; the state then gets, for each of them, its
non-epsilon arcs and final weight, times that sum. Arcs with one epsilon side (a word written between
frames, a frame with no word) stay. Requires no cycle of epsilon arcs (`GraphBuildError`).
"""

from __future__ import annotations

import math

from .wfst import GraphBuildError, Semiring, Wfst, plus

__all__ = ["remove_epsilons"]


def _order(fst: Wfst) -> list[int]:
    """States in a topological order of the epsilon arcs, last first (GraphBuildError on a cycle)."""
    mark = [0] * fst.num_states  # 0 new, 1 on the stack, 2 done
    order: list[int] = []
    for root in range(fst.num_states):
        if mark[root]:
            continue
        stack = [(root, iter(fst.arcs[root]))]
        mark[root] = 1
        while stack:
            s, it = stack[-1]
            for i, o, _, d in it:
                if i == 0 and o == 0:
                    if mark[d] == 1:
                        raise GraphBuildError(f"the FST has a cycle of epsilon arcs (through state {d})")
                    if mark[d] == 0:
                        mark[d] = 1
                        stack.append((d, iter(fst.arcs[d])))
                        break
            else:
                mark[s] = 2
                order.append(s)
                stack.pop()
    return order


def remove_epsilons(fst: Wfst, semiring: Semiring = "log") -> Wfst:
    """An equivalent FST with no epsilon:epsilon arcs."""
    closures: list[dict[int, float]] = [{} for _ in fst.final]
    for s in _order(fst):  # successors along epsilon arcs come first
        own = closures[s]
        own[s] = 0.0
        for i, o, w, d in fst.arcs[s]:
            if i == 0 and o == 0:
                for q, v in closures[d].items():
                    own[q] = plus(own.get(q, math.inf), w + v, semiring)
    out = Wfst()
    out.start = fst.start
    for closure in closures:
        final = math.inf
        for q, v in closure.items():
            final = plus(final, v + fst.final[q], semiring)
        out.add_state(final)
    for s, closure in enumerate(closures):
        for q, v in sorted(closure.items()):
            for i, o, w, d in fst.arcs[q]:
                if i or o:
                    out.add_arc(s, i, o, v + w, d)
    return out.connect()
