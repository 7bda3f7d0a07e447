"""Decoding graphs for CTC-trained networks: the token graph T and TLG = T o min(det(L o G)).

A CTC network's output 0 is the blank and outputs 1..K-1 are tokens (phones, letters, word pieces), whose ids
in the `Lang`'s phone table must be the same numbers. T reads one output per frame (input label = output + 1,
as 0 is epsilon; `ctc_transition_pdfs` maps them back for `DecodingGraph.of`) and writes the collapsed token
sequence: repeats of a token merge unless a blank separates them, blanks write nothing. States: the blank state
(start) and one per token, each final; a token's state loops on the token, goes back to the blank state on a
blank, and to another token's state on that token, writing it. For TLG each of L's disambiguation symbols is
read and written by a self-loop on every state of T, then made epsilon after the composition.
"""

from __future__ import annotations

import numpy as np

from ...kaldi_io.fst import Fst
from .compose import compose
from .determinize import determinize
from .lexicon import Lang
from .minimize import minimize
from .rmeps import remove_epsilons
from .wfst import GraphBuildError, Wfst

__all__ = ["ctc_token_graph", "ctc_transition_pdfs", "make_tlg"]


def ctc_transition_pdfs(num_outputs: int) -> np.ndarray:
    """The label -> network output map of T (label 0 epsilon, label k output k - 1)."""
    return np.arange(-1, num_outputs, dtype=np.int64)


def _token_graph(num_outputs: int, disambig: tuple[int, ...] = ()) -> Wfst:
    if num_outputs < 2:
        raise GraphBuildError(f"a CTC network has a blank and at least one token: {num_outputs} outputs")
    t = Wfst()
    for _ in range(num_outputs):
        t.add_state(0.0)
    blank = 1
    for s in range(num_outputs):
        t.add_arc(s, blank, 0, 0.0, 0)
        for k in range(1, num_outputs):
            t.add_arc(s, k + 1, 0 if k == s else k, 0.0, k)
        for n, d in enumerate(disambig):
            t.add_arc(s, num_outputs + 1 + n, d, 0.0, s)
    return t


def ctc_token_graph(num_outputs: int) -> Fst:
    """T for a network of `num_outputs` outputs (blank 0): frame labels in, collapsed tokens out."""
    return _token_graph(num_outputs).to_fst()


def make_tlg(lang: Lang, grammar: Fst, num_outputs: int) -> Fst:
    """The decoding graph of a CTC network with `num_outputs` outputs for `grammar` and `lang`'s lexicon of
    tokens: decode it with `DecodingGraph.of(tlg, ctc_transition_pdfs(num_outputs))`, acoustic scale 1.0, on
    the network's log-softmax outputs."""
    tokens = set(lang.phones.values()) - set(lang.disambig_phones) - {0}
    names = {i: p for p, i in lang.phones.items()}
    for token in sorted(tokens):
        if token >= num_outputs:
            raise GraphBuildError(f"token {names[token]!r} has id {token}, past the network's {num_outputs} outputs")
    names_w = {i: w for w, i in lang.words.items()}
    for label in set(grammar.ilabel.tolist()) - lang.pronounced - {0, lang.words.get("#0")}:
        raise GraphBuildError(f"the grammar has word {names_w.get(label, label)!r}, which the lexicon does not spell")
    lg = minimize(determinize(compose(Wfst.of(lang.lexicon_fst), Wfst.of(grammar)), "log"))
    t = _token_graph(num_outputs, lang.disambig_phones)
    labels = range(num_outputs + 1, num_outputs + 1 + len(lang.disambig_phones))
    tlg = compose(t, lg).map_labels(ilabels=dict.fromkeys(labels, 0))
    return minimize(remove_epsilons(tlg, "log")).to_fst()
