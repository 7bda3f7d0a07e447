"""HCLG from a lexicon, a grammar and a monophone transition model, in the steps of Kaldi's `utils/mkgraph.sh`.

LG = min(det(L o G)) in the log semiring; with monophones the context transducer C maps each phone to itself,
so it is left out. H (`make-h-transducer`) maps each phone to its HMM's transition-ids, without self-loops:
each HMM transition that is not a self-loop, weighted by its probability renormalised without the self-loop
(times `transition_scale`); each phone disambiguation symbol to a new input label past the transition-ids.
HCLG = min(rmeps(det(H o LG) with those labels made epsilon)), and then the self-loops (`add-self-loops
--reorder=true`): a state entered by a transition of HMM state s gets s's self-loop, and its outgoing arcs
and final weight s's probability of leaving, both as `self_loop_scale` times -log probability (mkgraph.sh:
0.1 for cross-entropy models, 1.0 for chain models).

A transition model with more than one pdf for an HMM state of a phone is context dependent: its graph needs
the decision tree (not read here), and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from ...kaldi.models.transition_model import HmmState, TopologyEntry, TransitionModel
from ...kaldi_io.fst import Fst
from .compose import compose
from .determinize import determinize
from .lexicon import Lang
from .minimize import minimize
from .rmeps import remove_epsilons
from .wfst import GraphBuildError, Wfst

__all__ = ["chain_model", "left_to_right_model", "make_hclg"]


@attrs.frozen
class _TransitionState:
    """A transition-state of the model: its phone, HMM state, and transitions `(destination, tid, log prob)`."""

    phone: int
    hmm_state: int
    transitions: tuple[tuple[int, int, float], ...]

    @property
    def self_loop(self) -> tuple[int, float] | None:
        return next(((t, p) for d, t, p in self.transitions if d == self.hmm_state), None)

    @property
    def leave_log_prob(self) -> float:
        """log(1 - self-loop probability), Kaldi's GetNonSelfLoopLogProb."""
        loop = self.self_loop
        return math.log1p(-math.exp(loop[1])) if loop else 0.0


def left_to_right_model(phones: Sequence[int], num_states: int = 3, self_loop: float = 0.5) -> TransitionModel:
    """A monophone transition model as `gmm-init-mono` makes one (pdfs numbered by phone, in increasing order,
    then by state) for `num_states` left-to-right states per phone, each staying with probability `self_loop`:
    for graphs of networks trained on alignments made outside Kaldi."""
    if not 0.0 < self_loop < 1.0 or num_states < 1 or not phones:
        raise GraphBuildError(
            f"no left-to-right model of {num_states} states, self-loop {self_loop}, {len(phones)} phones"
        )
    return _monophone_model(
        phones, [HmmState(j, j, ((j, self_loop), (j + 1, 1.0 - self_loop))) for j in range(num_states)]
    )


def chain_model(phones: Sequence[int]) -> TransitionModel:
    """A monophone transition model of Kaldi's chain topology (steps/nnet3/chain/gen_topo.py: one state, its
    first frame pdf-class 0, later frames pdf-class 1, self-loop and exit 0.5 each), pdfs numbered as
    `gmm-init-mono` numbers them (`symnet.chain.Topology.chain(phones).monophone_pdfs()`): the graph of a chain
    model trained on monophone numerators (mkgraph.sh's `--self-loop-scale 1.0`)."""
    if not phones:
        raise GraphBuildError("no chain model of no phones")
    return _monophone_model(phones, [HmmState(0, 1, ((0, 0.5), (1, 0.5)))])


def _monophone_model(phones: Sequence[int], states: list[HmmState]) -> TransitionModel:
    """One topology entry of emitting `states` for all `phones`, each phone its own pdfs (one per pdf-class, in
    the phones' increasing order)."""
    classes = 1 + max(max(state.forward_pdf_class, state.self_loop_pdf_class) for state in states)
    ordered = sorted(phones)
    tuples = [
        (p, j, n * classes + state.forward_pdf_class, n * classes + state.self_loop_pdf_class)
        for n, p in enumerate(ordered)
        for j, state in enumerate(states)
    ]
    log_probs = [0.0] + [math.log(float(p)) for phone, j, _, _ in tuples for _, p in states[j].transitions]
    return TransitionModel([TopologyEntry(ordered, [*states, HmmState(-1, -1)])], tuples, np.array(log_probs))


def _transition_states(tm: TransitionModel) -> list[_TransitionState]:
    """Kaldi's numbering: transition-states from 1 in tuple order, their transitions' ids from 1 in order."""
    topology = {p: entry.states for entry in tm.topology for p in entry.phones}
    out, tid = [], 1
    for phone, hmm_state, _, _ in tm.tuples:
        arcs = []
        for dst, _ in topology[phone][hmm_state].transitions:
            arcs.append((dst, tid, float(tm.log_probs[tid])))
            tid += 1
        out.append(_TransitionState(phone, hmm_state, tuple(arcs)))
    return out


def _h_transducer(tm: TransitionModel, lang: Lang, scale: float) -> tuple[Wfst, list[int]]:
    """H without self-loops (one loop state; each phone's HMM from it and back), and the input labels it gives
    the disambiguation symbols."""
    states = _transition_states(tm)
    by_phone: dict[int, dict[int, _TransitionState]] = {}
    for ts in states:
        if ts.hmm_state in by_phone.setdefault(ts.phone, {}):
            raise GraphBuildError(
                f"phone {ts.phone} has several pdfs for HMM state {ts.hmm_state}: a context-dependent model needs "
                "its tree, which is not supported (monophone models only)"
            )
        by_phone[ts.phone][ts.hmm_state] = ts
    topology = {p: entry.states for entry in tm.topology for p in entry.phones}
    h = Wfst()
    loop = h.add_state(0.0)
    disambig = set(lang.disambig_phones)
    names = {i: p for p, i in lang.phones.items()}
    for phone in sorted(set(lang.phones.values()) - disambig - {0}):
        if phone not in topology:
            raise GraphBuildError(f"phone {names[phone]!r} ({phone}) is not in the transition model's topology")
        hmm = topology[phone]
        copy = [h.add_state() for _ in hmm]
        h.add_arc(loop, 0, phone, 0.0, copy[0])
        h.add_arc(copy[-1], 0, 0, 0.0, loop)
        for j, state in enumerate(hmm):
            if state.forward_pdf_class == -1:  # a non-emitting state: epsilon arcs
                for dst, prob in state.transitions:
                    h.add_arc(copy[j], 0, 0, -scale * math.log(prob), copy[dst])
                continue
            ts = by_phone[phone][j]
            for dst, tid, log_prob in ts.transitions:
                if dst != j:
                    h.add_arc(copy[j], tid, 0, -scale * (log_prob - ts.leave_log_prob), copy[dst])
    labels = []
    for n, d in enumerate(lang.disambig_phones):
        labels.append(len(tm.log_probs) + n)  # past the last transition-id
        h.add_arc(loop, labels[-1], d, 0.0, loop)
    return h, labels


def _add_self_loops(fst: Wfst, tm: TransitionModel, scale: float) -> Wfst:
    """Kaldi's AddSelfLoops with reorder: where arcs of several transition-states enter a state, each of them
    enters a new state of its own instead, which goes on to the old one by an epsilon arc; then each state
    entered by a transition-state's arcs gets its self-loop, and its leaving probability on the arcs out."""
    states = _transition_states(tm)
    tstate = np.zeros(len(tm.log_probs), dtype=np.int64)
    for n, ts in enumerate(states, 1):
        for _, tid, _ in ts.transitions:
            tstate[tid] = n
    out = Wfst()
    out.start, out.final = fst.start, list(fst.final)
    out.arcs = [list(arcs) for arcs in fst.arcs]
    entering: list[set[int]] = [set() for _ in out.final]
    entering[out.start].add(0)
    for _, (i, _, _, d) in fst.all_arcs():
        entering[d].add(int(tstate[i]) if 0 < i < len(tstate) else 0)
    kind = [next(iter(k)) if len(k) == 1 else 0 for k in entering]
    split: dict[tuple[int, int], int] = {}
    for arcs in out.arcs[: fst.num_states]:
        for n, (i, o, w, d) in enumerate(arcs):
            k = int(tstate[i]) if 0 < i < len(tstate) else 0
            if k and kind[d] != k:
                if (d, k) not in split:
                    split[(d, k)] = out.add_state()
                    kind.append(k)
                    out.add_arc(split[(d, k)], 0, 0, 0.0, d)
                arcs[n] = (i, o, w, split[(d, k)])
    for s, k in enumerate(kind):
        if k:
            ts = states[k - 1]
            leave = -scale * ts.leave_log_prob
            out.final[s] += leave
            out.arcs[s] = [(i, o, w + leave, d) for i, o, w, d in out.arcs[s]]
            if ts.self_loop is not None:
                out.add_arc(s, ts.self_loop[0], 0, -scale * ts.self_loop[1], s)
    return out


def make_hclg(
    lang: Lang,
    grammar: Fst,
    transitions: TransitionModel,
    *,
    transition_scale: float = 1.0,
    self_loop_scale: float = 0.1,
) -> Fst:
    """The decoding graph for `grammar` (G over `lang.words`' ids, `#0` on backoff arcs) with `lang`'s lexicon
    and `transitions`' HMMs: input labels transition-ids, output labels words. Decode it with
    `DecodingGraph.of(hclg, transitions.transition_pdfs())`."""
    names = {i: w for w, i in lang.words.items()}
    hash0 = lang.words.get("#0")
    for label in set(grammar.ilabel.tolist()) - lang.pronounced - {0, hash0}:
        name = f"word {names[label]!r} ({label})" if label in names else f"word id {label}"
        raise GraphBuildError(f"the grammar has {name}, which the lexicon does not pronounce")
    lg = minimize(determinize(compose(Wfst.of(lang.lexicon_fst), Wfst.of(grammar)), "log"))
    h, disambig = _h_transducer(transitions, lang, transition_scale)
    hclg = determinize(compose(h, lg), "log").map_labels(ilabels=dict.fromkeys(disambig, 0))
    hclg = minimize(remove_epsilons(hclg, "log"))
    return _add_self_loops(hclg, transitions, self_loop_scale).to_fst()
