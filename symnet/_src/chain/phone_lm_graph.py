"""A chain denominator graph from a phone LM and an HMM topology (monophone), as `chain-make-den-fst` makes it.

`chain-make-den-fst` composes the phone LM with the context dependency and the HMMs (transition
probabilities included, self-loops reordered after the frame that leaves a state), maps
transition-ids to pdf-ids, removes epsilons, and minimises and pushes (`den_minimize`). symnet builds the
epsilon-free graph directly, for monophone systems (each phone one HMM, pdfs per pdf-class), with the
states and weights Kaldi's has after epsilon removal:

- the start state enters the first phone;
- state `(d, p, i, j)` means "in phone `p` (whose LM arc leads to LM state `d`), the frame that leaves
  HMM state `i` for `j` was just emitted": its self-loop emits `i`'s self-loop pdf with `i`'s self-loop
  probability, and its other arcs and final weight carry `i`'s forward probability (one minus the
  self-loop's), as Kaldi's AddSelfLoops with reordering puts them. It goes on to emit `j`'s leaving frame
  (the transition's probability among `j`'s non-self-loop ones), or, when `j` is the final state, enters
  the next phone from LM state `d` (the LM arc's probability times the first transition's) and is final
  with `d`'s final probability. Weights are summed in float32, as Kaldi's are.

Then `den_minimize.minimize_den_fst` applies Kaldi's three passes of reversed and regular minimisation and
PushSpecial. This graph is the coarsest one those passes allow; Kaldi's den.fst can keep more states: OpenFst's
minimisation of the (non-deterministic) graph starts from a partition of the states by the labels of their
arcs in the order the arcs are stored, which depends on every earlier step's state and arc order, so it splits
some states that are equivalent. On the small phone LMs of the tests, with Kaldi's chain topology (one
emitting state per phone), the graphs are the same and the objective equals the one on Kaldi's den.fst to
float precision (tests/chain/test_chain_recipe.py, test_phone_lm.py); with HMMs of several emitting states
they differ by about 1e-4 per frame, and `phone_lm_denominator` warns. On a recipe-sized phone LM they differ
with the chain topology too (benchmarks/den_graph_vs_kaldi.py measures a recipe's: docs/chain.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ..base.errors import ChainError
from ..kaldi_io.fst import Fst
from .den_minimize import minimize_den_fst
from .graph import ChainGraph, denominator_graph
from .topology import HmmState, Topology

__all__ = ["expand_with_phones", "phone_lm_denominator"]


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
    expanded = expand_with_phones(lm, topology, pdf_map)[0]
    longer = sorted(p for p in np.unique(lm.ilabel).tolist() if len(topology.phones[p]) > 1)
    if longer:
        warnings.warn(
            f"phone_lm_denominator: phones {longer[:5]}{'...' if len(longer) > 5 else ''} have HMMs of more than one "
            "emitting state; for those chain-make-den-fst's minimisation (OpenFst's, whose partition of a state's "
            "arcs depends on their order) keeps states that symnet's merges, so the objective differs from one on "
            "Kaldi's den.fst by about 1e-4 per frame; read Kaldi's "
            "den.fst with read_denominator_graph where its exact numbers matter",
            stacklevel=2,
        )
    return denominator_graph(minimize_den_fst(expanded), num_pdfs)


def _cost(probability: float) -> np.float32:
    """-log of a probability as Kaldi's float weights hold it (inf for 0)."""
    with np.errstate(divide="ignore"):
        return np.float32(-np.log(np.float64(probability)))


def expand_with_phones(
    lm: Fst, topology: Topology, pdfs: Mapping[int, Sequence[int]]
) -> tuple[Fst, np.ndarray, np.ndarray]:
    """The epsilon-free pdf acceptor of `lm` with the HMMs (labels pdf + 1, -log weights placed as Kaldi places
    them: see the module docstring), each arc's phone, and each state's LM state `d` (the LM state its phone's
    arc leads to; the start state's: the LM start)."""
    lm_arcs: list[list[tuple[int, np.float32, int]]] = [[] for _ in range(lm.num_states)]
    for s, p, w, d in zip(lm.src.tolist(), lm.ilabel.tolist(), lm.weight.astype(np.float32), lm.dst.tolist()):
        lm_arcs[s].append((p, w, d))

    index: dict[tuple[int, int, int, int], int] = {}
    todo: list[tuple[int, int, int, int]] = []
    src: list[int] = []
    dst: list[int] = []
    label: list[int] = []
    weight: list[np.float32] = []
    arc_phone: list[int] = []

    def arc(frm: int, to: int, pdf: int, cost: np.float32, phone: int) -> None:
        src.append(frm)
        dst.append(to)
        label.append(pdf)
        weight.append(cost)
        arc_phone.append(phone)

    def state(key: tuple[int, int, int, int]) -> int:
        if key not in index:
            index[key] = len(index) + 1  # 0 is the start state
            todo.append(key)
        return index[key]

    def forward(hmm: Sequence[HmmState], i: int, k: int, t: float) -> np.float32:
        """The weight of HMM state `i`'s transition to `k` among its non-self-loop ones (Kaldi's H)."""
        return _cost(t / (1.0 - hmm[i].loop_probability(i)))

    def enter(frm: int, lm_state: int, leaving: np.float32) -> None:
        """Arcs from graph state `frm` (whose own forward weight is `leaving`) into every phone that LM state
        `lm_state` allows."""
        for p, w, d in lm_arcs[lm_state]:
            hmm = topology.phones[p]
            for k, t in hmm[0].transitions:
                if k != 0:
                    cost = np.float32(np.float32(leaving + w) + forward(hmm, 0, k, t))
                    arc(frm, state((d, p, 0, k)), pdfs[p][hmm[0].forward_pdf_class], cost, p)

    finals: dict[int, np.float32] = {0: np.float32(lm.final[lm.start])}
    enter(0, lm.start, np.float32(0.0))
    while todo:
        key = todo.pop()
        d, p, i, j = key
        here = index[key]
        hmm = topology.phones[p]
        loop = hmm[i].loop_probability(i)
        leaving = _cost(1.0 - loop) if loop else np.float32(0.0)
        if loop:
            arc(here, here, pdfs[p][hmm[i].self_loop_pdf_class], _cost(loop), p)
        if j == len(hmm):
            finals[here] = np.float32(np.float32(lm.final[d]) + leaving)
            enter(here, d, leaving)
        else:
            for k, t in hmm[j].transitions:
                if k != j:
                    cost = np.float32(leaving + forward(hmm, j, k, t))
                    arc(here, state((d, p, j, k)), pdfs[p][hmm[j].forward_pdf_class], cost, p)
    n = len(index) + 1
    final_weights = np.full(n, np.inf, np.float32)
    for s, f in finals.items():
        final_weights[s] = f
    labels = np.asarray(label, np.int32) + 1
    lm_state = np.full(n, lm.start, np.int64)
    for key, s in index.items():
        lm_state[s] = key[0]
    fst = Fst(
        start=0,
        final=final_weights,
        src=np.asarray(src, np.int32),
        dst=np.asarray(dst, np.int32),
        ilabel=labels,
        olabel=labels.copy(),
        weight=np.asarray(weight, np.float32),
    )
    return fst, np.asarray(arc_phone, np.int64), lm_state
