"""A chain denominator graph from a phone LM and an HMM topology (monophone), as `chain-make-den-fst` defines it.

`chain-make-den-fst` composes the phone LM with the context dependency and the HMMs (transition
probabilities included, self-loops reordered after the frame that leaves a state), maps
transition-ids to pdf-ids, removes epsilons, minimises, and pushes weights with PushSpecial. symnet
builds the same weighted language of pdf sequences directly, for monophone systems (each phone one
HMM, pdfs per pdf-class), without epsilons:

- the start state enters the first phone;
- state `(d, p, i, j)` means "in phone `p` (whose LM arc leads to LM state `d`), the frame that leaves
  HMM state `i` for `j` was just emitted": its self-loop emits `i`'s self-loop pdf, and it goes on to
  emit `j`'s leaving frame, or, when `j` is the final state, enters the next phone from LM state `d`
  (the LM arc's probability times the first transition's) and is final with `d`'s final probability.

The graph is then pushed with Kaldi's PushSpecial (every state's outgoing probability, final included,
made equal), which keeps each sequence's weight. It is not minimised: it has more states than
Kaldi's den.fst for the same LM (the weighted language is the same), so Kaldi's initial
probabilities, which average over states, and therefore its objective values differ slightly;
use Kaldi's own den.fst (`read_denominator_graph`) where its exact numbers matter.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ChainError
from .fst import Fst
from .graph import ChainGraph, denominator_graph
from .topology import Topology

__all__ = ["expand_with_phones", "K_DELTA", "phone_lm_denominator", "PUSH_MAX_ITERATIONS", "push_special"]

#: OpenFst's kDelta; Kaldi's den graph is pushed to kDelta * 0.01.
K_DELTA = 1.0 / 1024.0
PUSH_MAX_ITERATIONS = 200


def phone_lm_denominator(lm: Fst, topology: Topology, pdfs: Mapping[int, Sequence[int]] | None = None) -> ChainGraph:
    """The denominator graph of phone LM `lm` (`estimate_phone_lm`, or chain-est-phone-lm's FST read by
    `read_fst`) with each phone's HMM from `topology`. `pdfs[p][c]` is the pdf-id of phone `p`'s pdf-class
    `c` (default: gmm-init-mono's numbering, `topology.monophone_pdfs()`)."""
    pdf_map = dict(topology.monophone_pdfs() if pdfs is None else pdfs)
    for phone in np.unique(lm.ilabel):
        p = int(phone)
        if p not in topology.phones:
            raise ChainError(f"phone LM: phone {p} has no HMM in the topology (its phones: {sorted(topology.phones)})")
        classes = 1 + max(max(s.forward_pdf_class, s.self_loop_pdf_class) for s in topology.phones[p])
        if p not in pdf_map or len(pdf_map[p]) < classes:
            raise ChainError(f"pdfs: phone {p} needs {classes} pdf-ids (one per pdf-class), got {pdf_map.get(p)}")
    num_pdfs = 1 + max(max(v) for v in pdf_map.values())
    fst = push_special(expand_with_phones(lm, topology, pdf_map)[0])
    return denominator_graph(fst, num_pdfs)


def expand_with_phones(
    lm: Fst, topology: Topology, pdfs: Mapping[int, Sequence[int]]
) -> tuple[Fst, np.ndarray, np.ndarray]:
    """The epsilon-free pdf acceptor of `lm` with the HMMs (labels pdf + 1, -log weights), each arc's phone, and
    each state's LM state `d` (the LM state its phone's arc leads to; the start state's: the LM start)."""
    lm_arcs: list[list[tuple[int, float, int]]] = [[] for _ in range(lm.num_states)]
    for s, p, w, d in zip(lm.src.tolist(), lm.ilabel.tolist(), lm.weight.tolist(), lm.dst.tolist()):
        lm_arcs[s].append((p, float(np.exp(-w)), d))
    lm_final = np.exp(-lm.final.astype(np.float64))

    index: dict[tuple[int, int, int, int], int] = {}
    todo: list[tuple[int, int, int, int]] = []
    src: list[int] = []
    dst: list[int] = []
    label: list[int] = []
    prob: list[float] = []
    arc_phone: list[int] = []

    def arc(frm: int, to: int, pdf: int, probability: float, phone: int) -> None:
        src.append(frm)
        dst.append(to)
        label.append(pdf)
        prob.append(probability)
        arc_phone.append(phone)

    def state(key: tuple[int, int, int, int]) -> int:
        if key not in index:
            index[key] = len(index) + 1  # 0 is the start state
            todo.append(key)
        return index[key]

    def enter(frm: int, lm_state: int) -> None:
        """Arcs from graph state `frm` into every phone that LM state `lm_state` allows."""
        for p, w, d in lm_arcs[lm_state]:
            first = topology.phones[p][0]
            for k, t in first.transitions:
                if k != 0:
                    arc(frm, state((d, p, 0, k)), pdfs[p][first.forward_pdf_class], w * t, p)

    finals: dict[int, float] = {0: float(lm_final[lm.start])}
    enter(0, lm.start)
    while todo:
        key = todo.pop()
        d, p, i, j = key
        here = index[key]
        states = topology.phones[p]
        loop = states[i].loop_probability(i)
        if loop:
            arc(here, here, pdfs[p][states[i].self_loop_pdf_class], loop, p)
        if j == len(states):
            finals[here] = float(lm_final[d])
            enter(here, d)
        else:
            for k, t in states[j].transitions:
                if k != j:
                    arc(here, state((d, p, j, k)), pdfs[p][states[j].forward_pdf_class], t, p)
    n = len(index) + 1
    final = np.full(n, np.inf)
    for s, f in finals.items():
        final[s] = -np.log(f) if f > 0 else np.inf
    labels = np.asarray(label, np.int32) + 1
    lm_state = np.full(n, lm.start, np.int64)
    for key, s in index.items():
        lm_state[s] = key[0]
    fst = Fst(
        start=0,
        final=final.astype(np.float32),
        src=np.asarray(src, np.int32),
        dst=np.asarray(dst, np.int32),
        ilabel=labels,
        olabel=labels.copy(),
        weight=(-np.log(np.asarray(prob, np.float64))).astype(np.float32),
    )
    return fst, np.asarray(arc_phone, np.int64), lm_state


def push_special(fst: Fst, delta: float = K_DELTA * 0.01) -> Fst:
    """Kaldi's PushSpecial: weights reweighted by the top eigenvector `v` of the transition matrix (a final
    probability counts as a transition to the start state), `p'(s -> t) = p v_t / v_s`, so every state's
    outgoing probability is the same; each complete path keeps its weight. Power iteration
    `v <- P v + 0.1 v` until the outgoing sums agree to `delta` (log ratio), checked every 5 iterations, at
    most 200 (then a warning, as in Kaldi)."""
    n = fst.num_states
    p = np.exp(-fst.weight.astype(np.float64))
    f = np.exp(-fst.final.astype(np.float64))
    # (P v)_s = sum over arcs s -> t of p v_t, plus final(s) v_start.
    src = np.concatenate([fst.src, np.arange(n)])
    dst = np.concatenate([fst.dst, np.full(n, fst.start)])
    w = np.concatenate([p, f])
    v = np.full(n, 1.0 / np.sqrt(n))
    for iteration in range(PUSH_MAX_ITERATIONS):
        new = 0.1 * v + np.bincount(src, w * v[dst], minlength=n)
        v = new / np.sqrt(np.sum(new * new))
        if iteration % 5 == 0 and iteration > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                sums = np.bincount(src, w * v[dst], minlength=n) / v
            if np.log(sums.max() / sums.min()) <= delta:
                break
    else:
        warnings.warn(
            f"push_special: the weights did not converge in {PUSH_MAX_ITERATIONS} iterations; the pushed graph is "
            "inexact (as Kaldi warns)",
            stacklevel=2,
        )
    cost = -np.log(v)
    return Fst(
        start=fst.start,
        final=(fst.final + cost[fst.start] - cost).astype(np.float32),
        src=fst.src,
        dst=fst.dst,
        ilabel=fst.ilabel,
        olabel=fst.olabel,
        weight=(fst.weight + cost[fst.dst] - cost[fst.src]).astype(np.float32),
    )
