"""Minimization of an FST with its labels and weights encoded together (Kaldi's `fstminimizeencoded`).

Each arc's (input, output, weight) is treated as one label, and each state's final weight as part of what it
is, so the FST is an unweighted acceptor; states are then merged while they cannot be told apart (Moore's
partition refinement: same final weight, and arcs with the same labels into the same classes). On a
deterministic FST that is minimization; on any FST it merges only bisimilar states, so the weighted relation
is kept either way. Weights are compared rounded to `DELTA`. Weights are not pushed first, as in Kaldi.
"""

from __future__ import annotations

from .determinize import DELTA
from .wfst import Wfst

__all__ = ["minimize"]


def minimize(fst: Wfst) -> Wfst:
    """The FST with indistinguishable states merged (trimmed first)."""
    fst = fst.connect()
    if not fst.num_states:
        return fst

    def quantized(w: float) -> float:
        return round(w / DELTA) if w != float("inf") else w

    finals: dict[float, int] = {}
    classes = [finals.setdefault(quantized(w), len(finals)) for w in fst.final]
    count = len(finals)
    while True:
        signatures = [
            (classes[s], frozenset((i, o, quantized(w), classes[d]) for i, o, w, d in arcs))
            for s, arcs in enumerate(fst.arcs)
        ]
        numbering: dict[tuple, int] = {}
        classes = [numbering.setdefault(sig, len(numbering)) for sig in signatures]
        if len(numbering) == count:
            break
        count = len(numbering)
    out = Wfst()
    first: dict[int, int] = {}
    for s, c in enumerate(classes):
        first.setdefault(c, s)
    order = sorted(first, key=first.__getitem__)
    new = {c: n for n, c in enumerate(order)}
    for c in order:
        out.add_state(fst.final[first[c]])
    for c in order:
        seen = set()
        for i, o, w, d in fst.arcs[first[c]]:
            key = (i, o, quantized(w), classes[d])
            if key not in seen:
                seen.add(key)
                out.add_arc(new[c], i, o, w, new[classes[d]])
    out.start = new[classes[fst.start]]
    return out
