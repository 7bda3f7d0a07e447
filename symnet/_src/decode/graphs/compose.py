"""Composition of weighted transducers, with an epsilon filter so that each pair of paths is counted once.

A path of `a` whose outputs are `b`'s inputs pairs with that path of `b`; between two matched labels, `a`'s
output-epsilon moves come first, then `b`'s input-epsilon moves (OpenFst's sequence filter: the filter state
says whether `b` has moved alone since the last match). Without the filter, a run of epsilons on both sides
would be paired in every interleaving, multiplying paths. Only states reached from the start are built; the
result is then trimmed (`Wfst.connect`).
"""

from __future__ import annotations

from collections import defaultdict

from .wfst import Arc, Wfst

__all__ = ["compose"]


def compose(a: Wfst, b: Wfst) -> Wfst:
    """`a` then `b`: pairs of paths where `a`'s output string is `b`'s input string, with summed weights."""
    by_input: list[dict[int, list[Arc]]] = []
    for arcs in b.arcs:
        table: dict[int, list[Arc]] = defaultdict(list)
        for arc in arcs:
            table[arc[0]].append(arc)
        by_input.append(table)
    out = Wfst()
    ids: dict[tuple[int, int, int], int] = {}
    queue: list[tuple[int, int, int]] = []

    def state(p: int, q: int, f: int) -> int:
        key = (p, q, f)
        if key not in ids:
            ids[key] = out.add_state(a.final[p] + b.final[q])
            queue.append(key)
        return ids[key]

    out.start = state(a.start, b.start, 0)
    while queue:
        p, q, f = queue.pop()
        s = ids[(p, q, f)]
        for i, o, w, d in a.arcs[p]:
            if o == 0:
                if f == 0:  # a moves alone only before b has
                    out.add_arc(s, i, 0, w, state(d, q, 0))
                continue
            for _, o2, w2, d2 in by_input[q].get(o, ()):
                out.add_arc(s, i, o2, w + w2, state(d, d2, 0))
        for _, o2, w2, d2 in by_input[q].get(0, ()):
            out.add_arc(s, 0, o2, w2, state(p, d2, 1))
    return out.connect()
