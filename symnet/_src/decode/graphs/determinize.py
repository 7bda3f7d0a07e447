"""Weighted determinization of transducers with input epsilons (Kaldi's determinize-star), tropical or log.

A state of the result is a weighted subset of the input's states: each element a state, the output labels
read but not yet written (a residual string) and a residual weight. From a subset, each input label leads to
the elements its arcs reach, then on through input-epsilon arcs (the closure, so epsilons disappear); the
longest output prefix common to all elements and their semiring sum of weights go on the new arc, and the
remainders stay in the next subset. Where an arc has to write several labels, a chain of input-epsilon arcs
writes the rest; a final subset writes its residual string the same way. In the log semiring the result keeps
each input/output pair's total probability; in the tropical semiring its best path's weight.

Requires: no cycle of input-epsilon arcs, and a functional transducer (one output string per input string, as
disambiguation symbols make L o G); otherwise `GraphBuildError`. Subsets are compared with weights rounded to
`DELTA`, as OpenFst compares them to its delta.
"""

from __future__ import annotations

import heapq
import math
import os

from .wfst import GraphBuildError, Semiring, Wfst, plus

__all__ = ["DELTA", "determinize"]

DELTA = 1e-6
#: (state, residual output string) -> residual weight
_Subset = dict[tuple[int, tuple[int, ...]], float]


def _epsilon_order(fst: Wfst) -> list[int]:
    """Each state's position in a topological order of the input-epsilon arcs (GraphBuildError on a cycle)."""
    indegree = [0] * fst.num_states
    for _, (i, _, _, d) in fst.all_arcs():
        if i == 0:
            indegree[d] += 1
    ready = [s for s, n in enumerate(indegree) if n == 0]
    position = [-1] * fst.num_states
    count = 0
    while ready:
        s = ready.pop()
        position[s], count = count, count + 1
        for i, _, _, d in fst.arcs[s]:
            if i == 0:
                indegree[d] -= 1
                if indegree[d] == 0:
                    ready.append(d)
    if count < fst.num_states:
        state = next(s for s, p in enumerate(position) if p < 0)
        raise GraphBuildError(f"the FST has a cycle of input-epsilon arcs (through state {state})")
    return position


def determinize(fst: Wfst, semiring: Semiring = "log", *, max_states: int = 10_000_000) -> Wfst:
    """An equivalent FST with no input-epsilon arcs except those writing extra output labels, and at most one
    arc per input label from each state."""
    position = _epsilon_order(fst)
    out = Wfst()
    ids: dict[tuple, int] = {}
    subsets: list[_Subset] = []

    def closure(subset: _Subset) -> _Subset:
        heap = [(position[s], s, string) for s, string in subset]
        heapq.heapify(heap)
        while heap:  # in topological order: every element is complete when it is expanded
            _, s, string = heapq.heappop(heap)
            for i, o, w, d in fst.arcs[s]:
                if i == 0:
                    key = (d, string + (o,) if o else string)
                    if key not in subset:
                        heapq.heappush(heap, (position[d], d, key[1]))
                    subset[key] = plus(subset.get(key, math.inf), subset[(s, string)] + w, semiring)
        return subset

    def state_of(subset: _Subset) -> int:
        key = tuple(sorted((s, string, round(w / DELTA)) for (s, string), w in subset.items()))
        if key not in ids:
            if len(subsets) >= max_states:
                raise GraphBuildError(f"determinization passed {max_states} states: is the FST determinizable?")
            ids[key] = out.add_state()
            subsets.append(subset)
        return ids[key]

    def write(src: int, ilabel: int, string: tuple[int, ...], weight: float, dst: int | None) -> None:
        """An arc from `src` writing `string`, as a chain when it is longer than one label (dst None: the chain
        ends in a new final state)."""
        labels = list(string) or [0]
        for n, o in enumerate(labels):
            last = n == len(labels) - 1
            nxt = out.add_state(0.0) if last and dst is None else dst if last else out.add_state()
            assert nxt is not None
            out.add_arc(src, ilabel if n == 0 else 0, o, weight if n == 0 else 0.0, nxt)
            src = nxt

    out.start = state_of(closure({(fst.start, ()): 0.0}))
    done = 0
    while done < len(subsets):
        s, subset = done, subsets[done]
        done += 1
        finals: dict[tuple[int, ...], float] = {}
        for (q, string), w in subset.items():
            if fst.final[q] < math.inf:
                finals[string] = plus(finals.get(string, math.inf), w + fst.final[q], semiring)
        if len(finals) > 1:
            raise GraphBuildError(
                f"the FST is not functional: one input string ends with outputs {sorted(finals)} "
                "(missing disambiguation symbols?)"
            )
        for string, w in finals.items():
            if string:
                write(s, 0, string, w, None)
            else:
                out.final[s] = w
        moves: dict[int, _Subset] = {}
        for (q, string), w in subset.items():
            for i, o, aw, d in fst.arcs[q]:
                if i:
                    nxt = moves.setdefault(i, {})
                    key = (d, string + (o,) if o else string)
                    nxt[key] = plus(nxt.get(key, math.inf), w + aw, semiring)
        for i in sorted(moves):
            nxt = closure(moves[i])
            prefix = tuple(os.path.commonprefix([string for _, string in nxt]))
            total = math.inf
            for w in nxt.values():
                total = plus(total, w, semiring)
            rest = {(q, string[len(prefix) :]): w - total for (q, string), w in nxt.items()}
            write(s, i, prefix, total, state_of(rest))
    return out.connect()
